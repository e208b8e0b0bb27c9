"""A self-contained HTML page for a :class:`~graphdoc.explain.compare.Comparison`.

Inline CSS only (no scripts, fonts or style sheets from elsewhere): the section x section and
passage x passage matrices as tables whose cells are coloured by similarity, and the most similar
passage pairs side by side. Every piece of document text is HTML-escaped and isolated for bidirectional
text (``<bdi>``, ``dir="auto"``, or U+2068/U+2069 in attributes), so that a right-to-left title or passage
does not reorder the labels, numbers and punctuation around it.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

import numpy as np

from graphdoc.documents import Passage
from graphdoc.explain.compare import Comparison

#: Colour scale endpoints (light to dark blue), interpolated linearly between a matrix's min and max.
LOW, HIGH = (247, 251, 255), (8, 48, 107)

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
.summary b { font-size: 1.2em; }
table.heatmap { border-collapse: collapse; font-size: 0.75em; }
table.heatmap th { font-weight: normal; padding: 2px 4px; text-align: right; white-space: nowrap;
  max-width: 16em; overflow: hidden; text-overflow: ellipsis; }
table.heatmap thead th { text-align: left; writing-mode: vertical-rl; transform: rotate(180deg); }
#section-heatmap td.cell { min-width: 4em; height: 2.2em; text-align: center; }
#passage-heatmap td.cell { width: 10px; height: 10px; padding: 0; }
td.top { outline: 2px solid #d62728; outline-offset: -2px; }
td.dark { color: #fff; }
.legend { font-size: 0.8em; color: #555; }
.pair { border-top: 1px solid #ccc; padding: 0.5em 0; }
.pair h3 { font-size: 1em; margin: 0.3em 0; }
.sides { display: flex; gap: 1.5em; }
.passage { flex: 1; background: #f6f8fa; padding: 0.6em 0.8em; border-radius: 4px; }
.passage .meta { font-size: 0.8em; color: #555; margin-bottom: 0.4em; }
.passage p { margin: 0; white-space: pre-wrap; }
"""


def shade(value: float, low: float, high: float) -> float:
    """Where ``value`` lies between ``low`` (0) and ``high`` (1), clipped."""
    return 0.0 if high <= low else min(max((value - low) / (high - low), 0.0), 1.0)


def colour(t: float) -> str:
    """``#rrggbb`` at ``t`` in [0, 1] on the scale from light to dark."""
    return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(LOW, HIGH))


def isolated(text: str) -> str:
    """``text`` escaped inside a ``<bdi>`` element: its direction does not leak into what surrounds it."""
    return f"<bdi>{escape(text)}</bdi>"


def isolated_attribute(text: str) -> str:
    """``text`` between FIRST STRONG ISOLATE and POP DIRECTIONAL ISOLATE, for attributes (no markup there)."""
    return f"\u2068{text}\u2069"


def heatmap(table_id: str, matrix: np.ndarray, rows: Sequence[str], cols: Sequence[str],
            show_values: bool = False, marked: frozenset = frozenset()) -> str:
    """A table with one coloured ``td.cell`` per entry (``data-a``/``data-b``: row and column)."""
    low, high = (float(matrix.min()), float(matrix.max())) if matrix.size else (0.0, 1.0)
    head = "".join(f"<th title=\"{escape(c)}\">{isolated(_short(c))}</th>" for c in cols)
    body = []
    for i, label in enumerate(rows):
        cells = []
        for j, value in enumerate(matrix[i]):
            value, t = float(value), shade(float(value), low, high)
            classes = "cell" + (" top" if (i, j) in marked else "") + (" dark" if t > 0.55 else "")
            tip = escape(f"{isolated_attribute(label)} × {isolated_attribute(cols[j])}: {value:.3f}")
            text = f"{value:.2f}" if show_values else ""
            cells.append(f'<td class="{classes}" data-a="{i}" data-b="{j}" data-value="{value:.4f}" '
                         f'style="background:{colour(t)}" title="{tip}">{text}</td>')
        body.append(f"<tr><th title=\"{escape(label)}\">{isolated(label)}</th>{''.join(cells)}</tr>")
    legend = (f'<p class="legend">colour from {low:.3f} (light) to {high:.3f} (dark); '
              "rows: first document, columns: second</p>")
    return (f'<table class="heatmap" id="{table_id}"><thead><tr><th></th>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>{legend}")


def _short(label: str, limit: int = 40) -> str:
    return label if len(label) <= limit else label[:limit - 1] + "…"


def passage_card(side: str, passage: Passage) -> str:
    section = f" · {isolated(passage.section_title)}" if passage.section_title else ""
    return (f'<div class="passage"><div class="meta">{side} passage {passage.index}{section} · '
            f"characters {passage.start}–{passage.end}</div><p dir=\"auto\">{escape(passage.text)}</p></div>")


def pairs_html(comparison: Comparison) -> str:
    items = []
    for rank, pair in enumerate(comparison.pairs, start=1):
        a, b = comparison.passages[0][pair.a], comparison.passages[1][pair.b]
        items.append(f'<div class="pair" id="pair-{rank}" data-a="{pair.a}" data-b="{pair.b}">'
                     f"<h3>#{rank} · cosine {pair.score:.3f}</h3><div class=\"sides\">"
                     f"{passage_card('A', a)}{passage_card('B', b)}</div></div>")
    return f'<div class="pairs">{"".join(items) or "<p>No passage pairs.</p>"}</div>'


def render_comparison(comparison: Comparison) -> str:
    """The whole page as a string (UTF-8 when written)."""
    doc_a, doc_b = comparison.documents
    name_a, name_b = (d.title or d.id for d in comparison.documents)
    secs_a, secs_b = ([s.label for s in secs] for secs in comparison.sections)
    pas_a, pas_b = ([f"p{p.index}" for p in ps] for ps in comparison.passages)
    marked = frozenset((p.a, p.b) for p in comparison.pairs)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>graphdoc compare: {escape(isolated_attribute(name_a))} vs {escape(isolated_attribute(name_b))}"
        f"</title><style>{CSS}</style></head><body>"
        f"<h1>A: {isolated(name_a)} <small>({isolated(doc_a.id)})</small><br>"
        f"B: {isolated(name_b)} <small>({isolated(doc_b.id)})</small></h1>"
        f'<p class="summary">Document similarity (cosine): <b id="document-similarity">'
        f"{comparison.document_similarity:.4f}</b> · {len(pas_a)} × {len(pas_b)} passages · "
        f"{len(secs_a)} × {len(secs_b)} sections</p>"
        f"<h2>Section × section similarity</h2>"
        f"{heatmap('section-heatmap', comparison.section_similarity, secs_a, secs_b, show_values=True)}"
        f"<h2>Passage × passage similarity</h2>"
        f"{heatmap('passage-heatmap', comparison.passage_similarity, pas_a, pas_b, marked=marked)}"
        f"<h2>Most similar passage pairs</h2>{pairs_html(comparison)}</body></html>\n")
