"""The options the commands share, each group declared once, and the parsers
of their values.

A command adds the groups it takes to its parser (``add_plan(parser)``) and
reads them back with the readers here (``build_plan(args)``,
``inputs_of(args.inputs)``); a bad value is a one-line :class:`UsageError`.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from ..errors import PROBLEM_KINDS, SEVERITIES, ShardvizError
from ..model.inputs import MAX_DIM
from ..plan import AXIS_NAME, Plan, as_bytes, check_axis_name
from .running import UsageError, check_writable

BUILDER = "MODEL"
NAMED = "; NAME= on each for a model that takes a dict, e.g. token_ids=8x128:int32"
SHAPE = "SHAPE[:DTYPE]"
MAX_PLAN_FILE = 16 * 2**20

#: The output files a command may write: flag, metavar, help.
OUTPUTS = {"html": ("FILE", "write a self-contained HTML report"),
           "json": ("FILE", "write the report's data as JSON"),
           "png": ("FILE.png", "draw the result to a PNG file"),
           "plan-out": ("PLAN.JSON", "write the best plan here")}


# ---------------------------------------------------------------- groups
def add_builder(parser: argparse.ArgumentParser) -> None:
    """The model builder, the first argument."""
    parser.add_argument("builder", metavar=BUILDER,
                        help="a builder, mypkg.models:build or models.py:build, or a keras-hub "
                        "preset, hub:gemma2_2b_en (its CausalLM, built without weights)")


def add_plan(parser: argparse.ArgumentParser, mesh: bool = True,
             batch_help: str = "default: the first mesh axis") -> None:
    """--plan, --mesh (unless ``mesh`` is False: the rules alone), --rule and
    --batch-axis; :func:`build_plan` reads them."""
    group = parser.add_argument_group("the plan" if mesh else "the rules")
    group.add_argument("--plan", metavar="PLAN.JSON", help="a plan saved with Plan.to_json()"
                       + ("" if mesh else "; its rules are taken"))
    if mesh:
        group.add_argument("--mesh", metavar="AXIS=SIZE,...", help="e.g. batch=2,model=4")
    else:
        parser.set_defaults(mesh=None)
    group.add_argument("--rule", action="append", metavar="KEY=AXES",
                       help="a layout rule, repeatable, e.g. '.*kernel=None,model'")
    group.add_argument("--batch-axis", metavar="AXIS", help=batch_help)


def add_inputs(parser: argparse.ArgumentParser, purpose: str, train_step: bool = False,
               labels: bool = False) -> Any:
    """--inputs (``purpose``: what they are for; ``NAME=`` on each for a
    model that takes a dict), and --train-step and --labels where the command
    takes them. Returns the group, for a command's own options of the pass."""
    group = parser.add_argument_group("the forward pass")
    group.add_argument("--inputs", action="append", metavar="[NAME=]" + SHAPE,
                       help=purpose + NAMED)
    if train_step:
        group.add_argument("--train-step", action="store_true",
                           help="analyse the train step model.fit runs (the model's own "
                           "train_step, its loss and optimizer, state donated)")
    if labels:
        group.add_argument("--labels", action="append", metavar=SHAPE,
                           help="with --train-step: the labels (y) as fit takes them, e.g. "
                           "8x1024:int32; repeat for several outputs (default: zeros of the "
                           "outputs' shapes, for a model never compiled)")
    return group


def add_target(parser: argparse.ArgumentParser, devices: str, slices: bool = False) -> None:
    """--devices (its meaning for the command in ``devices``), --target and,
    with ``slices``, --slices and --dcn-axis."""
    group = parser.add_argument_group("target hardware")
    group.add_argument("--devices", type=int, metavar="N", help=devices)
    group.add_argument("--target", metavar="NAME",
                       help="plan for this hardware, e.g. v5e:4x4, v5p:2x2x4 (compiled by the TPU "
                       "compiler, needs libtpu), h100:8 (estimates); default: the simulated CPUs")
    if slices:
        group.add_argument("--slices", type=int, default=1, metavar="N",
                           help="TPU slices joined by DCN, or GPU nodes (default 1)")
        group.add_argument("--dcn-axis", metavar="AXIS",
                           help="the mesh axis that spans the slices (default: the batch axis)")


