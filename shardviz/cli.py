"""The command line: ``shardviz report`` and ``shardviz demo``.

    shardviz report mypkg.models:build --mesh batch=2,model=4 \\
        --rule '.*kernel=None,model' --inputs 8x128:int32 --fail-on unused-rule,conflict

Exit codes of ``shardviz report``:

* 0: the report holds no error, and no guard failed;
* 1: the report holds an error (Keras would refuse the plan, or the forward
  pass failed), or a guard (``--fail-on``, ``--max-replicated-bytes``)
  failed; ``--fail-on never`` ignores the report's errors;
* 2: a usage error (a missing builder, a malformed option, an unreadable plan
  file, an output that cannot be written), always as one line with its hint;
* 141: stdout was closed before the output was written (a pipe into
  ``head``), quietly.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import textwrap
import time

from . import __version__
from .builders import BuilderError, load_builder
from .errors import KINDS, SEVERITIES, ShardvizError
from .format import format_spec, human_bytes, human_seconds
from .inputs import MAX_DIM
from .plan import AXIS_NAME, as_bytes, check_axis_name


class UsageError(Exception):
    """A one-line error for the user; exit code 2."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.message, self.hint = message, hint

    @classmethod
    def of(cls, error: ShardvizError, prefix: str = "") -> UsageError:
        return cls(prefix + error.message, error.hint)

    def line(self) -> str:
        text = " ".join(self.message.split())
        if self.hint:
            text += f" (hint: {' '.join(self.hint.split())})"
        return f"shardviz: error: {text}"

EXIT_CODES = """exit codes:
  0  no error in the report, and no guard failed
  1  the report holds an error (Keras would refuse the plan, or the forward pass
     failed), or a guard failed; --fail-on never ignores the report's errors
  2  a usage error: a bad option, a missing builder, an unreadable plan file,
     an output file that cannot be written"""

SUGGEST_EXIT_CODES = """exit codes:
  0  plans were found (the best is written with --plan-out)
  1  no plan fits the budget or the target
  2  a usage error"""
VERIFY_EXIT_CODES = """exit codes:
  0  every shard on every host agrees with shardviz, and the gathered output
     matches a single-process run
  1  a disagreement, a worker that crashed or failed, or a run past --timeout
     (one line each)
  2  a usage error, a plan that Keras refuses (Keras's message), or a builder
     that builds different weights in each process"""
SWEEP_EXIT_CODES = """exit codes:
  0  the rules work on at least one mesh shape
  1  they fail on every mesh shape
  2  a usage error"""


# ---------------------------------------------------------------- parsing
def parse_mesh(text: str) -> dict[str, int]:
    """``"batch=2,model=4"`` as ``{"batch": 2, "model": 4}``.

    >>> parse_mesh("batch=2,model=4")
    {'batch': 2, 'model': 4}
    """
    mesh = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(\d+)\s*", part)
        if not m:
            raise UsageError(f"--mesh {text!r}: {part.strip()!r} is not NAME=SIZE "
                             "(write e.g. --mesh batch=2,model=4)")
        if m.group(1) in mesh:
            raise UsageError(f"--mesh {text!r}: axis {m.group(1)!r} appears twice")
        try:
            check_axis_name(m.group(1))
        except ShardvizError as e:
            raise UsageError.of(e, f"--mesh {text!r}: ") from None
        mesh[m.group(1)] = int(m.group(2))
    return mesh


def parse_rule(text: str) -> tuple[str, tuple]:
    """``"KEY=AXES"``, AXES a comma list of mesh axes and None (or -).

    >>> parse_rule(".*kernel=None,model")
    ('.*kernel', (None, 'model'))
    """
    if "=" not in text:
        raise UsageError(f"--rule {text!r} is not KEY=AXES (write e.g. --rule '.*kernel=None,model')")
    key, axes = text.rsplit("=", 1)
    if not key:
        raise UsageError(f"--rule {text!r} has an empty key")
    out: list[str | None] = []
    for token in axes.split(","):
        token = token.strip()
        if token in ("None", "none", "-", ""):
            out.append(None)
        elif AXIS_NAME.fullmatch(token):
            out.append(token)
        else:
            raise UsageError(f"--rule {text!r}: {token!r} is not a mesh axis name or None")
    return key, tuple(out)


