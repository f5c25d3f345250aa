"""The mesh editor: axes with names and sizes, the batch axis, presets."""

from __future__ import annotations

import ipywidgets as widgets

from ..plan import Plan
from ..render.palette import STATUS_COLOURS
from .common import Debouncer, note_html, set_if_changed


class MeshEditor:
    """Edits the mesh of the current plan.

    Every edit is proposed to ``propose(edit)``, where ``edit`` maps the
    current Plan to a new one; ``propose`` returns an error message (the
    edit is refused and the last good plan kept) or None. What the user
    typed stays in the fields either way.
    """

    def __init__(self, propose, device_count: int, debounce: float = 0.3):
        self.propose = propose
        self._debounce = Debouncer(debounce)
        self._refused: dict[tuple[str, str], tuple[object, str]] = {}
        """(field, axis) to (what the user typed, why it was refused): the field
        keeps the text and the message stays until the user changes it."""
        self.device_count = device_count
        self.rows = widgets.VBox()
        self.message = widgets.HTML()
        self.check = widgets.HTML()
        self.batch = widgets.Dropdown(description="batch axis", layout=widgets.Layout(width="220px"))
        self.batch.add_class("shardviz-batch-axis")
        self.batch.observe(self._batch_changed, "value")
        add = widgets.Button(description="add axis", icon="plus", layout=widgets.Layout(width="110px"))
        add.add_class("shardviz-add-axis")
        add.on_click(self._add)
        self.preset = widgets.Dropdown(
            options=[("preset…", ""), ("data parallel", "dp"), ("model parallel", "mp"),
                     ("2-D (batch × model)", "2d")],
            value="", layout=widgets.Layout(width="190px"))
        self.preset.observe(self._preset_chosen, "value")
        self._syncing = False
        self._row_axes: list[str] = []
        self.box = widgets.VBox([
            widgets.HTML("<b>Mesh</b>"), self.rows,
            widgets.HBox([add, self.preset, self.batch]), self.check, self.message,
        ])
        self.box.add_class("shardviz-mesh")

    # ---------------------------------------------------------------- sync
    def sync(self, plan: Plan):
        """Show ``plan``'s mesh (rebuilding rows only when the axes changed)."""
        self._syncing = True
        try:
            names = list(plan.axis_names)
            if names != self._row_axes:
                self.rows.children = [self._row(i, n, s) for i, (n, s) in enumerate(plan.mesh)]
                self._row_axes = names
            for row, (name, size) in zip(self.rows.children, plan.mesh):
                typed_name = self._refused.get(("name", name))
                typed_size = self._refused.get(("size", name))
                set_if_changed(row.children[0], "value",
                               name if typed_name is None else typed_name[0])
                set_if_changed(row.children[1], "value",
                               size if typed_size is None else typed_size[0])
            self._refused = {k: v for k, v in self._refused.items() if k[1] in names}
            self.batch.options = names
            set_if_changed(self.batch, "value", plan.batch_axis if plan.batch_axis in names else None)
            n = plan.mesh_size
            if n == self.device_count:
                self.check.value = note_html(f"{n} devices needed, {self.device_count} available ✓",
                                             STATUS_COLOURS["ok"])
            elif n < self.device_count:
                self.check.value = note_html(
                    f"{n} of the {self.device_count} devices used; the others stay idle.",
                    STATUS_COLOURS["warning"])
            else:
                self.check.value = note_html(
                    f"{n} devices needed, {self.device_count} available: layouts are exact, but "
                    f"the forward pass needs shardviz.simulate_devices({n}) (restart first).",
                    STATUS_COLOURS["warning"])
        finally:
            self._syncing = False

    def _row(self, i: int, name: str, size: int):
        name_box = widgets.Text(value=name, continuous_update=False,
                                layout=widgets.Layout(width="140px"))
        name_box.add_class("shardviz-axis-name")
        size_box = widgets.IntText(value=size, continuous_update=True,
                                   layout=widgets.Layout(width="80px"))
        size_box.add_class("shardviz-axis-size")
        remove = widgets.Button(icon="trash", tooltip="remove this axis",
                                layout=widgets.Layout(width="36px"))
        name_box.observe(lambda change, i=i: self._renamed(i, change), "value")
        size_box.observe(lambda change, i=i: self._resized(i, change), "value")
        remove.on_click(lambda _, i=i: self._removed(i))
        return widgets.HBox([name_box, size_box, remove])

    # ---------------------------------------------------------------- edits
    def _say(self, error):
        """Show ``error``, or, with none, the refusals still standing."""
        standing = [why for _, why in self._refused.values()]
        self.message.value = error if error is not None else (standing[-1] if standing else "")

    def _renamed(self, i, change):
        if self._syncing:
            return
        old, typed = self._row_axes[i], change["new"]
        new = typed.strip()
        self._refused.pop(("name", old), None)
        self._row_axes[i] = new  # so that the sync after the edit keeps this row
        error = self.propose(lambda p: p.with_axis_renamed(old, new))
        if error is not None:
            self._row_axes[i] = old
            self._refused[("name", old)] = (typed, error)
        self._say(error)

    def _resized(self, i, change):
        if self._syncing:
            return
        axis, typed = self._row_axes[i], change["new"]
        self._debounce(("size", axis), lambda: self._apply_size(axis, typed))

    def _apply_size(self, axis, typed):
        self._refused.pop(("size", axis), None)
        error = self.propose(lambda p: p.with_axis(axis, typed), merge=("size", axis))
        if error is not None:
            self._refused[("size", axis)] = (typed, error)
        self._say(error)

    def _removed(self, i):
        axis = self._row_axes[i]
        self._say(self.propose(lambda p: p.without_axis(axis)))

    def _add(self, _):
        def edit(p):
            k = 1
            while f"axis{k}" in p.axis_names:
                k += 1
            return p.with_axis(f"axis{k}", 1)

        self._say(self.propose(edit))

    def _batch_changed(self, change):
        if self._syncing or change["new"] is None:
            return
        self._say(self.propose(lambda p: p.with_batch_axis(change["new"])))

    def _preset_chosen(self, change):
        if self._syncing or not change["new"]:
            return
        n = self.device_count
        two_d = {"batch": 2, "model": n // 2} if n % 2 == 0 else {"batch": 1, "model": n}
        mesh = {"dp": {"batch": n}, "mp": {"batch": 1, "model": n}, "2d": two_d}[change["new"]]
        self._say(self.propose(lambda p: p.with_mesh(mesh).with_batch_axis("batch")))
        self._syncing = True
        self.preset.value = ""
        self._syncing = False
