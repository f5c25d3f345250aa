"""The Explorer: edit the mesh and the rules, see every layout at once.

>>> import shardviz
>>> from shardviz import examples
>>> app = shardviz.Explorer(examples.mlp, inputs=(8, 16), plan=examples.megatron_plan())
>>> app.plan.mesh_dict
{'batch': 2, 'model': 4}
>>> app.report.trace.collectives[0].kind
'all-reduce'
>>> app.set_plan(app.plan.with_rule(".*down/bias", ("model",)))
>>> app.report.variables.set_index("path").loc["down/bias", "spec"]
('model',)
"""

from __future__ import annotations

import base64
import html

import ipywidgets as widgets
import traitlets

from ..errors import OutOfMemory, ShardvizError
from ..format import human_bytes
from ..model_scan import Scan
from ..plan import Plan, as_plan
from ..render.html import collectives_html, problems_html, styled, variables_html
from ..render.text import fit_text, summary_line
from ..report import Report
from ..target import parse_target
from .common import Guard, error_html, note_html, set_if_changed, show_png
from .mesh import MeshEditor
from .rules import RuleEditor
from .state import ExplorerState

TABS = ("Tensor", "Variables", "Problems", "Memory", "Communication", "Suggest", "Export")
AUTO = -1  # the dim choosers' "auto" (None would read as "nothing selected")
STAGES = ("placing", "tracing", "compiling", "running", "train step", "done")