def parse_inputs(text: str, flag: str = "--inputs"):
    """``"8x128[:dtype]"`` as a ``jax.ShapeDtypeStruct``.

    >>> parse_inputs("8x128:int32")
    ShapeDtypeStruct(shape=(8, 128), dtype=int32)
    """
    import jax
    import jax.numpy as jnp

    dtype: str | jnp.dtype
    shape_text, _, dtype = text.partition(":")
    if not re.fullmatch(r"\d+(x\d+)*", shape_text.strip()):
        raise UsageError(f"{flag} {text!r} is not a shape like 8x128 or 8x128:int32")
    try:
        dtype = jnp.dtype(dtype or "float32")
    except TypeError:
        raise UsageError(f"{flag} {text!r}: {dtype!r} is not a dtype (e.g. float32, int32, "
                         "bfloat16)") from None
    shape = tuple(int(d) for d in shape_text.split("x"))
    if max(shape) > MAX_DIM:
        raise UsageError(f"{flag} {text!r:.60}: a dimension holds at most {MAX_DIM:,}")
    return jax.ShapeDtypeStruct(shape, dtype)


def parse_bytes(text: str, flag: str = "--max-replicated-bytes") -> int:
    """``"64MB"`` as bytes (KB, MB, GB are powers of 1000; KiB, MiB, GiB of 1024).

    >>> parse_bytes("64MB"), parse_bytes("1GiB"), parse_bytes("512")
    (64000000, 1073741824, 512)
    """
    try:
        return as_bytes(text, flag)
    except ShardvizError:
        raise UsageError(f"{flag} {text!r:.60} is not a size like 64MB or 2GiB") from None


def parse_fail_on(text: str) -> set[str]:
    """Problem kinds and severities to fail on; ``never`` for none.

    >>> sorted(parse_fail_on("unused-rule,warning")), parse_fail_on("never")
    (['unused-rule', 'warning'], {'never'})
    """
    kinds = {k.strip() for k in text.split(",") if k.strip()}
    if "never" in kinds and len(kinds) > 1:
        raise UsageError("--fail-on never cannot be combined with other kinds")
    unknown = sorted(k for k in kinds if k not in KINDS and k not in SEVERITIES and k != "never")
    if unknown:
        raise UsageError(f"--fail-on: unknown kind {unknown[0]!r}; kinds: {', '.join(sorted(KINDS))}"
                         f"; or a severity: {', '.join(SEVERITIES)}; or never")
    return kinds


# ---------------------------------------------------------------- commands
class Progress:
    """Stage messages on stderr (a spinner on a terminal), unless quiet."""

    def __init__(self, quiet: bool):
        self.quiet = quiet
        self.start = time.perf_counter()
        self.status = None
        if not quiet and sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status("starting…")
            self.status.start()

    def __call__(self, stage: str):
        if self.quiet:
            return
        message = f"{stage}…"
        if self.status is not None:
            self.status.update(message)
        else:
            print(f"shardviz: {message} ({time.perf_counter() - self.start:.1f} s)", file=sys.stderr)

    def stop(self):
        if self.status is not None:
            self.status.stop()


def build_plan(args):
    from .plan import Plan

    if args.plan:
        if args.mesh or args.rule:
            raise UsageError("give either --plan or --mesh/--rule, not both")
        try:
            with open(args.plan, "rb") as f:
                data = f.read(16 * 2**20 + 1)
        except OSError as e:
            raise UsageError(f"cannot read plan file {args.plan!r}: {e.strerror}") from None
        if len(data) > 16 * 2**20:
            raise UsageError(f"plan file {args.plan!r} is larger than 16 MiB; it is not a plan")
        try:
            return Plan.from_json(data)
        except ShardvizError as e:
            raise UsageError.of(e, f"plan file {args.plan!r}: ") from None
    if not args.mesh:
        raise UsageError("give a plan: --plan plan.json, or --mesh batch=2,model=4 with --rule KEY=AXES")
    mesh = parse_mesh(args.mesh)
    rules = [parse_rule(r) for r in args.rule or []]
    try:
        return Plan(mesh, rules, args.batch_axis)
    except ShardvizError as e:
        raise UsageError.of(e) from None


