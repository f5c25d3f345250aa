"""The Fit tab: will this fine-tune fit, with what batch, on how many chips?

It asks :func:`shardviz.fit` about the Explorer's own model (or builder),
inputs and target, with the fine-tune settings typed beside the target:
with a slice (``v5e:2x4``) the largest global batch whose train step fits,
for each remat mode chosen; with a chip family (``v5e``) and a batch, the
smallest slice sold that fits. Each compile's line shows while it runs; a
question shardviz refuses shows its message and hint here, and every value
typed stays.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from ...errors import ShardvizError
from ...format import plural
from ...model.tuning import DTYPES, QUANTIZE_MODES
from ...planner import fit
from ...planner.fit_answer import FitAnswer
from ...planner.fit_search import MAX_COMPILES
from ...render.fit_view import answers_table, compiles_table, expected_step_html
from ...render.html import styled
from ...render.palette import STATUS_COLOURS
from ..common import error_html, note_html
from ..tab import Tab

FAMILIES = ("v5e", "v5p", "v6e", "v4")
"""The chip families offered in the target box (for the smallest slice)."""

SLICES = ("v5e:1x1", "v5e:2x2", "v5e:2x4", "v5e:4x4", "v5p:2x2x2", "v6e:4x4")
"""The slices offered in the target box (for the largest batch)."""

REMAT_CHOICES = (("no remat", "none"), ("full", "full"), ("activations", "activations"),
                 ("larger than N bytes", "larger_than"))
"""The remat modes offered; choosing several compares them."""

PLAN_CHOICES = (("fully sharded (fit's default)", "default"),
                ("the Explorer's plan (batch axis grown to fill a slice)", "plan"))

PRECISION_CHOICES = (("exact", 0.0), ("within 1%", 0.01), ("within 5%", 0.05))
"""How close the largest batch's search goes before it stops (fit's ``precision``)."""

PROGRESS_LINES = 12
"""How many of the latest compile lines the progress box shows."""


class FitTab(Tab):
    """``shardviz.fit`` on the Explorer's model, with the fine-tune settings typed here."""

    title = "Fit"

    def build(self) -> widgets.Widget:
        W = widgets
        self._followed = self._explorer_target()
        self.answer: FitAnswer | None = None
        self._failed = False
        question = self._question_row()
        tuning = self._tuning_row()
        search = self._search_row()
        self.fit_button = W.Button(description="Fit", icon="compress", button_style="primary",
                                   tooltip="Compile the train step until the answer is found",
                                   layout=W.Layout(width="110px", min_width="110px"))
        self.fit_button.on_click(lambda _: self.app.guarded(self.ask))
        self.note = W.HTML()
        self.progress_log = W.HTML()
        self.answer_html = W.HTML()
        self.compiles_html = W.HTML()
        return W.VBox([question, tuning, search, W.HBox([self.fit_button, self.note]),
                       self.progress_log, self.answer_html, self.compiles_html])

    def _question_row(self) -> widgets.Widget:
        """The target (a slice or a family), the batch, the sequence length and the layout."""
        W = widgets
        self.target_box = W.Combobox(
            value=self._followed, options=list(dict.fromkeys((self._followed,) + SLICES + FAMILIES)),
            description="target", ensure_option=False, placeholder="v5e:2x4, or v5e",
            tooltip="A slice for the largest batch, a chip family (v5e) for the smallest slice",
            layout=W.Layout(width="220px"))
        self.batch_box = W.Text(description="batch", placeholder="for a family",
                                layout=W.Layout(width="170px"))
        self.seq_box = W.Text(description="seq", placeholder="token models",
                              layout=W.Layout(width="170px"))
        self.plan_choice = W.Dropdown(options=PLAN_CHOICES, value="default", description="layout",
                                      layout=W.Layout(width="420px"))
        return W.HBox([self.target_box, self.batch_box, self.seq_box, self.plan_choice],
                      layout=W.Layout(flex_flow="row wrap"))

    def _tuning_row(self) -> widgets.Widget:
        """The settings that change how the model is built: dtype, LoRA, quantization."""
        W = widgets
        self.dtype_box = W.Combobox(options=list(DTYPES), description="dtype", value="",
                                    placeholder="as built", ensure_option=False,
                                    layout=W.Layout(width="220px"))
        self.lora_box = W.Text(description="LoRA rank", placeholder="none",
                               layout=W.Layout(width="170px"))
        self.quantize_choice = W.Dropdown(options=[("none", None)] + [(m, m) for m in QUANTIZE_MODES],
                                          value=None, description="quantize",
                                          layout=W.Layout(width="200px"))
        return W.HBox([self.dtype_box, self.lora_box, self.quantize_choice],
                      layout=W.Layout(flex_flow="row wrap"))

    def _search_row(self) -> widgets.Widget:
        """The remat modes to compare, and how far the search goes."""
        W = widgets
        self.remat_choice = W.SelectMultiple(options=REMAT_CHOICES, value=("none",), rows=4,
                                             description="remat", layout=W.Layout(width="260px"))
        self.larger_than_box = W.BoundedIntText(value=2**20, min=1, max=2**50,
                                                description="N bytes",
                                                layout=W.Layout(width="200px"))
        self.precision_choice = W.Dropdown(options=PRECISION_CHOICES, value=0.0,
                                           description="search", layout=W.Layout(width="200px"))
        self.max_compiles_box = W.BoundedIntText(value=MAX_COMPILES, min=2, max=1000,
                                                 description="compiles ≤",
                                                 layout=W.Layout(width="170px"))
        return W.HBox([self.remat_choice, W.VBox([self.larger_than_box, self.precision_choice,
                                                  self.max_compiles_box])])

    # ------------------------------------------------------------ the tab protocol
    def show(self) -> None:
        if self.answer is None and not self._failed:
            self.note.value = note_html(
                "A slice as target: the largest batch whose train step fits, per remat mode. "
                "A chip family (v5e) and a batch: the smallest slice sold that fits.")

    def refresh(self) -> None:
        """Follow the Explorer's target box, unless another target was typed here."""
        name = self._explorer_target()
        if name != self._followed:
            if self.target_box.value.strip() in ("", self._followed):
                self.target_box.value = name
            self._followed = name

    def _explorer_target(self) -> str:
        target = self.state.target
        return target.name if target.slices == 1 else target.label

    # ------------------------------------------------------------ asking
    def ask(self) -> None:
        """Run ``shardviz.fit`` with the settings typed; show its answer or why it refused."""
        lines: list[str] = []
        self.fit_button.disabled = True
        self.progress_log.value = ""
        self.note.value = note_html("Compiling the train step…")
        try:
            self.answer = fit(self.state.source, target=self.target_box.value.strip(),
                              progress=lambda line: self._progress(lines, line),
                              **self.settings())
        except ShardvizError as e:
            self._refused(error_html(e.message, e.hint))
        except Exception as e:  # the tab must outlive any question
            self._refused(error_html(f"Fit failed: {type(e).__name__}: {str(e)[:300]}",
                                     "Change a setting and ask again."))
        else:
            self._failed = False
            self._show_answer(self.answer)
        finally:
            self.fit_button.disabled = False

    def settings(self) -> dict[str, Any]:
        """The keyword arguments of ``fit`` the boxes hold (a value typed that is
        no number goes through as typed, so that fit's own check names it)."""
        seq = _whole(self.seq_box.value)
        given = seq is None
        plan = self.state.plan if self.plan_choice.value == "plan" else None
        return {"batch": _whole(self.batch_box.value), "seq": seq,
                "inputs": self.state.inputs if given else None,
                "labels": self.state.labels if given else None, "plan": plan,
                "dtype": self.dtype_box.value.strip() or None,
                "lora_rank": _whole(self.lora_box.value), "quantize": self.quantize_choice.value,
                "remat": self.remat(), "precision": self.precision_choice.value,
                "max_compiles": self.max_compiles_box.value}

    def remat(self) -> object:
        """The remat mode chosen, or a list of modes to compare."""
        modes = [None if m == "none" else
                 f"larger_than:{self.larger_than_box.value}" if m == "larger_than" else m
                 for m in self.remat_choice.value]
        if not modes:
            return None
        return modes[0] if len(modes) == 1 else modes

    def _progress(self, lines: list[str], line: str) -> None:
        lines.append(line)
        self.note.value = note_html(f"Compiling the train step… ({plural(len(lines), 'line')} so far)")
        self.progress_log.value = ("<pre style='margin:0;font-size:11px'>"
                                   + html.escape("\n".join(lines[-PROGRESS_LINES:])) + "</pre>")

    def _refused(self, text: str) -> None:
        self._failed = True
        self.answer = None
        self.note.value = text
        self.answer_html.value = self.compiles_html.value = ""

    # ------------------------------------------------------------ the answer
    def _show_answer(self, answer: FitAnswer) -> None:
        self.note.value = note_html(
            f"The {answer.question}, {answer.tuning.describe()}: "
            f"{plural(answer.compile_count, 'compile')}.", STATUS_COLOURS["ok"])
        notes = "".join(f"<li>{html.escape(n)}</li>" for n in answer.notes)
        self.answer_html.value = styled(
            answers_table(answer.answers) + expected_step_html(answer)
            + (f"<ul>{notes}</ul>" if notes else ""))
        self.compiles_html.value = styled(
            f"<details><summary>{plural(answer.compile_count, 'compile')}</summary>"
            f"{compiles_table(answer.compiles)}</details>")


def _whole(text: str) -> int | str | None:
    """A box's whole number; None when empty; the text itself when it is no number."""
    text = text.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        return text