class Explorer(widgets.VBox):
    """An ipywidgets app over one model: mesh editor, rule editor, pictures.

    It is a widget (a ``VBox``): display it, or place it in your own layout
    (``HBox([explorer, my_table])``). ``plan`` is a trait, so
    ``explorer.observe(callback, names="plan")`` hears every change, from
    the editors, undo and redo, :meth:`set_plan` or a loaded JSON file, and
    assigning ``explorer.plan = other`` applies it. ``explorer.report`` is
    the report of the current plan (with the forward pass once it has run).
    The state lives in ``explorer.state`` (:class:`ExplorerState`), plain
    Python that the widgets only render.

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
        self._dirty = set(TABS)
        self._json_shown = None
        self._status_plan: Plan | None = None
        children = self._build()
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
                f"{report.trace.mode} {what} done in {self.state.last_seconds:.2f} s", "#1b7f3b")
        self._dirty = set(TABS)
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
            icon="play",
                                   button_style="primary",
                                   layout=W.Layout(width="180px", min_width="180px",
                                                   flex="0 0 auto"))
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

        # Tensor tab
        self.filter = W.Text(placeholder="filter paths…", layout=W.Layout(width="260px"))
        self.filter.add_class("shardviz-filter")
        self.filter.observe(lambda _: self._guarded(self._update_paths), "value")
        self.picker = W.Select(rows=14, layout=W.Layout(width="320px"))
        self.picker.add_class("shardviz-picker")
        self.picker.observe(lambda _: self._guarded(self._render_tensor), "value")
        self.rows_dim = W.Dropdown(description="rows", options=[("auto", AUTO)], value=AUTO,
                                   layout=W.Layout(width="150px"))
        self.cols_dim = W.Dropdown(description="cols", options=[("auto", AUTO)], value=AUTO,
                                   layout=W.Layout(width="150px"))
        for dd in (self.rows_dim, self.cols_dim):
            dd.observe(lambda _: self._guarded(self._render_tensor), "value")
        self.picture = W.Image(format="png")
        self.picture.add_class("shardviz-picture")
        self.jax_text = W.HTML()
        self.explanation = W.HTML()
        tensor_tab = W.HBox([
            W.VBox([self.filter, self.picker]),
            W.VBox([W.HBox([self.rows_dim, self.cols_dim]), self.picture, self.explanation,
                    self.jax_text]),
        ])
        # Tables
        self.variables_table = W.HTML()
        self.variables_table.add_class("shardviz-variables")
        self.problems_table = W.HTML()
        self.memory_note = W.HTML()
        self.memory_picture = W.Image(format="png")
        self.comm_note = W.HTML()
        self.comm_table = W.HTML()
        self.comm_table.add_class("shardviz-collectives")
        self.flow_picture = W.Image(format="png")
        self.flow_picture.add_class("shardviz-flow")
        self.why_select = W.Dropdown(options=[("choose a collective…", None)], value=None,
                                     description="Why is", layout=W.Layout(width="460px"))
        self.why_select.add_class("shardviz-why-select")
        self.why_select.observe(lambda _: self._guarded(self._explain_selected), "value")
        self.why_html = W.HTML()
        self.why_html.add_class("shardviz-why")
        self.fix_button = W.Button(description="Apply fix", icon="wrench", disabled=True,
                                   tooltip="Apply the fix to the plan (Undo takes it back)",
                                   layout=W.Layout(width="130px", min_width="130px"))
        self.fix_button.add_class("shardviz-apply-fix")
        self.fix_button.on_click(lambda _: self._guarded(self._apply_fix))
        self._why = None
        # Export
        python_button = W.Button(description="Copy as Python", icon="copy",
                                 layout=W.Layout(width="160px"))
        python_button.on_click(lambda _: self._guarded(self._show_python))
        self.python_code = W.Textarea(layout=W.Layout(width="640px", height="180px"))
        self.json_text = W.Textarea(layout=W.Layout(width="640px", height="160px"))
        self.json_text.add_class("shardviz-json")
        load_json = W.Button(description="Load JSON", icon="upload", layout=W.Layout(width="130px"))
        load_json.on_click(lambda _: self._guarded(self._load_json_text))
        self.upload = W.FileUpload(accept=".json", multiple=False, description="Open file")
        self.upload.observe(lambda _: self._guarded(self._load_upload), "value")
        self.download = W.HTML()
        self.export_message = W.HTML()
        self.json_note = W.HTML()
        export_tab = W.VBox([
            W.HBox([python_button, W.HTML("<i>select the code and copy it</i>")]), self.python_code,
            W.HTML("<b>Plan as JSON</b> (edit and load, open a file, or download)"),
            self.json_text, W.HBox([load_json, self.upload, self.download]), self.json_note,
            self.export_message,
        ])
        # Suggest
        self.suggest_button = W.Button(description="Suggest plans", icon="lightbulb-o",
                                       layout=W.Layout(width="160px", min_width="160px"))
        self.suggest_button.on_click(lambda _: self._guarded(self._suggest))
        self.suggest_note = W.HTML()
        self.suggest_table = W.HTML()
        self.suggest_select = W.Dropdown(options=[("choose a plan…", None)], value=None,
                                         description="Plan", layout=W.Layout(width="460px"))
        self.suggest_select.observe(lambda _: self._guarded(self._show_suggestion), "value")
        self.suggest_diff = W.HTML()
        self.suggest_apply = W.Button(description="Apply plan", icon="check", disabled=True,
                                      tooltip="Replace the plan with this one (Undo takes it back)",
                                      layout=W.Layout(width="130px", min_width="130px"))
        self.suggest_apply.on_click(lambda _: self._guarded(self._apply_suggestion))
        self._suggestions: list = []
        suggest_tab = W.VBox([
            W.HBox([self.suggest_button, self.suggest_note]), self.suggest_table,
            W.HBox([self.suggest_select, self.suggest_apply]), self.suggest_diff])
        self.tabs = W.Tab(children=[
            tensor_tab, self.variables_table, self.problems_table,
            W.VBox([self.memory_note, self.memory_picture]),
            W.VBox([self.comm_note, self.comm_table,
                    W.HBox([self.why_select, self.fix_button]), self.why_html,
                    self.flow_picture]), suggest_tab, export_tab,
        ])
        self.tabs.titles = TABS
        self.tabs.observe(lambda _: self._guarded(self._render_visible), "selected_index")
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
                                                  "#1b7f3b")
            elif state.traced is not None:
                self.run_status.value = note_html("stale: run again to see the new plan",
                                                  "#8a5a00")
            else:
                self.run_status.value = ""
            self._status_plan = state.plan
        warnings = ""
        if self.guard.warnings:
            warnings = "<br><span style='color:#8a5a00'>" + html.escape(self.guard.warnings[-1]) + \
                       "</span>"
        self.header.value = (f"<b>shardviz</b> · {html.escape(summary_line(report))}"
                             f"<br><i>{html.escape(forward)}</i>{warnings}")
        self._update_paths()
        self._dirty = set(TABS)
        self._render_visible()

    def _update_paths(self):
        needle = self.filter.value.strip().lower()
        paths = [(p, p) for p in self.report.paths]
        if self.traced is not None:
            acts = self.traced.activations
            paths += [(f"→ {label}", f"{path}#{call}#{index}") for label, path, call, index
                      in zip(acts["label"], acts["path"], acts["call"], acts["output"])]
        options = [o for o in paths if needle in o[0].lower()] if needle else paths
        current = self.picker.value
        set_if_changed(self.picker, "options", tuple(options))
        values = [v for _, v in options]
        if current in values:
            set_if_changed(self.picker, "value", current)
        elif values:
            self.picker.value = values[0]

    def _render_visible(self):
        tab = TABS[self.tabs.selected_index or 0]
        if tab not in self._dirty:
            return
        self._dirty.discard(tab)
        getattr(self, f"_render_{tab.lower()}")()

    def _render_tensor(self):
        value = self.picker.value
        if not value:
            self.picture.value = b""
            return
        if "#" in value:
            path, call, index = value.rsplit("#", 2)
            source, call, index = self.traced, int(call), int(index)
            shape = source.activation(path, index, call).shape
            banner = "" if self.forward_is_fresh else note_html(
                "From the last forward pass, which ran under an older plan.", "#8a5a00")
        else:
            path, call, index, source = value, 0, 0, self.report
            shape = source.variable(path).info.shape
            banner = ""
        dims = [("auto", AUTO)] + [(f"dim {d} ({n})", d) for d, n in enumerate(shape)]
        for dd in (self.rows_dim, self.cols_dim):
            if tuple(dd.options) != tuple(dims):
                dd.options = dims
                dd.value = AUTO
        rows = None if self.rows_dim.value == AUTO else self.rows_dim.value
        cols = None if self.cols_dim.value == AUTO else self.cols_dim.value
        if rows is not None and rows == cols:
            cols = None
        try:
            fig = source.show(path, rows=rows, cols=cols, index=index, call=call)
        except ShardvizError as e:
            self.picture.value = b""
            self.jax_text.value = ""
            self.explanation.value = banner + error_html(e.message, e.hint)
            return
        show_png(self.picture, fig)
        try:
            text = source.text(path, index, call)
            self.jax_text.value = ("<details><summary>as <code>jax.debug.visualize_sharding</code> "
                                   "prints it</summary><pre style='line-height:1.1'>"
                                   f"{html.escape(text)}</pre></details>")
        except ShardvizError as e:
            self.jax_text.value = note_html(e.message)
        try:
            self.explanation.value = banner + note_html(source.explain(path))
        except ShardvizError:
            self.explanation.value = banner

    def _render_variables(self):
        self.variables_table.value = styled(variables_html(self.report))

    def _render_problems(self):
        if self.report.problem_list:
            self.problems_table.value = styled(problems_html(self.report))
        else:
            self.problems_table.value = note_html("No problems: Keras will lay this out as shown.",
                                                  "#1b7f3b")

    def _render_memory(self):
        source = self.traced if self.traced is not None else self.report
        stale = self.traced is not None and not self.forward_is_fresh
        self.memory_note.value = note_html(
            "Stale: from the last forward pass, under an older plan." if stale else
            ("Variables only; run the forward pass for activations and temporaries."
             if self.traced is None else ""), "#8a5a00")
        show_png(self.memory_picture, source.show_memory())

    def _render_communication(self):
        if self.traced is None:
            self.comm_note.value = note_html("Run the forward pass to see the collectives XLA inserts.")
            self.comm_table.value = ""
            self.flow_picture.value = b""
            return
        stale = not self.forward_is_fresh
        self.comm_note.value = note_html(
            "Stale: from the last forward pass, under an older plan." if stale else "",
            "#8a5a00")
        self.comm_table.value = styled(collectives_html(self.traced))
        options = [("choose a collective…", None)] + [
            (f"#{i} {c['kind']} at {c['layer'] or '?'} ({human_bytes(c['bytes_per_device'])})", i)
            for i, c in enumerate(self.traced.collectives.to_dict("records"))]
        if list(self.why_select.options) != options:
            self.why_select.options = options
            self.why_select.value = None
        self._show_why()
        show_png(self.flow_picture, self.traced.show_flow())

    # ------------------------------------------------------------ explanations
    def _explain_selected(self):
        """Explain the chosen collective (compiling the changes it suggests)."""
        index = self.why_select.value
        self._why = None
        if index is not None and self.traced is not None:
            self.why_html.value = note_html(
                f"Explaining collective #{index}: compiling the changes its layouts suggest…")
            self._why = self.traced.why(index)
        self._show_why()
        if self._why is not None:  # the flow picture marks the fixes found
            show_png(self.flow_picture, self.traced.show_flow())

    def _show_why(self):
        why = self._why
        if why is None or self.traced is None or why is not self.traced.explained.get(why.index):
            self._why = None
            self.why_html.value = note_html(
                "Choose a collective to see why XLA inserted it, and a fix." if
                self.traced is not None and len(self.traced.collectives) else "")
            self.fix_button.disabled = True
            return
        stale = not self.forward_is_fresh
        self.why_html.value = (note_html(
            "Stale: this explains the last forward pass, which ran under an older plan; run it "
            "again to explain (and fix) the current one.", "#8a5a00") if stale else "") \
            + styled(why._repr_html_())
        self.fix_button.disabled = why.fix is None or stale

    def _apply_fix(self):
        """Apply the explained fix as one edit (Undo takes it back)."""
        why = self._why
        if why is None or why.fix is None or not self.forward_is_fresh:
            return
        refused = self.propose(lambda _: why.fix)
        if refused:
            self._show_error(refused)

    def _render_suggest(self):
        if not self._suggestions:
            self.suggest_note.value = note_html(
                f"Plans for the {self.state.plan.mesh_size} devices of this mesh, from the "
                "model's structure" + (", compiled with the inputs to confirm them."
                                        if self.state.inputs is not None else "."))
        self._show_suggestion()

    # ------------------------------------------------------------ suggestions
    def _suggest(self):
        from ..planner import suggest

        n = self.state.plan.mesh_size
        self.suggest_note.value = note_html(f"Looking for plans for {n} devices…")
        target = self.target if self.target and self.target != "cpu" else None
        found = suggest(self.scan, devices=n, inputs=self.state.inputs, target=target,
                        train_step=self.state.train_step, labels=self.state.labels)
        self._suggestions = list(found)
        self.suggest_table.value = styled(found._repr_html_())
        self.suggest_note.value = note_html(
            f"{len(found)} plans for {n} devices, best first"
            + ("" if self.state.inputs is not None else
               " (estimated: give the Explorer inputs=... to compile them)") + ".")
        self.suggest_select.options = [("choose a plan…", None)] + [
            (f"[{i}] {c.name} on {' × '.join(f'{a}={k}' for a, k in c.plan.mesh_dict.items())}",
             i) for i, c in enumerate(found)]
        self.suggest_select.value = 0 if found else None

    def _show_suggestion(self):
        from ..planner import plan_diff

        index = self.suggest_select.value
        if index is None or index >= len(self._suggestions):
            self.suggest_diff.value = ""
            self.suggest_apply.disabled = True
            return
        chosen = self._suggestions[index]
        lines = plan_diff(self.state.plan, chosen.plan)
        reasons = "".join(f"<li><code>{html.escape(k)}</code>: {html.escape(r)}</li>"
                          for k, r in chosen.reasons.items())
        self.suggest_diff.value = styled(
            "<b>Changes to the current plan</b><pre>" + html.escape("\n".join(lines)) + "</pre>"
            + (f"<b>Why</b><ul>{reasons}</ul>" if reasons else ""))
        self.suggest_apply.disabled = lines == ["no change"]

    def _apply_suggestion(self):
        """Apply the chosen plan as one edit (Undo takes it back)."""
        index = self.suggest_select.value
        if index is None or index >= len(self._suggestions):
            return
        refused = self.propose(lambda _: self._suggestions[index].plan)
        if refused:
            self._show_error(refused)
        self._show_suggestion()

    def _render_export(self):
        current = self.state.plan.to_json()
        typed = self.json_text.value
        if typed in ("", self._json_shown) or typed == current:
            set_if_changed(self.json_text, "value", current)
            self._json_shown = current
        else:  # never overwrite JSON the user typed or pasted and has not loaded
            self.json_note.value = note_html(
                "Your edited JSON is kept; Load JSON applies it (the plan has changed since).",
                "#8a5a00")
        data = base64.b64encode(self.state.plan.to_json().encode()).decode()
        self.download.value = (f'<a download="plan.json" href="data:application/json;base64,{data}"'
                               ' style="line-height:28px">download plan.json</a>')

    # ------------------------------------------------------------ export
    def _show_python(self):
        self.python_code.value = self.state.plan.to_python()

    def _load_json_text(self):
        self._load_json(self.json_text.value, "Load JSON")

    def _load_upload(self):
        files = self.upload.value
        if not files:
            return
        name = files[0].get("name") or "the file"
        try:
            text = bytes(files[0]["content"]).decode("utf-8")
        except UnicodeDecodeError:
            self.export_message.value = error_html(
                f"Open file {name!r} failed: it is not UTF-8 text, so it is not a plan.",
                "Choose a plan.json written by shardviz (Download, or Plan.to_json()).")
            return
        self._load_json(text, f"Open file {name!r}")

    def _load_json(self, text, what):
        try:
            plan = Plan.from_json(text)
            self.propose(lambda _: plan, raise_errors=True)
        except ShardvizError as e:
            self.export_message.value = error_html(f"{what} failed: {e.message}", e.hint)
            return
        except Exception as e:  # a plan nothing checked yet: the current plan stays
            self.export_message.value = error_html(
                f"{what} failed: shardviz could not read or analyse this plan "
                f"({type(e).__name__}: {str(e)[:200]}). The current plan stays.",
                "Check the plan's mesh and rules (Download shows a plan that loads).")
            return
        self.error.value = ""
        self.json_note.value = ""
        self._json_shown = self.json_text.value = self.state.plan.to_json()
        self.export_message.value = note_html(f"{what}: plan loaded.", "#1b7f3b")