def add_tuning(parser: argparse.ArgumentParser, several_remat: bool = False) -> None:
    """The fine-tune's settings: --lora, --lora-layers, --dtype, --quantize,
    --remat (repeatable with ``several_remat``) and --optimizer;
    :func:`tuning_of` reads them."""
    group = parser.add_argument_group("the fine-tune")
    group.add_argument("--lora", type=int, metavar="RANK", help="enable LoRA of this rank")
    group.add_argument("--lora-layers", metavar="NAME,...",
                       help="the layers LoRA goes on (default: the backbone's own choice, or "
                       "every Dense and EinsumDense layer)")
    group.add_argument("--dtype", metavar="POLICY",
                       help="the dtype policy: bfloat16, mixed_bfloat16, float16, ...")
    group.add_argument("--quantize", metavar="MODE", help="int8, int4 or float8")
    remat = ("a remat mode: full, activations, larger_than:BYTES, layers:NAME,... or none; "
             "repeat to compare modes" if several_remat else
             "remat: full, activations, larger_than:BYTES or layers:NAME,...")
    group.add_argument("--remat", action="append" if several_remat else "store",
                       metavar="MODE", help=remat)
    group.add_argument("--optimizer", metavar="NAME", help="an optimizer by name, e.g. adamw")


def tuning_of(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments the fine-tune options give ``analyze`` and ``fit``."""

    def remat(text: str | None) -> object:
        if text is None or text == "none":
            return None
        if text.startswith("layers:"):
            return tuple(n for n in text.partition(":")[2].split(",") if n)
        return text

    modes = args.remat if isinstance(args.remat, list) else None
    return {"lora_rank": args.lora,
            "lora_layers": args.lora_layers.split(",") if args.lora_layers else None,
            "dtype": args.dtype, "quantize": args.quantize, "optimizer": args.optimizer,
            "remat": [remat(m) for m in modes] if modes else remat(
                None if isinstance(args.remat, list) else args.remat)}


def add_guards(parser: argparse.ArgumentParser) -> None:
    """--fail-on and --max-replicated-bytes."""
    group = parser.add_argument_group(
        "CI guards (exit code 1 when one fails; any error in the report always fails)")
    group.add_argument("--fail-on", metavar="KINDS",
                       help="also fail on these problem kinds, e.g. unused-rule,replicated-large,"
                       " or on a severity (warning, info: every problem at least that severe); "
                       "'never' to exit 0 whatever the report holds")
    group.add_argument("--max-replicated-bytes", metavar="SIZE",
                       help="fail on any variable at least this large left fully replicated, "
                       "e.g. 64MB or 1GiB")


def add_outputs(parser: argparse.ArgumentParser, *files: str, quiet: str,
                verbose: bool = False, html_default: str | None = None) -> None:
    """The output ``files`` (names in :data:`OUTPUTS`), -q (``quiet``: what
    it prints) and, with ``verbose``, -v; :func:`check_outputs` checks the
    files."""
    group = parser.add_argument_group("output")
    for name in files:
        metavar, text = OUTPUTS[name]
        default = html_default if name == "html" else None
        group.add_argument("--" + name, metavar=metavar, default=default,
                           help=text + (f" (default {default})" if default else ""))
    group.add_argument("-q", "--quiet", action="store_true", help=f"print only {quiet}")
    if verbose:
        group.add_argument("-v", "--verbose", action="store_true", help="print every row")


# ---------------------------------------------------------------- readers
def check_outputs(args: argparse.Namespace) -> None:
    """Refuse output paths that cannot be written, before any work starts."""
    for name in OUTPUTS:
        path = getattr(args, name.replace("-", "_"), None)
        if path:
            check_writable(path, "--" + name)


def read_plan(path: str) -> Plan:
    """The Plan saved in the file at ``path`` (``Plan.to_json()``)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PLAN_FILE + 1)
    except OSError as e:
        raise UsageError(f"cannot read plan file {path!r}: {e.strerror}") from None
    if len(data) > MAX_PLAN_FILE:
        raise UsageError(f"plan file {path!r} is larger than 16 MiB; it is not a plan")
    try:
        return Plan.from_json(data)
    except ShardvizError as e:
        raise UsageError.of(e, f"plan file {path!r}: ") from None


