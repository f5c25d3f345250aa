"""The Tensor tab: pick a variable or an activation, see how it is laid out."""

from __future__ import annotations

import html

import ipywidgets as widgets

from ...errors import ShardvizError
from ...render.palette import STATUS_COLOURS
from ..common import error_html, note_html, set_if_changed, show_png
from ..tab import Tab

AUTO = -1  # the dim choosers' "auto" (None would read as "nothing selected")


class TensorTab(Tab):
    """A filterable list of paths (variables, then the traced pass's
    activations) and the picture of the chosen one."""

    title = "Tensor"

    def build(self) -> widgets.Widget:
        W = widgets
        self.filter = W.Text(placeholder="filter paths…", layout=W.Layout(width="260px"))
        self.filter.add_class("shardviz-filter")
        self.filter.observe(lambda _: self.app.guarded(self.refresh), "value")
        self.picker = W.Select(rows=14, layout=W.Layout(width="320px"))
        self.picker.add_class("shardviz-picker")
        self.picker.observe(lambda _: self.app.guarded(self.show), "value")
        self.rows_dim = W.Dropdown(description="rows", options=[("auto", AUTO)], value=AUTO,
                                   layout=W.Layout(width="150px"))
        self.cols_dim = W.Dropdown(description="cols", options=[("auto", AUTO)], value=AUTO,
                                   layout=W.Layout(width="150px"))
        for dd in (self.rows_dim, self.cols_dim):
            dd.observe(lambda _: self.app.guarded(self.show), "value")
        self.picture = W.Image(format="png")
        self.picture.add_class("shardviz-picture")
        self.jax_text = W.HTML()
        self.explanation = W.HTML()
        return W.HBox([
            W.VBox([self.filter, self.picker]),
            W.VBox([W.HBox([self.rows_dim, self.cols_dim]), self.picture, self.explanation,
                    self.jax_text]),
        ])

    def refresh(self) -> None:
        """List the paths that pass the filter, keeping the chosen one."""
        state = self.state
        needle = self.filter.value.strip().lower()
        paths = [(p, p) for p in state.report.paths]
        if state.traced is not None:
            acts = state.traced.activations
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

    def show(self) -> None:
        state = self.state
        value = self.picker.value
        if not value:
            self.picture.value = b""
            return
        if "#" in value:
            path, call_text, index_text = value.rsplit("#", 2)
            source, call, index = state.traced, int(call_text), int(index_text)
            assert source is not None  # activations are listed only after a pass
            shape = source.activation(path, index, call).shape
            banner = "" if state.fresh else note_html(
                "From the last forward pass, which ran under an older plan.", STATUS_COLOURS["warning"])
        else:
            path, call, index, source = value, 0, 0, state.report
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
