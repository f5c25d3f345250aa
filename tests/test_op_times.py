"""The time of each operation of a compiled program, and the step as their
sum, against the chip's own profiles (tests/data/chip/v5e-1x1-ops.jsonl.gz,
made on one v5e chip by bench/records/chip/profile_record.py)."""

from __future__ import annotations

import gzip
import json
import lzma
import pathlib

import pytest

from shardviz.target.chips import HARDWARE
from shardviz.target.op_time import op_time_model, step_seconds, timed_ops
from shardviz.trace.program_ops import program_ops

DATA = pathlib.Path(__file__).parent / "data" / "chip"


def _profiles() -> dict[str, dict]:
    with gzip.open(DATA / "v5e-1x1-ops.jsonl.gz", "rt", encoding="utf-8") as f:
        return {r["case"]: r for r in map(json.loads, f)}


PROFILES = _profiles()
PROGRAMS = sorted(p.name.removesuffix(".hlo.xz") for p in (DATA / "hlo").glob("*.hlo.xz"))


def _program(case: str) -> str:
    return lzma.open(DATA / "hlo" / f"{case}.hlo.xz", "rt", encoding="utf-8").read()


@pytest.mark.parametrize("case", PROGRAMS)
def test_the_programs_operations_are_the_ones_the_chip_ran(case):
    """The program compiled here for v5e:1x1 is the one the chip ran: almost
    every operation the profile timed has the same name in it."""
    ops = program_ops(_program(case))
    names = {o.name for o in ops}
    profile = PROFILES[case]["profile"]
    timed = sum(o[2] for o in profile["ops"])
    found = sum(o[2] for o in profile["ops"] if o[0] in names)
    assert found / timed > 0.85, (case, found / timed)


@pytest.mark.parametrize("case", PROGRAMS)
def test_the_expected_step_is_within_10_percent_of_the_chip(case):
    model = op_time_model("v5e")
    record = PROFILES[case]
    expected, device = step_seconds(timed_ops(program_ops(_program(case)), model,
                                              HARDWARE["v5e"]), model)
    assert expected == pytest.approx(record["step_seconds"], rel=0.10), (
        case, expected, record["step_seconds"])
    assert device > 0


def test_the_flops_read_from_the_program_are_the_compilers_own_count():
    """The flops summed over the operations agree with XLA's cost analysis of
    the same program (to 10%: shardviz counts an attention kernel's work,
    which XLA's count leaves out, and pads nothing)."""
    for case in ("decoder_fit_b4", "dict_model_fit_b4"):
        if case not in PROGRAMS:
            continue
        ops = program_ops(_program(case))
        ours = sum(o.flops * o.count for o in ops)
        assert ours == pytest.approx(PROFILES[case]["cost"]["flops"], rel=0.10)


def test_a_model_is_fitted_for_every_tpu_and_none_for_a_gpu():
    model = op_time_model("v5e")
    assert set(model.fitted_on) <= set(PROFILES)
    assert op_time_model("v5p").parameters == model.parameters  # carried over, and said so
    assert "carried over" in model.describe(HARDWARE["v5p"])
    assert op_time_model("h100") is None