def guard_failures(report, fail_on: set[str], max_replicated: int | None) -> list[str]:
    """One ``FAIL`` line per problem that fails the run. By default every
    error fails it; ``fail_on`` adds kinds and severities, ``{"never"}``
    fails nothing."""
    if "never" in fail_on:
        return []
    fail_on = fail_on | {"error"}
    lines = []
    severities = [s for s in SEVERITIES if s in fail_on]
    for p in report.problem_list:
        if p.kind in fail_on or any(p.at_least(s) for s in severities):
            where = p.path or p.rule or p.layer or "-"
            lines.append(f"FAIL {p.kind} {where}: {' '.join(p.message.split())}")
    if max_replicated is not None:
        for p in report.replicated_large(max_replicated):
            lines.append(f"FAIL replicated-large {p.path}: {p.message}")
    return lines


def check_outputs(args) -> None:
    """Refuse output paths that cannot be written, before any work starts."""
    for flag in ("html", "json", "plan_out", "png"):
        path = getattr(args, flag, None)
        if path:
            _check_writable(path, "--" + flag.replace("_", "-"))


def _check_writable(path: str, flag: str) -> None:
    """Refuse an output path that is a directory, in a folder that does not
    exist, or that cannot be opened for writing."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a directory", hint="Give a file name.")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UsageError(f"{flag} {path!r}: the folder {folder!r} does not exist",
                         hint="Create it first, or write elsewhere.")
    exists = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        raise UsageError(f"{flag} {path!r} cannot be written: {e.strerror}") from None
    if not exists:
        try:
            os.remove(path)
        except OSError:
            pass


def _write_file(path: str, flag: str, write) -> None:
    """Write an output file with ``write(file)``; a failure (a full disk, a
    device that refuses data) is a one-line usage error."""
    try:
        with open(path, "wb") as f:
            write(f)
    except OSError as e:
        raise UsageError(f"{flag} {path!r} could not be written: {e.strerror or e}",
                         hint="Write it elsewhere.") from None


def write_outputs(report, args, title):
    from .render.export import report_html_file, report_to_json

    if args.html:
        page = report_html_file(report, title).encode("utf-8")
        _write_file(args.html, "--html", lambda f: f.write(page))
        if not args.quiet:
            print(f"shardviz: wrote {args.html}", file=sys.stderr)
    if args.json:
        data = report_to_json(report).encode("utf-8")
        _write_file(args.json, "--json", lambda f: f.write(data))
        if not args.quiet:
            print(f"shardviz: wrote {args.json}", file=sys.stderr)


def print_report(report, args):
    from .render.text import report_text, summary_line

    if args.quiet:
        print(summary_line(report))
        return
    width = max(80, shutil.get_terminal_size((120, 40)).columns)
    print(report_text(report, width=width, max_rows=None if args.verbose else 40))


def print_explanations(report, args) -> None:
    """``--explain``: why each collective is there, and its fix."""
    n = len(report.collectives)
    if report.trace is None:
        print("\nNo collectives to explain: the forward pass did not run"
              + (" (pass --inputs)." if not args.inputs else "."))
        return
    if n == 0:
        print("\nNo collectives to explain: the pass communicates nothing.")
        return
    progress = Progress(args.quiet)
    try:
        for i in range(n):
            progress(f"explaining collective {i + 1} of {n} (compiling the changes it suggests)")
            report.why(i, progress=lambda line, i=i: progress(
                f"collective {i + 1} of {n}: {line.split(': ', 1)[-1]}"))
    finally:
        progress.stop()
    if args.quiet:
        return
    width = max(60, shutil.get_terminal_size((100, 40)).columns - 1)
    print("\nWhy each collective is there")
    for why in report.explanations():
        print()
        print(why.text_block(width))


def cmd_report(args) -> int:
    check_outputs(args)
    args.simulate = args.devices
    _start(args)
    plan = build_plan(args)
    inputs = [parse_inputs(t) for t in args.inputs or []]
    labels = [parse_inputs(t, "--labels") for t in args.labels or []]
    if labels and not args.train_step:
        raise UsageError("--labels are the y of a train step; add --train-step")
    fail_on = parse_fail_on(args.fail_on) if args.fail_on else set()
    max_replicated = parse_bytes(args.max_replicated_bytes) if args.max_replicated_bytes else None
    builder = load_builder(args.builder)
    progress = Progress(args.quiet)
    try:
        from .analysis import analyze

        progress("scanning the model")
        report = analyze(builder, plan, (inputs[0] if len(inputs) == 1 else inputs) or None,
                         mode="concrete" if args.run else "abstract", train_step=args.train_step,
                         labels=(labels[0] if len(labels) == 1 else labels) or None,
                         progress=progress, target=args.target, slices=args.slices,
                         dcn_axes=(args.dcn_axis,) if args.dcn_axis else None)
    except ShardvizError as e:
        raise UsageError.of(e) from None
    finally:
        progress.stop()
    print_report(report, args)
    if args.explain:
        print_explanations(report, args)
    write_outputs(report, args, f"shardviz report: {args.builder}")
    failures = guard_failures(report, fail_on, max_replicated)
    for line in failures:
        print(line)
    return 1 if failures else 0


def cmd_demo(args) -> int:
    from . import examples, simulate_devices
    from .analysis import analyze

    check_outputs(args)
    simulate_devices(8)
    plan = examples.transformer_plan().with_rule("attn/output/kernel", ("model", None, None))
    progress = Progress(args.quiet)
    try:
        progress("analysing the example transformer block")
        report = analyze(examples.transformer_block, plan, (8, 16, 64), progress=progress)
    finally:
        progress.stop()
    args.json = None
    print_report(report, args)
    write_outputs(report, args, "shardviz demo: a tensor-parallel transformer block")
    if not args.quiet:
        print("\nThe demo plan has one deliberate mistake: the rule 'attn/output/kernel' matches "
              "nothing\n(the projection's kernel is 'attn/attention_output/kernel').")
        print(f"Open {args.html} for the tables and pictures.")
    return 0


def _start(args) -> None:
    from . import simulate_devices
    from .devices import cpu_only

    if getattr(args, "simulate", None) is not None:
        try:
            simulate_devices(args.simulate)
        except ShardvizError as e:
            raise UsageError.of(e, f"--devices {args.simulate}: ") from None
    else:
        cpu_only()


def _inputs(args):
    inputs = [parse_inputs(t) for t in args.inputs or []]
    return (inputs[0] if len(inputs) == 1 else inputs) or None


def cmd_suggest(args) -> int:
    """``shardviz suggest``: ranked plans, and the best one written out."""
    from .planner import suggest

    if args.devices is not None and args.devices < 1:
        raise UsageError(f"--devices {args.devices}: give a positive device count")
    if args.top < 1:
        raise UsageError(f"--top {args.top}: give how many plans to show, at least 1")
    check_outputs(args)
    # Compiling needs the devices; without a target the CPUs are simulated.
    args.simulate = args.devices if (args.inputs and not args.target) else None
    _start(args)
    budget = parse_bytes(args.budget, "--budget") if args.budget else None
    builder = load_builder(args.builder)
    progress = Progress(args.quiet)
    try:
        progress("recognising the model's structure and ranking plans")
        found = suggest(builder, devices=args.devices, target=args.target, inputs=_inputs(args),
                        budget_bytes=budget, train_step=args.train_step, top=args.top)
    except ShardvizError as e:
        raise UsageError.of(e) from None
    finally:
        progress.stop()
    if not found:
        why = ""
        if found.smallest is not None:
            size, mesh, name = found.smallest
            why = f": the smallest plan ({name} on {mesh}) needs {human_bytes(size)} per device"
        print("No plan fits" + (f" within {args.budget}" if budget else "") + why + ".")
        return 1
    import pandas as pd

    width = max(80, shutil.get_terminal_size((100, 40)).columns)
    table = found.table
    shown = pd.DataFrame({
        "#": range(len(table)), "plan": table["name"], "mesh": table["mesh"],
        "per device": table["bytes_per_device"].map(human_bytes),
        "communicated": table["comm_bytes"].map(human_bytes),
        "compiled": table["compiled"].map({True: "yes", False: "no (estimates)"})})
    print(shown.to_string(index=False))
    if not args.quiet:
        for i, c in enumerate(found):
            print(f"\n[{i}] {c.name} on {table['mesh'][i]}")
            for note in c.notes:
                print(textwrap.fill(f"note: {note}", width, initial_indent="  ",
                                    subsequent_indent="    "))
            for r in c.plan.rules:
                print(f"  {r.key!r}: {format_spec(r.axes)}")
                print(textwrap.fill(c.reasons.get(r.key, ""), width, initial_indent="    ",
                                    subsequent_indent="    "))
    if args.plan_out:
        text = found[0].plan.to_json().encode("utf-8")
        _write_file(args.plan_out, "--plan-out", lambda f: f.write(text))
        if not args.quiet:
            print(f"\nshardviz: wrote the best plan ({found[0].name}) to {args.plan_out}",
                  file=sys.stderr)
    return 0


def cmd_sweep(args) -> int:
    """``shardviz sweep``: one rule set over every mesh shape."""
    from .planner import sweep

    if args.devices is None or args.devices < 1:
        raise UsageError("give --devices N, the device count to sweep mesh shapes over")
    rules = [parse_rule(r) for r in args.rule or []]
    if not rules and not args.plan:
        raise UsageError("give the rules to sweep: --rule KEY=AXES (repeatable) or --plan plan.json")
    if args.plan:
        args.mesh = None
        plan = build_plan(args)
        rules = [(r.key, r.axes) for r in plan.rules]
    check_outputs(args)
    args.simulate = args.devices if (args.inputs and not args.target) else None
    _start(args)
    builder = load_builder(args.builder)
    progress = Progress(args.quiet)
    try:
        progress(f"analysing the rules on every mesh of {args.devices} devices")
        frame = sweep(builder, rules, devices=args.devices, target=args.target,
                      inputs=_inputs(args), batch_axis=args.batch_axis)
    except ShardvizError as e:
        raise UsageError.of(e) from None
    finally:
        progress.stop()
    shown = frame.copy()
    shown["bytes_per_device"] = shown["bytes_per_device"].map(human_bytes)
    shown["collective_bytes"] = shown["collective_bytes"].map(
        lambda b: "—" if b is None or b != b else human_bytes(int(b)))
    shown["fits"] = shown["fits"].map(lambda f: "—" if f is None or f != f else
                                      ("yes" if f else "no"))
    shown["seconds"] = shown["seconds"].map(lambda t: "—" if t is None or t != t else
                                            human_seconds(t))
    print(shown.drop(columns=["first_error"]).to_string(index=False))
    failing = frame[frame["errors"] > 0]
    if len(failing) and not args.quiet:
        print("\nThe first error on each mesh where the rules fail:")
        for mesh, message in zip(failing["mesh"], failing["first_error"]):
            print(f"  {mesh}: {message}")
    if args.png:
        from .render.pictures import show_sweep

        figure = show_sweep(frame)
        _write_file(args.png, "--png", lambda f: figure.savefig(f, format="png"))
    return 1 if frame["errors"].gt(0).all() else 0


def cmd_verify(args) -> int:
    """``shardviz verify``: the plan on a local multi-process cluster."""
    from .multihost import PlanRefused, TimedOut, check_timeout, verify

    def named_inputs(texts: list[str]):
        """``--inputs`` as one spec, a list, or a dict for ``NAME=SHAPE[:DTYPE]``."""
        pairs: list[tuple[str | None, object]] = []
        for text in texts:
            name, eq, rest = text.partition("=")
            if eq and re.fullmatch(r"[A-Za-z_][\w.-]*", name.strip()):
                pairs.append((name.strip(), parse_inputs(rest.strip(), f"--inputs {name}=")))
            else:
                pairs.append((None, parse_inputs(text)))
        named = [n for n, _ in pairs if n is not None]
        if not named:
            specs = [spec for _, spec in pairs]
            return specs[0] if len(specs) == 1 else specs
        if len(named) != len(pairs):
            raise UsageError("--inputs: name every input (NAME=SHAPE[:DTYPE], for a model that "
                             "takes a dict) or none", hint="e.g. --inputs token_ids=8x128:int32 "
                             "--inputs padding_mask=8x128:int32")
        twice = sorted({n for n in named if named.count(n) > 1})
        if twice:
            raise UsageError(f"--inputs: the input {twice[0]!r} is given twice")
        return dict(pairs)

    if args.processes is None:
        raise UsageError("give --processes N, the number of local processes (hosts) to start")
    if args.processes < 1:
        raise UsageError(f"--processes {args.processes}: give at least 1 process")
    if not args.inputs:
        raise UsageError("give --inputs, the global batch, e.g. --inputs 8x64")
    try:
        check_timeout(args.timeout, "--timeout ")
    except ShardvizError as e:
        raise UsageError.of(e) from None
    plan = build_plan(args)
    inputs = named_inputs(args.inputs)
    try:
        load_builder(args.builder)  # a usage error now, not in every worker
    except BuilderError as e:
        raise UsageError.of(e) from None
    progress = Progress(args.quiet)
    try:
        progress(f"running the plan on {args.processes} local processes")
        result = verify(args.builder, plan, processes=args.processes, inputs=inputs,
                        timeout=args.timeout)
    except TimedOut as e:
        progress.stop()
        print(f"FAIL {' '.join(e.message.split())} (hint: {' '.join(e.hint.split())})")
        return 1
    except PlanRefused as e:
        raise UsageError.of(e) from None
    except ShardvizError as e:
        raise UsageError.of(e) from None
    finally:
        progress.stop()
    if result.agree:
        print(str(result).splitlines()[0])
        if not args.quiet:
            print(result.hosts[["process", "devices", "variable_bytes", "batch_rows",
                                "cross_host_collectives", "cross_host_bytes"]]
                  .to_string(index=False))
        return 0
    print(str(result).splitlines()[0])
    for line in result.disagreements:
        print("DISAGREE " + line)
    for line in result.failures:
        print("FAIL " + line)
    return 1


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shardviz",
        description="See how a Keras model is laid out over a device mesh, from a terminal or CI.")
    parser.add_argument("--version", action="version", version=f"shardviz {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    report = sub.add_parser("report", help="analyse a model builder under a plan",
                            description="Analyse a model (or a zero-argument builder of one) under "
                            "a plan, print the tables and problems, and check guards.",
                            epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("builder", metavar="MODULE_OR_FILE:BUILDER",
                        help="e.g. mypkg.models:build or models.py:build")
    plan = report.add_argument_group("the plan")
    plan.add_argument("--plan", metavar="PLAN.JSON", help="a plan saved with Plan.to_json()")
    plan.add_argument("--mesh", metavar="AXIS=SIZE,...", help="e.g. batch=2,model=4")
    plan.add_argument("--rule", action="append", metavar="KEY=AXES",
                      help="a layout rule, repeatable, e.g. '.*kernel=None,model'")
    plan.add_argument("--batch-axis", metavar="AXIS", help="default: the first mesh axis")
    run = report.add_argument_group("the forward pass")
    run.add_argument("--inputs", action="append", metavar="SHAPE[:DTYPE]",
                     help="e.g. 8x128:int32; repeat for several inputs")
    run.add_argument("--devices", type=int, metavar="N", help="simulate N CPU devices")
    run.add_argument("--run", action="store_true",
                     help="also execute the pass (by default it is lowered and compiled only, "
                     "allocating nothing)")
    run.add_argument("--train-step", action="store_true",
                     help="analyse the train step model.fit runs (the model's own train_step, "
                     "its loss and optimizer, state donated)")
    run.add_argument("--labels", action="append", metavar="SHAPE[:DTYPE]",
                     help="with --train-step: the labels (y) as fit takes them, e.g. "
                     "8x1024:int32; repeat for several outputs (default: zeros of the outputs' "
                     "shapes, for a model never compiled)")
    hw = report.add_argument_group("target hardware")
    hw.add_argument("--target", metavar="NAME",
                    help="plan for this hardware, e.g. v5e:4x4, v5p:2x2x4 (compiled by the TPU "
                    "compiler, needs libtpu), h100:8 (estimates); default: the simulated CPUs")
    hw.add_argument("--slices", type=int, default=1, metavar="N",
                    help="TPU slices joined by DCN, or GPU nodes (default 1)")
    hw.add_argument("--dcn-axis", metavar="AXIS",
                    help="the mesh axis that spans the slices (default: the batch axis)")
    run.add_argument("--explain", action="store_true",
                     help="explain each collective: its source line, the layouts and rules "
                     "behind it, and a fix found by recompiling the changes it suggests")
    guards = report.add_argument_group(
        "CI guards (exit code 1 when one fails; any error in the report always fails)")
    guards.add_argument("--fail-on", metavar="KINDS",
                        help="also fail on these problem kinds, e.g. unused-rule,replicated-large,"
                        " or on a severity (warning, info: every problem at least that severe); "
                        "'never' to exit 0 whatever the report holds")
    guards.add_argument("--max-replicated-bytes", metavar="SIZE",
                        help="fail on any variable at least this large left fully replicated, "
                        "e.g. 64MB or 1GiB")
    _outputs(report)

    demo = sub.add_parser("demo", epilog=None, help="run the built-in example end to end",
                          description="Analyse a built-in tensor-parallel transformer block on 8 "
                          "simulated devices and write an HTML report.")
    _outputs(demo, html_default="demo-report.html")

    suggest = sub.add_parser(
        "suggest", help="suggest plans for a model, best first",
        description="Recognise the model's structure (column and row Dense pairs, attention "
        "heads, embeddings) and suggest data-parallel, fully sharded, tensor-parallel and 2-D "
        "plans over every factorisation of the device count; with --inputs the best are "
        "compiled to confirm memory and collectives.",
        epilog=SUGGEST_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    suggest.add_argument("builder", metavar="MODULE_OR_FILE:BUILDER")
    suggest.add_argument("--devices", type=int, metavar="N",
                         help="the device count to plan for (simulated when compiling)")
    suggest.add_argument("--target", metavar="NAME", help="e.g. v5e:4x4 or h100:8")
    suggest.add_argument("--inputs", action="append", metavar="SHAPE[:DTYPE]",
                         help="compile the best plans with these inputs, e.g. 8x128:int32")
    suggest.add_argument("--budget", metavar="SIZE", help="bytes per device, e.g. 12GB")
    suggest.add_argument("--train-step", action="store_true", help="plan for a training step")
    suggest.add_argument("--top", type=int, default=5, metavar="K", help="how many (default 5)")
    suggest.add_argument("--plan-out", metavar="PLAN.JSON", help="write the best plan here")
    suggest.add_argument("-q", "--quiet", action="store_true", help="print only the table")

    sweep = sub.add_parser(
        "sweep", help="run one rule set over every mesh shape of N devices",
        description="On which mesh shapes does a rule set work, and what does each cost?",
        epilog=SWEEP_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep.add_argument("builder", metavar="MODULE_OR_FILE:BUILDER")
    sweep.add_argument("--rule", action="append", metavar="KEY=AXES",
                       help="a layout rule, repeatable")
    sweep.add_argument("--plan", metavar="PLAN.JSON", help="take the rules from a plan file")
    sweep.add_argument("--batch-axis", metavar="AXIS",
                       help="default: the first mesh axis, which is `batch` unless the rules "
                       "name it otherwise")
    sweep.add_argument("--devices", type=int, metavar="N", help="the device count")
    sweep.add_argument("--target", metavar="NAME", help="e.g. v5e:4x4")
    sweep.add_argument("--inputs", action="append", metavar="SHAPE[:DTYPE]",
                       help="compile every mesh with these inputs")
    sweep.add_argument("--png", metavar="FILE.png", help="draw the sweep to a PNG file")
    sweep.add_argument("-q", "--quiet", action="store_true", help="print only the table")

    check = sub.add_parser(
        "verify", help="run a plan on N local processes and check every shard",
        description="Start N local processes on 127.0.0.1, each with its share of the simulated "
        "devices, as N hosts of JAX's multi-process runtime. Each runs the plan's exported "
        "multi-host code and a jitted forward pass; every shard each host holds is compared "
        "with shardviz's prediction, and the gathered output with a single-process run.",
        epilog=VERIFY_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("builder", metavar="MODULE_OR_FILE:BUILDER")
    vplan = check.add_argument_group("the plan")
    vplan.add_argument("--plan", metavar="PLAN.JSON", help="a plan saved with Plan.to_json()")
    vplan.add_argument("--mesh", metavar="AXIS=SIZE,...", help="e.g. batch=2,model=4")
    vplan.add_argument("--rule", action="append", metavar="KEY=AXES", help="repeatable")
    vplan.add_argument("--batch-axis", metavar="AXIS", help="default: the first mesh axis")
    check.add_argument("--processes", type=int, metavar="N", help="how many local processes")
    check.add_argument("--inputs", action="append", metavar="[NAME=]SHAPE[:DTYPE]",
                       help="the global batch, e.g. 8x64; repeat for several inputs, with "
                       "NAME= on each for a model that takes a dict, e.g. "
                       "token_ids=8x128:int32")
    check.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                       help="stop after this long, the model built here and the processes' "
                       "run included, with every process started (default 180)")
    check.add_argument("-q", "--quiet", action="store_true", help="print only the verdict")
    return parser


def _outputs(parser, html_default=None):
    out = parser.add_argument_group("output")
    out.add_argument("--html", metavar="FILE", default=html_default,
                     help="write a self-contained HTML report" +
                     (f" (default {html_default})" if html_default else ""))
    if html_default is None:
        out.add_argument("--json", metavar="FILE", help="write the report's data as JSON")
    out.add_argument("-q", "--quiet", action="store_true", help="print only the summary line")
    out.add_argument("-v", "--verbose", action="store_true", help="print every row")


def main(argv=None) -> int:
    _replace_unencodable()
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    os.environ.setdefault("KERAS_BACKEND", "jax")
    try:
        code = {"report": cmd_report, "demo": cmd_demo, "suggest": cmd_suggest,
                "sweep": cmd_sweep, "verify": cmd_verify}[args.command](args)
        sys.stdout.flush()
        return code
    except UsageError as e:
        print(e.line(), file=sys.stderr)
        return 2
    except ShardvizError as e:
        print(UsageError.of(e).line(), file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt as e:
        if type(e) is not KeyboardInterrupt:  # a subclass raised by the user's code
            return _stopped_by(e)
        print("shardviz: interrupted", file=sys.stderr)
        return 130
    except SystemExit:
        raise
    except BaseException as e:
        if isinstance(e, Exception):
            raise  # a defect in shardviz: keep its traceback
        return _stopped_by(e)


def _replace_unencodable() -> None:
    """Write characters the terminal's encoding lacks (an ASCII-only locale)
    as replacements instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass


def _stdout_closed() -> int:
    """Stop quietly when the reader of stdout has gone (``shardviz report ... |
    head``): stdout is pointed at the null device, so that Python's own flush
    at exit does not fail again. Exit code 141, as for a program that SIGPIPE
    ends."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    return 141


def _stopped_by(error: BaseException) -> int:
    """A BaseException that is not an Exception (a builder's own), as one
    error line."""
    detail = " ".join(str(error).split())
    print(f"shardviz: error: the command was stopped by {type(error).__name__}"
          + (f": {detail}" if detail else "") + " (hint: raise an Exception subclass to "
          "report a failure)", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
