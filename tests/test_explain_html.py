"""The comparison page: heatmaps, passage pairs, escaped text; and that headless Chromium renders it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from graphdoc.documents import Document, Passage
from graphdoc.explain import Comparison, PassagePair, SectionInfo, render_comparison
from graphdoc.explain.html import colour

EVIL = "<script>alert('x')</script> & \"quotes\""
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def comparison() -> Comparison:
    """Three passages (two sections) against two (one section), by hand; one passage holds markup."""
    text_a = f"First passage here. {EVIL} Third one."
    spans_a = [(0, 19, 0, "Intro"), (20, 20 + len(EVIL), 1, "<b>Body</b>"), (21 + len(EVIL), len(text_a), 1, "<b>Body</b>")]
    text_b = "Other first. Other second."
    spans_b = [(0, 12, 0, ""), (13, 26, 0, "")]
    pa = [Passage("a", i, s, t, b, e, text_a[b:e]) for i, (b, e, s, t) in enumerate(spans_a)]
    pb = [Passage("b", i, s, t, b, e, text_b[b:e]) for i, (b, e, s, t) in enumerate(spans_b)]
    return Comparison(
        (Document("a", text_a, title="Doc <A>"), Document("b", text_b, title="Doc B")), (pa, pb),
        ([SectionInfo(0, "Intro", (0,)), SectionInfo(1, "<b>Body</b>", (1, 2))], [SectionInfo(0, "", (0, 1))]),
        0.75, np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.4]]), np.array([[0.5], [0.6]]),
        [PassagePair(0, 0, 0.9), PassagePair(1, 1, 0.8)])


def test_page_has_both_heatmaps_with_one_cell_per_entry() -> None:
    page = render_comparison(comparison())
    assert page.startswith("<!DOCTYPE html>")
    passage_table = page.split('id="passage-heatmap"')[1].split("</table>")[0]
    section_table = page.split('id="section-heatmap"')[1].split("</table>")[0]
    assert passage_table.count('class="cell') == 6 and section_table.count('class="cell') == 2
    assert 'data-a="1" data-b="0" data-value="0.2000"' in passage_table
    assert ">0.60</td>" in section_table
    assert passage_table.count(" top") == 2  # the two listed pairs are outlined
    assert "0.7500" in page


def test_page_lists_the_pairs_side_by_side() -> None:
    page = render_comparison(comparison())
    assert page.count('class="pair"') == 2
    assert 'id="pair-1" data-a="0" data-b="0"' in page
    assert "First passage here." in page and "Other first." in page


def test_text_is_escaped_and_the_page_needs_nothing_from_elsewhere() -> None:
    page = render_comparison(comparison())
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quotes&quot;" in page
    assert "&lt;b&gt;Body&lt;/b&gt;" in page and "<b>Body</b>" not in page
    assert "Doc &lt;A&gt;" in page
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "@import" not in page


def test_colour_scale_runs_from_light_to_dark() -> None:
    assert colour(0.0) == "#f7fbff" and colour(1.0) == "#08306b"


def _browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


@pytest.mark.slow
def test_headless_chromium_renders_the_heatmaps_and_pairs(tmp_path: Path) -> None:
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium on PATH (apt-get install -y chromium) to render the page")
    page = tmp_path / "compare.html"
    page.write_text(render_comparison(comparison()), encoding="utf-8")
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run",
               f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert len(re.findall(r'<td class="cell[^"]*" data-a="\d" data-b="\d"', dom)) == 8
    assert dom.count('class="pair"') == 2 and "Other second." in dom
    assert "<script" not in dom.lower() and "&lt;script&gt;" in dom
