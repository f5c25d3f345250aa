"""The Explorer: edit the mesh and the rules, see every layout at once.

>>> import shardviz
>>> from shardviz import examples
>>> app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan())
>>> app.plan.mesh_dict
{'batch': 2, 'model': 4}
>>> app.report.collectives["kind"][0]
'all-reduce'
>>> app.set_plan(app.plan.with_rule(".*down/bias", ("model",)))
>>> app.report.variables.set_index("path").loc["down/bias", "spec"]
('model',)
"""

from __future__ import annotations

import html
from typing import Any, TypeVar

import ipywidgets as widgets
import traitlets

from ..errors import OutOfMemory, ShardvizError
from ..model.scan import Scan
from ..plan import Plan, as_plan
from ..render.palette import STATUS_COLOURS
from ..render.text import fit_text, summary_line
from ..report import Report
from ..target import parse_target
from .common import Guard, error_html, note_html, set_if_changed
from .mesh import MeshEditor
from .rules import RuleEditor
from .state import ExplorerState
from .tab import Tab, TabContext
from .tabs import (
    TAB_CLASSES,
    CommunicationTab,
    ExportTab,
    MemoryTab,
    ProblemsTab,
    SuggestTab,
    TensorTab,
    VariablesTab,
)

TABS = tuple(kind.title for kind in TAB_CLASSES)
"""The tab bar's titles, in order."""
STAGES = ("placing", "tracing", "compiling", "running", "train step", "done")

T = TypeVar("T", bound=Tab)


def _tab_widget(kind: type[Tab], name: str) -> Any:
    """The widget ``name`` of the Explorer's ``kind`` tab, as an attribute of the Explorer."""
    return property(lambda self: getattr(self.tab(kind), name),
                    doc=f"The {kind.title} tab's ``{name}``.")


