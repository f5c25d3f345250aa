"""The Export tab: the plan as Python to paste, and as JSON to edit, load,
open from a file or download."""

from __future__ import annotations

import base64

import ipywidgets as widgets

from ...errors import ShardvizError
from ...plan import Plan
from ...render.palette import STATUS_COLOURS
from ..common import error_html, note_html, set_if_changed
from ..tab import Tab


class ExportTab(Tab):
    """The current plan as Python and JSON; JSON typed, pasted or opened
    here is loaded as one edit."""

    title = "Export"

    def build(self) -> widgets.Widget:
        W = widgets
        python_button = W.Button(description="Copy as Python", icon="copy",
                                 layout=W.Layout(width="160px"))
        python_button.on_click(lambda _: self.app.guarded(self._show_python))
        self.python_code = W.Textarea(layout=W.Layout(width="640px", height="180px"))
        self.json_text = W.Textarea(layout=W.Layout(width="640px", height="160px"))
        self.json_text.add_class("shardviz-json")
        load_json = W.Button(description="Load JSON", icon="upload", layout=W.Layout(width="130px"))
        load_json.on_click(lambda _: self.app.guarded(self._load_json_text))
        self.upload = W.FileUpload(accept=".json", multiple=False, description="Open file")
        self.upload.observe(lambda _: self.app.guarded(self._load_upload), "value")
        self.download = W.HTML()
        self.message = W.HTML()
        self.json_note = W.HTML()
        self._json_shown: str | None = None
        """The JSON last written into ``json_text``: text that differs was typed."""
        return W.VBox([
            W.HBox([python_button, W.HTML("<i>select the code and copy it</i>")]), self.python_code,
            W.HTML("<b>Plan as JSON</b> (edit and load, open a file, or download)"),
            self.json_text, W.HBox([load_json, self.upload, self.download]), self.json_note,
            self.message,
        ])

    def show(self) -> None:
        plan = self.state.plan
        current = plan.to_json()
        typed = self.json_text.value
        if typed in ("", self._json_shown) or typed == current:
            set_if_changed(self.json_text, "value", current)
            self._json_shown = current
        else:  # never overwrite JSON the user typed or pasted and has not loaded
            self.json_note.value = note_html(
                "Your edited JSON is kept; Load JSON applies it (the plan has changed since).",
                STATUS_COLOURS["warning"])
        data = base64.b64encode(plan.to_json().encode()).decode()
        self.download.value = (f'<a download="plan.json" href="data:application/json;base64,{data}"'
                               ' style="line-height:28px">download plan.json</a>')

    def _show_python(self) -> None:
        self.python_code.value = self.state.plan.to_python()

    def _load_json_text(self) -> None:
        self._load_json(self.json_text.value, "Load JSON")

    def _load_upload(self) -> None:
        files = self.upload.value
        if not files:
            return
        name = files[0].get("name") or "the file"
        try:
            text = bytes(files[0]["content"]).decode("utf-8")
        except UnicodeDecodeError:
            self.message.value = error_html(
                f"Open file {name!r} failed: it is not UTF-8 text, so it is not a plan.",
                "Choose a plan.json written by shardviz (Download, or Plan.to_json()).")
            return
        self._load_json(text, f"Open file {name!r}")

    def _load_json(self, text: str, what: str) -> None:
        try:
            plan = Plan.from_json(text)
            self.app.propose(lambda _: plan, raise_errors=True)
        except ShardvizError as e:
            self.message.value = error_html(f"{what} failed: {e.message}", e.hint)
            return
        except Exception as e:  # a plan nothing checked yet: the current plan stays
            self.message.value = error_html(
                f"{what} failed: shardviz could not read or analyse this plan "
                f"({type(e).__name__}: {str(e)[:200]}). The current plan stays.",
                "Check the plan's mesh and rules (Download shows a plan that loads).")
            return
        self.app.show_error("")
        self.json_note.value = ""
        self._json_shown = self.json_text.value = self.state.plan.to_json()
        self.message.value = note_html(f"{what}: plan loaded.", STATUS_COLOURS["ok"])
