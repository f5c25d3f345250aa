"""Why one path has the layout it has, in plain words (``report.explain(path)``)."""

from __future__ import annotations

from ..format import format_spec, human_bytes
from ..matching.match import compiled


def explain_path(report, path: str) -> str:
    """A few sentences on how Keras resolves ``path`` under the report's plan."""
    rules = report.plan.rules
    ol = report.output(path)
    if ol is not None:
        head = f"Output {path!r} of layer {ol.info.layer!r} ({ol.info.layer_class})"
        return head + ": " + _how(ol.match, rules, path, report, output=True)
    vl = report.variable(path)
    info, g = vl.info, vl.geometry
    head = f"Variable {path!r} {info.shape} {info.dtype}"
    if vl.source == "own":
        text = (f"{head} carries its own layout {vl.axes!r}, which Keras uses before "
                "looking at any rule.")
    else:
        text = f"{head}: " + _how(vl.match, rules, path, report, output=False)
    if vl.error is not None:
        return text + f" Keras cannot apply it: {vl.error.message}."
    n = report.mesh_view.size
    text += f" Layout {format_spec(g.spec)}: each of the {n} devices holds {g.shard_shape} "
    text += f"({human_bytes(g.bytes_per_device)} of {human_bytes(g.bytes)})"
    if g.replicated_over and g.replicas > 1:
        text += f"; copies exist over {', '.join(map(repr, g.replicated_over))} ({g.replicas} each)."
    else:
        text += "; no copies."
    return text


def _how(m, rules, path, report, output: bool) -> str:
    what = "the output is left as the layer computed it" if output else \
        "Keras replicates it on every device"
    if m.how == "exact":
        also = f" (rules {[rules[i].key for i in m.also]} also match, but an exact key wins)" \
            if m.also else ""
        return f"rule {m.rule} is its exact path{also}, giving {rules[m.rule].axes!r}."
    if m.how == "regex":
        return f"rule {m.rule} {rules[m.rule].key!r} fullmatches it, giving {rules[m.rule].axes!r}."
    if m.how == "conflict":
        keys = [rules[i].key for i in m.candidates]
        return f"rules {keys} all fullmatch it, so Keras raises ValueError."
    if m.how == "error":
        return f"a rule key is not a valid regex ({m.error}), so Keras raises re.error."
    text = f"no rule matches it, so {what}."
    partial = [r.key for r in rules if _finds(r.key, path)]
    if partial:
        text += (f" Rule(s) {partial} find it only as a part of the path; Keras needs the "
                 "whole path to match (re.fullmatch).")
    return text


def _finds(key: str, path: str) -> bool:
    pattern = compiled(key)
    return pattern is not None and pattern.search(path) is not None
