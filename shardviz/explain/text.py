"""The why-text: what a collective communicates and why, in words, from the
contraction at its site and the layouts that meet there."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..format import human_bytes
from .explanation import NO_RULE, Meeting, rule_text

if TYPE_CHECKING:
    from ..report import Report


def _split_dims(spec: tuple | None, axes: tuple) -> list[int]:
    """Dims of ``spec`` split over any of ``axes``."""
    if spec is None:
        return []
    out = []
    for d, entry in enumerate(spec):
        names = entry if isinstance(entry, tuple) else (entry,)
        if any(str(n).split(":")[0] in axes for n in names if n):
            out.append(d)
    return out


def _contraction(row, meetings: list[Meeting]) -> tuple[Meeting, int, Meeting, int] | None:
    """For a Dense- or EinsumDense-like site: the activation operand and its
    contracted dim, and the kernel and its contracted dim. Dense contracts an
    input's last dim with dim 0 of its kernel; an einsum names its dims in
    the op (``abcd,cde->abe``)."""
    kernels = [m for m in meetings if m.kind == "variable" and m.shape and len(m.shape) >= 2]
    data = [m for m in meetings if m.kind != "variable" and m.shape]
    if len(kernels) != 1 or len(data) != 1:
        return None
    kernel, x = kernels[0], data[0]
    equation = re.search(r"([a-z]+),([a-z]+)->([a-z]+)", row["site"] or "")
    if equation:
        lhs, rhs, out = equation.groups()
        shared = [c for c in lhs if c in rhs and c not in out]
        if shared and len(lhs) == len(x.shape) and len(rhs) == len(kernel.shape):
            return x, lhs.index(shared[0]), kernel, rhs.index(shared[0])
        return None
    if str(row["site"]).endswith("dot_general") and len(kernel.shape) == 2 \
            and x.shape[-1] == kernel.shape[0]:
        return x, len(x.shape) - 1, kernel, 0
    return None


def _kernel_contracted(row, meetings: list[Meeting]) -> tuple[Meeting, list[int]] | None:
    """The kernel at the site and its contracted dims, from the einsum in
    the op's name (``abcd,cde->abe``) or, for a Dense, dim 0."""
    kernels = [m for m in meetings if m.kind == "variable" and m.shape and len(m.shape) >= 2]
    if len(kernels) != 1:
        return None
    kernel = kernels[0]
    equation = re.search(r"([a-z]+),([a-z]+)->([a-z]+)", row["site"] or "")
    if equation:
        lhs, rhs, out = equation.groups()
        if len(rhs) != len(kernel.shape):
            return None
        return kernel, [i for i, c in enumerate(rhs) if c in lhs and c not in out]
    if str(row["site"]).endswith("dot_general") and len(kernel.shape) == 2:
        return kernel, [0]
    return None


def why_text(report: Report, row, meetings: list[Meeting]) -> tuple[str, bool]:
    """What is communicated and why, in words; and whether the collective
    is the price of splitting a contraction (row parallelism)."""
    kind, layer = row["kind"], row["layer"] or "?"
    axes = tuple(row["axes"])
    over = ", ".join(f"`{a}`" for a in axes) or "the devices"
    size = human_bytes(int(row["bytes_per_device"]))
    primitive = re.sub(r"[()]", "", str(row["site"]).rsplit("/", 1)[-1]) if row["site"] \
        else "an op"
    lines = []
    split_contraction = False
    if meetings:
        lines.append(f"At `{layer}` ({primitive}) these layouts meet: "
                     + "; ".join(m.describe() for m in meetings) + ".")
    pair = _contraction(row, meetings)
    if pair is not None:
        x, xd, kernel, kd = pair
        x_split = x.spec is not None and xd in _split_dims(x.spec, axes)
        k_split = kernel.spec is not None and kd in _split_dims(kernel.spec, axes)
        krule = rule_text(kernel.rule, kernel.rule_index) if kernel.rule else NO_RULE
        if kind == "all-gather" and x_split and not k_split:
            lines.append(
                f"`{layer}` contracts dim {xd} of `{x.name}` with dim {kd} of `{kernel.name}`, "
                f"which {krule} leaves unsplit over {over} while its input arrives split "
                f"over {over}; XLA all-gathers the input ({size} per device).")
        elif kind == "all-gather" and k_split and not x_split:
            lines.append(
                f"`{layer}` contracts dim {xd} of `{x.name}` with dim {kd} of `{kernel.name}`; "
                f"{krule} splits that dim over {over} but the input arrives whole there, so "
                f"XLA all-gathers the kernel ({size} per device).")
        elif kind in ("all-reduce", "reduce-scatter") and x_split and k_split:
            split_contraction = True
            lines.append(
                f"`{layer}` contracts dim {xd} of `{x.name}` with dim {kd} of `{kernel.name}`, "
                f"and both are split over {over} ({krule}): each device holds a partial sum, "
                f"and XLA {'all-reduces' if kind == 'all-reduce' else 'reduce-scatters'} "
                f"them ({size} per device). This is the price of splitting the contraction "
                "(row parallelism): a column-parallel layer before it and a row-parallel one "
                "after pay it once per pair.")
    elif kind in ("all-reduce", "reduce-scatter"):
        kernel_dims = _kernel_contracted(row, meetings)
        if kernel_dims is not None:
            kernel, dims = kernel_dims
            split = [d for d in dims if d in _split_dims(kernel.spec, axes)]
            if split:
                split_contraction = True
                krule = rule_text(kernel.rule, kernel.rule_index) if kernel.rule else NO_RULE
                lines.append(
                    f"`{layer}` contracts over dim {split[0]} of `{kernel.name}`, which {krule} "
                    f"splits over {over}: each device holds a partial sum, and XLA "
                    f"{'all-reduces' if kind == 'all-reduce' else 'reduce-scatters'} them "
                    f"({size} per device). This is the price of splitting the contraction "
                    "(row parallelism, or attention split by heads).")
    batch = report.plan.batch_axis
    if row["pass"] != "forward" and kind in ("all-reduce", "reduce-scatter") \
            and batch in axes:
        lines.append(
            f"In the {row['pass']} pass, each replica along `{batch}` computed gradients on "
            f"its own rows of the batch; XLA sums them over `{batch}` "
            f"({'all-reduce' if kind == 'all-reduce' else 'reduce-scatter'}, {size} per "
            "device). This is the price of data parallelism.")
    if len(lines) < 2:
        lines.append(_generic(kind, over, size, layer))
    return "\n".join(lines), split_contraction


def _generic(kind: str, over: str, size: str, layer: str) -> str:
    return {
        "all-gather": f"An operand split over {over} is needed whole (or split another way) at "
                      f"`{layer}`, so XLA all-gathers it ({size} per device).",
        "all-reduce": f"`{layer}` leaves a partial result on each device along {over}, and XLA "
                      f"adds them up with an all-reduce ({size} per device).",
        "reduce-scatter": f"`{layer}` leaves partial sums along {over}; XLA adds them up and "
                          f"splits the result (reduce-scatter, {size} per device).",
        "all-to-all": f"The split moves from one dimension to another over {over} at `{layer}`: "
                      f"XLA exchanges shards all-to-all ({size} per device).",
        "collective-permute": f"Shards move between devices along {over} at `{layer}`, because "
                              f"the layouts that meet there order the devices differently "
                              f"({size} per device).",
    }.get(kind, f"XLA communicates {size} per device over {over} at `{layer}`.")
