"""The frames of a Report: what a row is, and each column's dtype and meaning.

The one description of the frames: ``report.py`` builds them from it and
writes their docstrings with it, the JSON export writes every frame it names,
the tests hold the frames to it, and the table in ``docs/ARCHITECTURE.md`` is
:func:`markdown_table`'s output.

>>> frame("rules").names()[:3]
('index', 'key', 'axes')
>>> frame("devices").names(("batch", "model"))
('device', 'coords', 'batch', 'model', 'variable_bytes', 'process')
>>> print(frame("outputs").columns[-1].describe())
``requested_spec`` (object): the axes that rule asks for, or None.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

AXIS = "<axis>"
"""The name of the column that stands for one column per mesh axis."""


@dataclass(frozen=True)
class Column:
    """One column: its ``dtype`` (a pandas dtype name) and what it means.

    A ``nullable`` column has ``dtype`` when the frame has rows and no value
    is None, and is ``object`` otherwise.
    """

    name: str
    dtype: str
    meaning: str
    nullable: bool = False

    @property
    def kind(self) -> str:
        """The dtype as the docs say it: ``"int64"``, or ``"int64 or None"``."""
        return f"{self.dtype} or None" if self.nullable else self.dtype

    def describe(self) -> str:
        """The column in a docstring: ``name`` (dtype): meaning."""
        return f"``{self.name}`` ({self.kind}): {self.meaning}"

    def allows(self, dtype: str) -> bool:
        """Whether a built column of ``dtype`` agrees with this one."""
        return dtype == self.dtype or (self.nullable and dtype == "object")


@dataclass(frozen=True)
class Frame:
    """One DataFrame of a Report: its attribute ``name``, what one ``row``
    is (it completes "one row per"), and its columns in order."""

    name: str
    row: str
    columns: tuple[Column, ...]

    def by_name(self, axes: tuple[str, ...] = ()) -> dict[str, Column]:
        """Column name to its Column, in order, with one column per mesh
        axis in ``axes`` where :data:`AXIS` stands."""
        out: dict[str, Column] = {}
        for c in self.columns:
            for name in axes if c.name == AXIS else (c.name,):
                out.setdefault(name, c)
        return out

    def names(self, axes: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The column names in order (see :meth:`by_name`)."""
        return tuple(self.by_name(axes))

    def docstring(self, note: str | None = None) -> str:
        """A frame property's docstring: what a row is, ``note`` (the
        property's own words), then every column."""
        parts = [textwrap.fill(f"One row per {self.row}.", 79)]
        if note and note.strip():
            parts.append(inspect.cleandoc(note))
        head = "Columns"
        if any(c.nullable for c in self.columns):
            head += " (a dtype \"or None\" is object when a value is None or there are no\nrows)"
        lines = [textwrap.fill(c.describe(), 79, initial_indent="- ", subsequent_indent="  ",
                               break_on_hyphens=False, break_long_words=False)
                 for c in self.columns]
        parts.append(head + ":\n\n" + "\n".join(lines))
        return "\n\n".join(parts) + "\n"

    def differences(self, columns: dict[str, str], axes: tuple[str, ...] = ()) -> list[str]:
        """How a built frame, given as column name to dtype name, departs
        from this description: columns not described, described columns
        missing, another order, dtypes that disagree. Empty when it agrees.

        >>> frame("hosts").differences({"process": "int64", "extra": "int64"})[0]
        "report.hosts has a column the schema does not describe: 'extra'"
        """
        want = self.by_name(axes)
        out = [f"report.{self.name} has a column the schema does not describe: {c!r}"
               for c in columns if c not in want]
        out += [f"report.{self.name} lacks the column {c!r} the schema describes"
                for c in want if c not in columns]
        if not out and list(columns) != list(want):
            out.append(f"report.{self.name} has its columns in the order {list(columns)}, "
                       f"not {list(want)}")
        out += [f"report.{self.name}.{c} is {dtype}, the schema says {want[c].kind}"
                for c, dtype in columns.items() if c in want and not want[c].allows(dtype)]
        return out


F = TypeVar("F", bound=Callable)


def documented(name: str) -> Callable[[F], F]:
    """Decorate a frame property's function: its docstring becomes the
    frame's :meth:`Frame.docstring`, with the function's own as the note."""
    def decorate(fn: F) -> F:
        fn.__doc__ = frame(name).docstring(fn.__doc__)
        return fn
    return decorate