def build_plan(args: argparse.Namespace) -> Plan:
    """The Plan of --plan, or of --mesh, --rule and --batch-axis."""
    if args.plan:
        if args.mesh or args.rule:
            raise UsageError("give either --plan or --mesh/--rule, not both")
        return read_plan(args.plan)
    if not args.mesh:
        raise UsageError("give a plan: --plan plan.json, or --mesh batch=2,model=4 with --rule KEY=AXES")
    mesh = parse_mesh(args.mesh)
    rules = [parse_rule(r) for r in args.rule or []]
    try:
        return Plan(mesh, rules, args.batch_axis)
    except ShardvizError as e:
        raise UsageError.of(e) from None


def inputs_of(texts: list[str] | None, flag: str = "--inputs") -> Any:
    """Repeated --inputs as analyze takes them: one spec, a list, a dict
    for ``NAME=SHAPE[:DTYPE]`` (a model that takes a dict), or None.

    >>> inputs_of(["8x16"]), len(inputs_of(["8x16", "8:int32"])), inputs_of(None)
    (ShapeDtypeStruct(shape=(8, 16), dtype=float32), 2, None)
    >>> inputs_of(["token_ids=8x128:int32", "padding_mask=8x128:int32"])["token_ids"]
    ShapeDtypeStruct(shape=(8, 128), dtype=int32)
    >>> sorted(inputs_of(["token_ids=8x128:int32,padding_mask=8x128:int32"]))
    ['padding_mask', 'token_ids']
    """
    if not texts:
        return None
    pairs: list[tuple[str | None, object]] = []
    # One flag may hold several inputs, separated by commas: a=8x16:int32,b=8x16:int32.
    for text in [part.strip() for given in texts for part in given.split(",") if part.strip()]:
        name, eq, rest = text.partition("=")
        if eq and re.fullmatch(r"[A-Za-z_][\w.-]*", name.strip()):
            pairs.append((name.strip(), parse_inputs(rest.strip(), f"{flag} {name}=")))
        else:
            pairs.append((None, parse_inputs(text, flag)))
    named = [n for n, _ in pairs if n is not None]
    if not named:
        specs = [spec for _, spec in pairs]
        return specs[0] if len(specs) == 1 else specs
    if len(named) != len(pairs):
        raise UsageError(f"{flag}: name every input (NAME=SHAPE[:DTYPE], for a model that "
                         "takes a dict) or none", hint=f"e.g. {flag} token_ids=8x128:int32 "
                         f"{flag} padding_mask=8x128:int32")
    twice = sorted({n for n in named if named.count(n) > 1})
    if twice:
        raise UsageError(f"{flag}: the input {twice[0]!r} is given twice")
    return dict(pairs)


# ---------------------------------------------------------------- parsers
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


def parse_inputs(text: str, flag: str = "--inputs") -> Any:
    """``"8x128[:dtype]"`` as a ``jax.ShapeDtypeStruct``.

    >>> parse_inputs("8x128:int32")
    ShapeDtypeStruct(shape=(8, 128), dtype=int32)
    """
    import jax
    import jax.numpy as jnp

    shape_text, _, dtype_text = text.partition(":")
    if not re.fullmatch(r"\d+(x\d+)*", shape_text.strip()):
        raise UsageError(f"{flag} {text!r} is not a shape like 8x128 or 8x128:int32")
    try:
        dtype = jnp.dtype(dtype_text or "float32")
        # Inputs are numbers or booleans; numpy also parses strings, bytes and objects.
        if not (jnp.issubdtype(dtype, jnp.number) or jnp.issubdtype(dtype, jnp.bool_)):
            raise TypeError(dtype)
    except (TypeError, ValueError):
        raise UsageError(f"{flag} {text!r}: {dtype_text!r} is not a numeric or bool dtype "
                         "(e.g. float32, int32, bfloat16, bool)") from None
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
    unknown = sorted(k for k in kinds if k not in PROBLEM_KINDS and k not in SEVERITIES and k != "never")
    if unknown:
        raise UsageError(f"--fail-on: unknown kind {unknown[0]!r}; kinds: {', '.join(sorted(PROBLEM_KINDS))}"
                         f"; or a severity: {', '.join(SEVERITIES)}; or never")
    return kinds
