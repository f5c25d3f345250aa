"""A Report as one self-contained HTML file, with every picture embedded
(its data as JSON is :mod:`shardviz.report.serialize`)."""

from __future__ import annotations

import base64
import datetime
import html
import io

from .. import __version__
from . import explanation_view
from .html import CSS, plan_html, report_html


def _explanations_html(report) -> str:
    explained = sorted(report.explained.items())
    if not explained:
        return ""
    return ("<h2>Why each collective is there</h2>"
            + "".join(f"<h3>Collective {i}</h3>{explanation_view.html(why)}" for i, why in explained))


def report_html_file(report, pictures, title: str = "shardviz report",
                     preface: str = "") -> str:
    """One HTML file, readable offline: ``preface`` (HTML), then summary,
    tables, problems and ``pictures`` (``(title, Figure)`` pairs, as
    ``Report.pictures()`` gives them) each as an embedded PNG."""
    from .mpl import DPI

    figures = []
    for name, fig in pictures:
        # Drawn at twice the pixels it is shown at, so labels stay sharp on
        # high-DPI screens and when zoomed.
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=2 * DPI)
        data = base64.b64encode(buf.getvalue()).decode()
        width = int(round(fig.get_figwidth() * DPI))
        figures.append(f'<figure><figcaption>{html.escape(name)}</figcaption>'
                       f'<img alt="{html.escape(name)}" width="{width}" '
                       f'src="data:image/png;base64,{data}"></figure>')
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>{CSS}"
        "<style>body{margin:24px;font-family:sans-serif} figure{margin:12px 0}"
        " figcaption{font-weight:600;margin-bottom:4px} img{max-width:100%;height:auto}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p style='color:#555'>shardviz {__version__}, {when}.</p>"
        + preface
        + plan_html(report.plan)
        + report_html(report, all_rows=True)
        + _explanations_html(report)
        + "<h2>Pictures</h2>" + "".join(figures) + "</body></html>"
    )