class Explorer(widgets.VBox):
    """An ipywidgets app over one model: mesh editor, rule editor, pictures.

    It is a widget (a ``VBox``): display it, or place it in your own layout
    (``HBox([explorer, my_table])``). ``plan`` is a trait, so
    ``explorer.observe(callback, names="plan")`` hears every change, from
    the editors, undo and redo, :meth:`set_plan` or a loaded JSON file, and
    assigning ``explorer.plan = other`` applies it. ``explorer.report`` is
    the report of the current plan (with the forward pass once it has run).
    The state lives in ``explorer.state`` (:class:`ExplorerState`), plain
    Python that the widgets only render. Each tab is a
    :class:`~shardviz.widgets.tab.Tab` in ``explorer.tab_list``;
    ``explorer.tab(kind)`` finds one.

    Args:
        model_or_builder: a built Keras model or a zero-argument builder (it
            is scanned once, without allocating).
        inputs: model inputs (shapes, ShapeDtypeStructs or arrays) for the
            forward pass; without them only variables are shown.
        plan: the plan to start from (default: data parallel over all devices).
        auto_run: re-run the forward pass after each edit when the last run
            took at most ``cheap_seconds``.
        train_step: analyse the train step ``model.fit`` runs instead of a
            forward pass.
        labels: with ``train_step``, the labels (y) as ``fit`` takes them
            (shapes, ShapeDtypeStructs or arrays).
        target, slices: the hardware to plan for (see
            :func:`shardviz.analyze`); the target box in the app changes it.
    """

    plan = traitlets.Instance(Plan, help="The current plan.")

    # The tabs' widgets, kept as the app's own attributes.
    filter = _tab_widget(TensorTab, "filter")
    picker = _tab_widget(TensorTab, "picker")
    rows_dim = _tab_widget(TensorTab, "rows_dim")
    cols_dim = _tab_widget(TensorTab, "cols_dim")
    picture = _tab_widget(TensorTab, "picture")
    jax_text = _tab_widget(TensorTab, "jax_text")
    explanation = _tab_widget(TensorTab, "explanation")
    variables_table = _tab_widget(VariablesTab, "table")
    problems_table = _tab_widget(ProblemsTab, "table")
    memory_note = _tab_widget(MemoryTab, "note")
    memory_picture = _tab_widget(MemoryTab, "picture")
    peak_picture = _tab_widget(MemoryTab, "peak_picture")
    peak_note = _tab_widget(MemoryTab, "peak_note")
    comm_note = _tab_widget(CommunicationTab, "note")
    comm_table = _tab_widget(CommunicationTab, "table")
    flow_picture = _tab_widget(CommunicationTab, "flow_picture")
    time_picture = _tab_widget(CommunicationTab, "time_picture")
    why_select = _tab_widget(CommunicationTab, "why_select")
    why_html = _tab_widget(CommunicationTab, "why_html")
    fix_button = _tab_widget(CommunicationTab, "fix_button")
    suggest_button = _tab_widget(SuggestTab, "find_button")
    suggest_note = _tab_widget(SuggestTab, "note")
    suggest_table = _tab_widget(SuggestTab, "table")
    suggest_select = _tab_widget(SuggestTab, "choice")
    suggest_diff = _tab_widget(SuggestTab, "diff")
    suggest_apply = _tab_widget(SuggestTab, "apply_button")
    python_code = _tab_widget(ExportTab, "python_code")
    json_text = _tab_widget(ExportTab, "json_text")
    json_note = _tab_widget(ExportTab, "json_note")
    upload = _tab_widget(ExportTab, "upload")
    download = _tab_widget(ExportTab, "download")
    export_message = _tab_widget(ExportTab, "message")

    def __init__(self, model_or_builder, inputs=None, plan=None, *, auto_run: bool = True,
                 cheap_seconds: float = 1.0, train_step: bool = False, labels=None,
                 target: str | None = None, slices: int = 1):

        first = parse_target(target, slices)
        self.device_count = first.plan_devices()
        start = as_plan(plan) if plan is not None else Plan.data_parallel(self.device_count)
        self.state = ExplorerState(model_or_builder, start, inputs, train_step=train_step,
                                   labels=labels,
                                   target=first, auto_run=auto_run and inputs is not None,
                                   cheap_seconds=cheap_seconds)
        self._syncing_plan = False
        self._status_plan: Plan | None = None
        children = self._build()
        self._stale: set[Tab] = set(self.tab_list)
        super().__init__(children=children)
        self.add_class("shardviz-explorer")
        self.guard = Guard(self._show_error)
        self.auto_run.value = self.state.auto_run
        self.auto_run.observe(self._auto_run_changed, "value")
        self._set_plan_trait(self.state.plan)
        with self.guard("Showing the plan"):
            self._refresh()
        if self.state.wants_run:
            self.run()

    # ------------------------------------------------------------ public API
    @property
    def scan(self) -> Scan:
        return self.state.scan

    @property
    def inputs(self):
        return self.state.inputs

    @property
    def train_step(self) -> bool:
        return self.state.train_step

    @property
    def report(self) -> Report:
        """The report of the current plan (with the forward pass if it ran
        under this plan)."""
        return self.state.report

    @property
    def traced(self) -> Report | None:
        """The last report with a forward pass (possibly of an older plan)."""
        return self.state.traced

    @property
    def last_run_seconds(self) -> float | None:
        return self.state.last_seconds

    @property
    def app(self) -> Explorer:
        """The widget itself (kept for code written when the app was a child)."""
        return self

    def set_plan(self, plan) -> None:
        """Replace the current plan (a Plan, Keras distribution or plan dict).

        Raises:
            ShardvizError: for a plan that cannot be read or analysed (the
                current plan stays).
        """
        self.propose(lambda _: as_plan(plan), raise_errors=True)

    def run(self) -> None:
        """Run the forward pass (or train step) under the current plan."""
        with self.guard("The forward pass"):
            self._run()

    def undo(self) -> None:
        self._change(self.state.undo)

    def redo(self) -> None:
        self._change(self.state.redo)

    def tab(self, kind: type[T]) -> T:
        """The app's tab of this kind, such as ``app.tab(ExportTab)``."""
        for tab in self.tab_list:
            if isinstance(tab, kind):
                return tab
        raise KeyError(f"The Explorer has no {kind.__name__}; its tabs are {', '.join(TABS)}.")

    @property
    def forward_is_fresh(self) -> bool:
        return self.state.fresh

    @property
    def target(self) -> str:
        """The hardware planned for, such as ``"v5e:4x4 x 2 slices"``."""
        return self.state.target.label

    def set_target(self, target: str | None, slices: int = 1) -> None:
        """Plan for other hardware (``"cpu"``, ``"v5e:4x4"``, ``"h100:8"``).

        Raises:
            ShardvizError: for an unknown target, or one the current mesh does
                not fit (the previous target stays).
        """

        self.state.set_target(target, slices)
        new = self.state.target
        self.device_count = new.plan_devices()
        self.mesh_editor.device_count = self.device_count
        set_if_changed(self.target_box, "value", new.name)
        set_if_changed(self.slices_box, "value", new.slices)
        self._refresh()

    def _target_edited(self):
        try:
            self.set_target(self.target_box.value.strip() or "cpu", int(self.slices_box.value))
        except ShardvizError as e:
            self.target_note.value = error_html(e.message, e.hint)
        else:
            self.target_note.value = ""

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        # The widget's own text form lists every child's value (timings
        # included); a short stable line keeps stored notebooks stable.
        bundle["text/plain"] = (f"shardviz Explorer: {self.scan.kind} model "
                                f"{getattr(self.scan.model, 'name', '')!r}, "
                                f"{len(self.scan.variables)} variables")
        return bundle

    # ------------------------------------------------------------ editing
    def propose(self, edit, raise_errors: bool = False, merge=None):
        """Apply ``edit(plan) -> plan``. Returns None, or the HTML of why the
        edit was refused (the last good plan stays)."""
        try:
            new = edit(self.state.plan)
            self._change(lambda: self.state.apply(new, merge=merge))
        except ShardvizError as e:
            if raise_errors:
                raise
            return error_html(e.message, e.hint)
        except Exception as e:  # an input nothing checked yet: refuse it, and say so
            if raise_errors:
                raise
            return error_html(
                f"The edit was refused: shardviz could not analyse the new plan "
                f"({type(e).__name__}: {str(e)[:200]}). The last good plan stays.",
                "Change the value you just entered, or undo.")
        return None

    def _change(self, change):
        """Run a state change; then sync the trait, render, and run the pass
        if the state wants it."""
        before = self.state.plan
        change()
        if self.state.plan == before:
            return
        self._set_plan_trait(self.state.plan)
        self._refresh()
        if self.state.wants_run:
            self._run()

    def _set_plan_trait(self, plan: Plan) -> None:
        self._syncing_plan = True
        try:
            self.plan = plan
        finally:
            self._syncing_plan = False

    @traitlets.observe("plan")
    def _plan_assigned(self, change):
        if self._syncing_plan or change["new"] == self.state.plan:
            return
        # Someone assigned explorer.plan: apply it like any edit.
        with self.guard("Setting the plan"):
            try:
                self._change(lambda: self.state.apply(change["new"]))
            finally:
                if self.plan != self.state.plan:  # refused: the trait shows the real plan
                    self._set_plan_trait(self.state.plan)

    def _auto_run_changed(self, change):
        self.state.auto_run = bool(change["new"])

    # ------------------------------------------------------------ forward pass
    def _run(self):
        if self.state.inputs is None:
            self.run_status.value = note_html("Give the Explorer inputs=... to run the forward pass.")
            return
        self.progress.layout.visibility = "visible"
        self.progress.value = 0
        self.run_button.disabled = True

        def progress(stage):
            self.progress.value = STAGES.index(stage) + 1 if stage in STAGES else self.progress.value
            self.run_status.value = note_html(f"{stage}…")

        try:
            report = self.state.run(progress)
        finally:
            self.run_button.disabled = False
            self.progress.layout.visibility = "hidden"
        self._status_plan = self.state.plan
        what = "train step" if self.state.train_step else "forward pass"
        if isinstance(report.trace_error, OutOfMemory):
            self.run_status.value = error_html(
                f"{what.capitalize()}: " + fit_text(report).lstrip("; "),
                report.trace_error.hint)
        elif report.trace_error is not None:
            self.run_status.value = error_html(
                f"{what.capitalize()} failed: " + report.trace_error.message,
                report.trace_error.hint)
        else:
            self.run_status.value = note_html(
                f"{report.pass_mode} {what} done in {self.state.last_seconds:.2f} s",
                STATUS_COLOURS["ok"])
        self._stale = set(self.tab_list)
        self._refresh(editors=False)

    # ------------------------------------------------------------ layout
    def _build(self):
        W = widgets
        self.header = W.HTML()
        self.header.add_class("shardviz-header")
        self.error = W.HTML()
        self.mesh_editor = MeshEditor(self._propose_from_editor, self.device_count)
        self.rule_editor = RuleEditor(self._propose_from_editor)
        undo = W.Button(description="undo", icon="undo", layout=W.Layout(width="90px"))
        redo = W.Button(description="redo", icon="repeat", layout=W.Layout(width="90px"))
        undo.on_click(lambda _: self._guarded(self.undo))
        redo.on_click(lambda _: self._guarded(self.redo))
        self.undo_button, self.redo_button = undo, redo

        self.run_button = W.Button(
            description="Run train step" if self.state.train_step else "Run forward pass",
            icon="play", button_style="primary",
            layout=W.Layout(width="180px", min_width="180px", flex="0 0 auto"))
        self.run_button.add_class("shardviz-run")
        self.run_button.on_click(lambda _: self.run())
        self.progress = W.IntProgress(min=0, max=len(STAGES), layout=W.Layout(width="140px",
                                                                             visibility="hidden"))
        self.run_status = W.HTML(layout=W.Layout(flex="1 1 auto", min_width="0"))
        self.run_status.add_class("shardviz-run-status")
        self.auto_run = W.Checkbox(description="re-run after edits when cheap", indent=False,
                                   layout=W.Layout(width="230px"))
        self.target_box = W.Combobox(
            value=self.state.target.name, options=["cpu", "v5e:2x4", "v5e:4x4", "v5p:2x2x2",
                                              "v5p:2x2x4", "v6e:4x4", "h100:8", "b200:8"],
            description="target", ensure_option=False, continuous_update=False,
            layout=W.Layout(width="220px"))
        self.target_box.add_class("shardviz-target")
        self.slices_box = W.BoundedIntText(value=self.state.target.slices, min=1, max=64,
                                           description="slices", layout=W.Layout(width="130px"))
        self.target_note = W.HTML()
        self.target_box.observe(lambda _: self._guarded(self._target_edited), "value")
        self.slices_box.observe(lambda _: self._guarded(self._target_edited), "value")
        controls = W.VBox([
            W.HBox([self.run_button, self.progress, self.run_status, self.auto_run]),
            W.HBox([self.target_box, self.slices_box, self.target_note])])

        context = TabContext(self.state, self._guarded, self.propose, self._show_error)
        self.tab_list: list[Tab] = [kind(context) for kind in TAB_CLASSES]
        self.tabs = W.Tab(children=[tab.widget for tab in self.tab_list])
        self.tabs.titles = tuple(tab.title for tab in self.tab_list)
        self.tabs.observe(lambda _: self._guarded(self._show_visible), "selected_index")
        self.mesh_editor.box.layout = W.Layout(width="460px", margin="0 24px 0 0")
        editors = W.HBox([self.mesh_editor.box, W.VBox([self.rule_editor.box, W.HBox([undo, redo])])],
                         layout=W.Layout(flex_flow="row wrap"))
        return [self.header, controls, self.error, editors, self.tabs]

    def _guarded(self, fn):
        with self.guard():
            fn()

    def _show_error(self, text):
        self.error.value = text

    def _propose_from_editor(self, edit, merge=None):
        self.error.value = ""
        with self.guard("The edit"):
            return self.propose(edit, merge=merge)
        return None

    # ------------------------------------------------------------ refresh
    def _refresh(self, editors: bool = True):
        report = self.report
        if editors:
            self.mesh_editor.sync(self.state.plan)
            self.rule_editor.sync(self.state.plan, report)
        self.undo_button.disabled = not self.state.history
        self.redo_button.disabled = not self.state.future
        state = self.state
        forward = state.status
        if state.inputs is not None and self._status_plan != state.plan:
            # The run status speaks of another plan: say what holds for this one
            # (an earlier plan's failure is not this plan's).
            if state.fresh:
                self.run_status.value = note_html("this plan's forward pass ran before: fresh",
                                                  STATUS_COLOURS["ok"])
            elif state.traced is not None:
                self.run_status.value = note_html("stale: run again to see the new plan",
                                                  STATUS_COLOURS["warning"])
            else:
                self.run_status.value = ""
            self._status_plan = state.plan
        warnings = ""
        if self.guard.warnings:
            warnings = (f"<br><span style='color:{STATUS_COLOURS['warning']}'>"
                        + html.escape(self.guard.warnings[-1]) + "</span>")
        self.header.value = (f"<b>shardviz</b> · {html.escape(summary_line(report))}"
                             f"<br><i>{html.escape(forward)}</i>{warnings}")
        for tab in self.tab_list:
            tab.refresh()
        self._stale = set(self.tab_list)
        self._show_visible()

    def _show_visible(self):
        """Fill the selected tab, if it is stale."""
        shown = self.tabs.children[self.tabs.selected_index or 0]
        tab = next(tab for tab in self.tab_list if tab.widget is shown)
        if tab in self._stale:
            self._stale.discard(tab)
            tab.show()

