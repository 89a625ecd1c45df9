"""The self-contained HTML of a report and of the other pages the harness writes (``vtab.html``): titled tables
with anchors, embedded figures, the provenance header and the report's page (:func:`html_page`). The Markdown and
the sentences are :mod:`harness.report.render`'s (the covariance analysis's: :mod:`harness.report.covariance_text`).
"""

from __future__ import annotations

import base64
import html
from typing import Optional, Sequence

from harness.report.covariance_text import _cov_text, _pairs_text
from harness.report.render import (
    _label_rule_text,
    _section_titles,
    _tables,
    anchor,
    bottom_line,
    heading,
)


def html_table(title: str, header, body, tag: str = "h2") -> str:
    """A titled HTML table: a short heading with its anchor (:func:`heading`, :func:`anchor`), the whole title as a
    caption when it was cut, then the table."""
    short, caption = heading(title)
    return (
        f"<{tag} id='{anchor(short)}'>{html.escape(short)}</{tag}>"
        + (f"<p class='caption'>{html.escape(caption)}</p>" if caption else "")
        + "<table><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in header)
        + "</tr>"
        + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
        + "</table>"
    )


def _html_summary(summary: Optional[dict]) -> "list[str]":
    """The verdicts that open a report: its table and findings, as HTML fragments (none without a summary)."""
    if not summary:
        return []
    return [html_table(summary["title"], summary["header"], summary["rows"])] + [
        f"<p>{html.escape(t)}</p>" for t in summary["findings"]
    ]


def html_figure(data: bytes, caption: str) -> str:
    """A PNG (bytes) embedded as a captioned HTML figure."""
    return (
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,'
        f'{base64.b64encode(data).decode()}"><figcaption>{html.escape(caption)}</figcaption></figure>'
    )


def html_header(title: str, prov: dict) -> str:
    """The title and provenance paragraph (command, date, machine, versions) of an HTML page."""
    m = prov["machine"]
    return (
        f"<h1>{html.escape(title)}</h1>"
        f"<p>Written by <code>{html.escape(prov['command'])}</code> on {html.escape(prov['date'])}.<br>"
        f"Machine: {html.escape(str(m.get('cpu')))}, {m.get('cores')} cores"
        f"{', GPU ' + html.escape(m['gpu']) if 'gpu' in m else ''}.<br>Versions: "
        f"{html.escape(', '.join(f'{k} {v}' for k, v in prov['versions'].items()))}.</p>"
    )


def html_document(title: str, parts: Sequence[str]) -> str:
    """A whole HTML page: the report style and ``parts`` (HTML fragments) in order."""
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;"
        "font-size:14px}th{background:#eee}.grid{display:flex;flex-wrap:wrap;gap:12px}"
        "figure{margin:0}figcaption{font-size:12px;text-align:center}.caption{font-style:italic;margin-top:0}"
        "nav{margin:1em 0;line-height:1.6}.bottom{font-size:17px}details{margin:1em 0}"
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def html_page(
    report: dict, rows, cols, figures, cov_png: Optional[bytes], shift: Optional[dict] = None, more: Sequence = ()
) -> str:
    """The self-contained HTML report: the bottom line, the verdicts, the contents, the reliability diagrams (the
    first figure, within the first screens), then every section; long prose (notes, how each entry was made) is
    collapsed (``<details>``)."""
    img = html_figure
    line = bottom_line(report)
    titles = _section_titles(report, rows, cols, cov_png is not None, shift)
    nav = " · ".join(f"<a href='#{anchor(heading(t)[0])}'>{html.escape(heading(t)[0])}</a>" for t in titles)
    parts = [
        html_header(f"Report: {report['name']}", report["provenance"]),
        f"<p class='bottom'><strong>{html.escape(line)}</strong></p>" if line else "",
        *_html_summary(report.get("summary")),
        f"<nav><strong>Contents</strong>: {nav}</nav>",
        "<h2 id='reliability-diagrams'>Reliability diagrams</h2><div class='grid'>"
        + "".join(img(p, label) for label, _, p in figures)
        + "</div>",
        f"<p>Evaluation data: {html.escape(report['data'])} ({report['num_examples']} examples, "
        f"{report['num_classes']} classes). ECE: 15 equal-width bins on the top-label confidence."
        f"{html.escape(_label_rule_text(report))}</p>",
    ]
    notes = report.get("notes", [])
    if notes:
        parts.append(
            f"<details><summary>Notes ({len(notes)})</summary>"
            + "".join(f"<p>{html.escape(n)}</p>" for n in notes)
            + "</details>"
        )
    parts += [html_table(title, header, body) for title, header, body in _tables(report, rows, cols)]
    parts += [img(data, caption) for caption, _, data in more]
    pairs = _pairs_text(report["covariance"], report.get("confusable_pairs", []), report.get("class_names"))
    if pairs:
        parts.append(f"<p>{html.escape(pairs)}</p>")
    if cov_png is not None:
        parts.append(
            f"<h2 id='{anchor('Covariance ranks (paper Figure 2)')}'>Covariance ranks (paper Figure 2)</h2><p>{html.escape(_cov_text(report['covariance']))}</p>"
            + img(cov_png, "Figure 2 ranks")
        )
    if shift:
        parts.append(
            f"<h2 id='{anchor(heading(shift['title'])[0])}'>{html.escape(heading(shift['title'])[0])}</h2>"
            + "".join(f"<p>{html.escape(t)}</p>" for t in shift["text"])
        )
        parts += [html_table(title, header, body, "h3") for title, header, body in shift["tables"]]
        parts += [img(data, caption) for caption, _, data in shift["figures"]]
    parts.append(
        "<h2 id='how-each-entry-was-made'>How each entry was made</h2><details><summary>"
        f"{len(report['entries'])} entries</summary><ul>"
        + "".join(
            f"<li>{html.escape(e['label'])} ({html.escape(e['source'])}): <code>{html.escape(e['command'] or 'unknown')}"
            "</code></li>"
            for e in report["entries"]
        )
        + "</ul></details>"
    )
    return html_document(report["name"], [p for p in parts if p])
