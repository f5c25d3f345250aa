"""Checks of the plan against the machine's capacity: how many devices its
mesh needs, and whether one chip's memory holds what it needs (with the
bytes per device by what holds them)."""

from __future__ import annotations

from ..errors import Problem
from ..format import human_bytes
from ..layout.assign import VariableLayout
from ..layout.geometry import MeshModel
from ..plan import Plan


def mesh_problems(plan: Plan, mesh: MeshModel, device_count: int) -> list[Problem]:
    if plan.mesh_size > device_count:
        return [Problem(
            "info", "mesh-size",
            f"The mesh {plan.mesh_dict} needs {plan.mesh_size} devices but {device_count} "
            "exist; layouts and memory are computed on an abstract mesh, but nothing "
            "can run on it here.",
            hint=f"To run the forward pass, restart and call "
            f"shardviz.simulate_devices({plan.mesh_size}) before any JAX operation.",
        )]
    if plan.mesh_size < device_count:
        return [Problem(
            "info", "mesh-size",
            f"The mesh {plan.mesh_dict} uses {plan.mesh_size} of the {device_count} devices; "
            "the others stay idle.",
            hint=f"Grow the mesh to {device_count} devices to use them all.",
        )]
    return []


def memory_parts(variable_bytes_per_device: int, trace) -> dict[str, int]:
    """Bytes per device by what holds them (see ``Report.memory_parts``)."""
    parts = {"variables": variable_bytes_per_device}
    if trace is None:
        return parts
    optimizer = sum(o.bytes_per_device for o in trace.optimizer_variables)
    if optimizer:
        parts["optimizer state"] = optimizer
    mem = trace.memory
    inputs = (mem["argument_bytes"] + mem.get("unread_bytes", 0) - variable_bytes_per_device
              - optimizer)
    if inputs > 0:
        parts["inputs"] = inputs
    outputs = mem["output_bytes"] - mem["alias_bytes"]
    if outputs > 0:
        parts["outputs"] = outputs
    parts["temporaries"] = mem["temp_bytes"]
    return parts


def needed_bytes(variable_bytes_per_device: int, trace) -> int:
    """The bytes one device needs: the compiled program's arguments, outputs
    and temporaries less what it aliases, plus the arguments it never reads
    (which live on the device all the same), or, with no compiled program,
    the variables alone (a lower bound)."""
    if trace is None:
        return variable_bytes_per_device
    m = trace.memory
    return (m["argument_bytes"] + m.get("unread_bytes", 0) + m["output_bytes"]
            + m["temp_bytes"] - m["alias_bytes"])


def fit_problems(target, layouts: list[VariableLayout], trace, mesh: MeshModel) -> list[Problem]:
    """A ``does-not-fit`` error when a chip of ``target`` needs more memory
    than it has: by the compiled program's own memory analysis, or, without
    a forward pass, by the variables alone."""
    capacity = mesh.capacity_bytes
    if capacity is None or (trace is not None and target.compiler_decides_fit
                            and not (trace.memory or {}).get("unread_bytes")):
        return []  # the target's compiler compiled it: it fits (refusals are OutOfMemory)
    per_device = sum(vl.geometry.bytes_per_device for vl in layouts)
    needed = needed_bytes(per_device, trace)
    if needed <= capacity:
        return []
    parts = memory_parts(per_device, trace)
    return [_does_not_fit(target, needed, capacity, parts, layouts, mesh,
                          estimated=target.estimated)]


def out_of_memory_problem(error, target, layouts: list[VariableLayout],
                          mesh: MeshModel) -> Problem:
    """The compiler's own out-of-memory refusal as a ``does-not-fit`` error."""
    needed, available = error.needed, error.available
    per_device = sum(vl.geometry.bytes_per_device for vl in layouts)
    what = (f"needs {human_bytes(needed)} per chip, and the {target.hardware.name} compiler "
            f"allows {human_bytes(available)}" if needed and available else
            "needs more memory per chip than the compiler allows")
    if needed and available and human_bytes(needed) == human_bytes(available):
        # Over by less than the figures' last digit: say by how much.
        what = (f"needs {human_bytes(needed - available)} more per chip than the "
                f"{human_bytes(available)} the {target.hardware.name} compiler allows")
    return Problem(
        "error", "does-not-fit",
        f"{error.message[:-1]} on {target.label}: it {what}. The variables alone take "
        f"{human_bytes(per_device)} per chip. The compiler says: {error.detail}",
        hint=_fit_hint(target, needed or per_device, available or mesh.capacity_bytes or 1,
                       layouts, mesh))


def _does_not_fit(target, needed: int, capacity: int, parts: dict[str, int],
                  layouts: list[VariableLayout], mesh: MeshModel, estimated: bool) -> Problem:
    ranked = sorted(parts.items(), key=lambda kv: -kv[1])
    contributors = ", ".join(f"{name} {human_bytes(b)}" for name, b in ranked if b > 0)
    source = ("estimated from the simulated devices' compiled program"
              if target.estimated else f"by {target.compiler}'s memory analysis")
    if all(name == "variables" for name in parts):
        source = "by the variables alone (no forward pass)"
    return Problem(
        "error", "does-not-fit",
        f"Each chip of {target.label} needs {human_bytes(needed)}, {source}"
        f"{' (an estimate)' if estimated else ''}, but may use {human_bytes(capacity)}: "
        f"{contributors}.",
        hint=_fit_hint(target, needed, capacity, layouts, mesh))


def _fit_hint(target, needed: int, capacity: int, layouts: list[VariableLayout],
              mesh: MeshModel) -> str:
    """What to shard first (the variable whose copies cost the most), and
    about how many chips the whole would need."""
    replicated = sorted((vl for vl in layouts if vl.error is None and vl.geometry.replicas > 1),
                        key=lambda vl: -vl.geometry.bytes_per_device * (vl.geometry.replicas - 1)
                        / vl.geometry.replicas)
    hint = ""
    if replicated and replicated[0].geometry.bytes_per_device > 0.05 * needed:
        vl = replicated[0]
        axes = ", ".join(repr(a) for a in vl.geometry.replicated_over)
        hint = (f"Shard {vl.info.path!r} ({human_bytes(vl.geometry.bytes_per_device)} per chip, "
                f"copied over {axes}): a rule that splits it over those axes frees the most. ")
    chips = max(-(-needed * mesh.size // capacity), mesh.size + 1)  # more than it has
    hint += (f"Otherwise plan for about {chips} chips ({target.hardware.name} with "
             f"{human_bytes(capacity)} each), if the largest parts shard with the mesh"
             + (", or a smaller batch." if chips == mesh.size + 1 else "."))
    return hint