def frame(name: str) -> Frame:
    """The frame called ``name``."""
    for f in FRAMES:
        if f.name == name:
            return f
    raise KeyError(f"A Report has no frame {name!r}; it has {[f.name for f in FRAMES]}.")


def markdown_table() -> str:
    """The frames as the Markdown table in ``docs/ARCHITECTURE.md``.

    >>> print(markdown_table().splitlines()[4])
    | `rules` | rule of the plan, in order | `index`, `key`, `axes`, `kind`, `matches`, `wins`, \
`status`, `level`, `feedback`, `ranks` |
    """
    lines = ["| frame | one row per | columns |", "|---|---|---|"]
    for f in FRAMES:
        lines.append(f"| `{f.name}` | {f.row.replace('``', '`')} | "
                     + ", ".join(f"`{c.name}`" for c in f.columns) + " |")
    return "\n".join(lines) + "\n"


def _frame(name: str, row: str, *columns: tuple) -> Frame:
    return Frame(name, row, tuple(Column(*c) for c in columns))


OBJ, I64, F64, BOOL = "object", "int64", "float64", "bool"
NULL = True  # the column's dtype when every value is present, else object

FRAMES: tuple[Frame, ...] = (
    _frame(
        "variables", "model variable, in Keras's order",
        ("path", OBJ, "the variable path rules match."),
        ("layer", OBJ, "its layer's path."),
        ("shape", OBJ, "its shape, a tuple."),
        ("dtype", OBJ, "its dtype's name."),
        ("params", I64, "its elements."),
        ("bytes", I64, "the whole tensor's bytes."),
        ("spec", OBJ, "the layout Keras applies, padded to the rank; for ``status == \"error\"``, "
                    "the axes it would refuse."),
        ("rule", OBJ, "the winning key, ``\"<own layout>\"`` when the variable carries one, or "
                    "None."),
        ("match", OBJ, "``\"exact\"``, ``\"regex\"``, ``\"none\"``, ``\"conflict\"``, "
                     "``\"error\"`` or ``\"own\"``."),
        ("also_matched", OBJ, "the other keys that fullmatch it."),
        ("shard_shape", OBJ, "the shape of the shard each device holds; None for an error."),
        ("bytes_per_device", I64, "the bytes of that shard."),
        ("replicated_over", OBJ, "the mesh axes that hold copies."),
        ("replicas", I64, "how many devices hold each shard."),
        ("trainable", BOOL, "whether training updates it."),
        ("status", OBJ, "``\"sharded\"``, ``\"replicated\"`` or ``\"error\"`` (Keras would "
                      "raise)."),
    ),
    _frame(
        "outputs", "layer output path Keras looks up (``<layer>/output``), in call order",
        ("path", OBJ, "``<layer>/output``."),
        ("layer", OBJ, "the layer's path."),
        ("layer_class", OBJ, "the layer's class name."),
        ("rule", OBJ, "the key that constrains it, or None."),
        ("match", OBJ, "how the key matched."),
        ("requested_spec", OBJ, "the axes that rule asks for, or None."),
    ),
    _frame(
        "rules", "rule of the plan, in order",
        ("index", I64, "its position in the plan."),
        ("key", OBJ, "the regex Keras fullmatches."),
        ("axes", OBJ, "the layout it asks for."),
        ("kind", OBJ, "``\"variable\"``, or ``\"output\"`` for an ``/output`` key."),
        ("matches", I64, "how many paths it fullmatches."),
        ("wins", I64, "how many paths' layouts it sets."),
        ("status", OBJ, "``\"used\"``, ``\"unused\"``, ``\"shadowed\"`` by an exact key, "
                      "``\"conflicted\"``, ``\"blocked\"`` by an invalid key, or "
                      "``\"invalid\"``."),
        ("level", OBJ, "``\"ok\"``, ``\"warn\"`` or ``\"error\"``."),
        ("feedback", OBJ, "the short text an editor shows beside the rule."),
        ("ranks", OBJ, "the ranks of the tensors it matches."),
    ),
    _frame(
        "devices", "device of the mesh",
        ("device", I64, "its id."),
        ("coords", OBJ, "its position in the mesh."),
        (AXIS, I64, "one column per mesh axis, named after it: the device's coordinate on it."),
        ("variable_bytes", I64, "the plan's variable bytes on it."),
        ("process", I64, "the host that owns it (see ``hosts``)."),
    ),
    _frame(
        "hosts", "process (host) that owns devices of the mesh",
        ("process", I64, "its index."),
        ("devices", OBJ, "the device ids it owns, in mesh order."),
        ("device_count", I64, "how many."),
        ("variable_bytes", I64, "the plan's variable bytes, summed over its devices."),
        ("batch_rows", OBJ, "the rows of the global batch its devices hold, as ``(start, stop)`` "
                          "ranges; None without a forward pass."),
        ("cross_host_collectives", I64, "the collectives whose groups include devices of "
                                        "another host."),
        ("cross_host_bytes", I64, "their bytes per device."),
    ),
    _frame(
        "problems", "problem, errors first",
        ("severity", OBJ, "``\"error\"`` (Keras would refuse, or the pass failed), "
                        "``\"warning\"`` (it runs, but not as meant) or ``\"info\"``."),
        ("kind", OBJ, "one of ``shardviz.errors.PROBLEM_KINDS``."),
        ("path", OBJ, "the path it concerns, or None."),
        ("rule", OBJ, "the rule it concerns, or None."),
        ("layer", OBJ, "the layer it concerns, or None."),
        ("message", OBJ, "what is wrong."),
        ("hint", OBJ, "what to change."),
    ),
    _frame(
        "activations", "output of each call of each layer in the traced pass, in call order",
        ("path", OBJ, "``<layer>/output``."),
        ("label", OBJ, "the path, with the output index and call number when they matter."),
        ("layer", OBJ, "the layer's path."),
        ("layer_class", OBJ, "the layer's class name."),
        ("call", I64, "which call of a reused layer."),
        ("output", I64, "which output of a multi-output layer."),
        ("shape", OBJ, "its shape, a tuple."),
        ("dtype", OBJ, "its dtype's name."),
        ("rule", OBJ, "the ``/output`` key that asks it a layout, or None."),
        ("requested_spec", OBJ, "the axes that rule asks for, or None."),
        ("actual_spec", OBJ, "XLA's layout; a dim split over part of an axis shows a "
                           "``SubAxis`` such as ``'model:(1)2'``; None when no mesh axes "
                           "describe it."),
        ("shard_shape", OBJ, "the shape of the shard each device holds."),
        ("bytes_per_device", I64, "the bytes of that shard.", NULL),
        ("honored", OBJ, "True or False: whether XLA kept the requested layout; None when no "
                       "rule asked."),
        ("ok", OBJ, "that check in words: ``\"\"``, ``\"yes\"``, ``\"dropped\"`` or "
                  "``\"uneven\"``."),
        ("padded", BOOL, "whether XLA pads an uneven split."),
        ("partial", BOOL, "whether a dim is split over part of an axis."),
        ("actual_note", OBJ, "XLA's layout in words."),
        ("returned_spec", OBJ, "for a model output, the layout the pass returns."),
    ),
    _frame(
        "collectives", "collective in the compiled program (the forward pass, or the whole "
                       "train step)",
        ("kind", OBJ, "``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all`` or "
                    "``collective-permute``."),
        ("layer", OBJ, "the Keras layer where the layouts meet (the op a gather feeds, or the op "
                     "whose partial sums a reduction adds up), else the layers its name scope "
                     "names."),
        ("pass", OBJ, "``forward``, ``backward`` or ``update``."),
        ("axes", OBJ, "the mesh axes its groups run over."),
        ("over", OBJ, "the same in words."),
        ("complete", BOOL, "False when the groups cover only part of those axes."),
        ("group_size", I64, "devices in each group."),
        ("groups", I64, "how many groups."),
        ("bytes_per_device", I64, "the larger of the buffer a device holds before and after it "
                                  "(the gathered size of an all-gather, the reduced size of a "
                                  "reduce-scatter)."),
        ("result_bytes", I64, "the bytes of its result on a device."),
        ("operand_bytes", I64, "the bytes of its operand on a device."),
        ("async", BOOL, "whether XLA runs it asynchronously."),
        ("name", OBJ, "the HLO instruction."),
        ("op_name", OBJ, "its JAX name scope."),
        ("network", OBJ, "the link it runs over: ``\"ici\"`` or ``\"dcn\"`` on a TPU target, "
                       "``\"nvlink\"`` or ``\"infiniband\"`` on a GPU target, ``\"host\"`` on "
                       "the simulated CPU."),
        ("seconds", OBJ, "an estimate (a float) from the link's published bandwidth and the cost "
                       "rules of :func:`shardviz.target.collective_seconds`; None on the CPU."),
        ("source", OBJ, "``file:line`` of the Python behind it, from the compiled program's stack "
                      "frames: a layer's ``call``, or the user's own line."),
        ("source_from", OBJ, "whose metadata gave ``source``: ``\"itself\"``, ``\"the op it "
                           "feeds\"`` or ``\"the op that feeds it\"``."),
        ("site", OBJ, "the op_name of the op where the layouts meet."),
        ("operands", OBJ, "what meets there: variable paths, ``<layer>/output`` for another "
                        "layer's output, ``input:<name>`` for a model input, ``inside <layer>: "
                        "<op>`` for a value inside an enclosing layer's call."),
        ("crosses_hosts", BOOL, "whether a group holds devices of several processes."),
    ),
    _frame(
        "memory", "device: the plan's variable bytes, and XLA's memory analysis of the "
                  "compiled program",
        ("device", I64, "its id."),
        ("variable_bytes", I64, "the plan's variable bytes on it."),
        ("optimizer_bytes", I64, "optimizer state (see ``memory_parts``); None without a "
                                 "forward pass.", NULL),
        ("input_bytes", I64, "the batch and other inputs (see ``memory_parts``); None without a "
                             "forward pass.", NULL),
        ("activation_bytes", I64, "the sum over every layer output: more than is live at once, "
                                  "which XLA's temporaries hold; None without a forward pass.",
         NULL),
        ("argument_bytes", I64, "XLA's ``memory_analysis()``; None without a forward pass.",
         NULL),
        ("output_bytes", I64, "XLA's ``memory_analysis()``; None without a forward pass.", NULL),
        ("temp_bytes", I64, "XLA's ``memory_analysis()``; None without a forward pass.", NULL),
        ("alias_bytes", I64, "XLA's ``memory_analysis()``; None without a forward pass.", NULL),
        ("unread_bytes", I64, "arguments the program never reads, which ``jit`` drops from it "
                              "but which live on the device all the same (an untied output "
                              "embedding in a forward pass, say); None without a forward pass.",
         NULL),
        ("total_bytes", I64, "arguments + unread + outputs + temporaries - aliased, the sum of "
                             "``memory_parts``; when the compiler refused the program, its own "
                             "figure, or else the variables alone (then object); None without "
                             "a forward pass.", NULL),
        ("peak_bytes", I64, "the compiler's peak: the most bytes its buffers hold at once "
                            "(``memory_analysis().peak_memory_in_bytes``), at most "
                            "``total_bytes`` where temporaries are not all live together; "
                            "None without a forward pass or where the compiler gives none.",
         NULL),
        ("capacity_bytes", I64, "the memory a program may use on the target chip (on TPU the "
                                "compiler's own figure, a little below the chip's HBM; on GPU "
                                "the published HBM); None on the simulated CPU.", NULL),
        ("fits", BOOL, "whether the device needs no more than that (``total_bytes``, or the "
                    "variables alone without a forward pass); on a TPU target, whether the TPU "
                    "compiler compiled the program: its own check decides, on what is live at "
                    "once, and passes programs whose ``total_bytes`` is over "
                    "``capacity_bytes`` (GPT-2's train step at batch 33 on a v5e chip: 16.5 "
                    "GiB in all, 14.5 GiB at the peak, of 15.75; it ran on the chip); False "
                    "when the compiler refused it, or the variables alone are over; None on "
                    "the simulated CPU, and where nothing was compiled (unknown).", NULL),
        ("estimate", BOOL, "True when the figures come from a compiler for other devices than the "
                        "target's (a GPU target, compiled for the simulated CPUs)."),
    ),
    _frame(
        "optimizer_variables", "optimizer slot, with ``train_step=True``",
        ("path", OBJ, "the slot's path, e.g. ``adam/up_kernel_momentum``."),
        ("reference", OBJ, "the model variable it mirrors, whose layout it takes, or None for a "
                         "slot such as the step counter, which the rules lay out."),
        ("shape", OBJ, "its shape, a tuple."),
        ("dtype", OBJ, "its dtype's name."),
        ("spec", OBJ, "its layout."),
        ("shard_shape", OBJ, "the shape of the shard each device holds."),
        ("bytes_per_device", I64, "the bytes of that shard."),
    ),
    _frame(
        "estimate", "bound of a step on the target",
        ("part", OBJ, "``\"compute\"`` (flops / peak flops), ``\"memory\"`` (bytes accessed / HBM "
                    "bandwidth), ``\"collectives\"`` (the sum of ``collectives.seconds``) or "
                    "``\"compiler\"`` (the TPU compiler's own ``optimal_seconds``, when it "
                    "gives one) or ``\"expected\"`` (the bound times the median ratio of "
                    "measured steps of the same kind on the same chip to their bound: "
                    ":mod:`shardviz.target.calibration`; absent where none were measured)."),
        ("seconds", F64, "the time that part bounds the step by.", NULL),
        ("bound", BOOL, "True for the largest of compute, memory and collectives: what limits "
                     "the step.", NULL),
        ("source", OBJ, "the formula, or the compiler."),
    ),
    _frame(
        "op_times", "operation of the compiled program (the train step where there is one), "
                    "in the compiler's order, timed on the target (empty without a compiled "
                    "program or a fitted model for the chip: :mod:`shardviz.target.op_time`)",
        ("operation", OBJ, "the instruction's name in the optimized program (the name a "
                           "profile of the chip shows)."),
        ("layer", OBJ, "the Keras layer path its op_name belongs to, or its scope."),
        ("pass", OBJ, "``forward`` or ``backward`` (optimizer updates read as forward)."),
        ("kind", OBJ, "``matmul``, ``vector``, ``copy``, ``kernel``, ``collective``, "
                      "``prefetch`` or ``control``."),
        ("count", F64, "how often a step runs it (a loop's trip count)."),
        ("flops", F64, "its flops per step (an attention kernel's as if nothing were masked)."),
        ("bytes", F64, "the bytes of its operands and results per step."),
        ("seconds", F64, "its expected seconds per step (an estimate: see ``estimate``)."),
        ("bound", OBJ, "what bounds it: ``compiler cycles``, ``memory``, ``matrix units``, "
                       "``vector units``, ``kernel``, ``link``, ``fixed cost`` or "
                       "``unmodelled``."),
    ),
    _frame(
        "peak", "buffer live at the compiled program's peak, largest first (the compiler's "
                "own buffer assignment; empty where it wrote none: ``report.peak_note`` says "
                "why)",
        ("bytes", I64, "the buffer's bytes on one device, as the compiler assigned them (with "
                       "its tiling's padding)."),
        ("role", OBJ, "what the buffer holds: ``weight``, ``optimizer state``, ``metric "
                      "state``, ``input``, ``label`` (an argument, or a copy of one), "
                      "``gradient`` (made by the backward pass), ``activation`` (made by the "
                      "forward pass; in a train step, kept for the backward pass), ``logits "
                      "and loss`` (the size of the model's output: the logits, their float32 "
                      "copy for the loss, their gradient), ``optimizer update``, or "
                      "``workspace`` (no op names it)."),
        ("layer", OBJ, "the variable an argument holds, or the Keras layer whose name scope "
                       "made the buffer; empty when none."),
        ("op", OBJ, "the instruction's ``op_name`` (JAX's name stack), or its HLO op."),
        ("dtype", OBJ, "the buffer's element type, as XLA names it (``f32``, ``bf16``)."),
        ("shape", OBJ, "its shape on one device, a tuple."),
        ("buffer", OBJ, "the buffer's name in the compiler's assignment."),
        ("on_chip", BOOL, "True where the compiler placed it in the chip's on-chip memory "
                          "(a TPU's vector memory) instead of HBM."),
    ),
    _frame(
        "timeline", "stretch of the compiled program's schedule (at most 2,000 of them)",
        ("position", I64, "the stretch's first position in the schedule."),
        ("role", OBJ, "one of ``peak``'s roles."),
        ("bytes", I64, "the most bytes the role's buffers hold at once in the stretch."),
    ),
)

NAMES: tuple[str, ...] = tuple(f.name for f in FRAMES)
"""Every DataFrame a Report has, by attribute name."""
