"""The printed page: a footer that never runs under the page number, a synthetic run said on every page."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.paper_size_run import write_run

from kit.report.render import render

LONG_RUN_ID = "20261129T064500Z-smoke-a-run-id-of-forty-six-chars"  # longer than the smoke report's that overlapped


@pytest.fixture(scope="module")
def long_named_run(tmp_path_factory, smoke_plan) -> Path:
    run = write_run(tmp_path_factory.mktemp("layout") / LONG_RUN_ID, smoke_plan, cases=["pretrain.tiny-llama.naive.g2"])
    render(run, ["reference"], ["pdf"], run)
    return run


class Words(HTMLParser):
    """pdftotext -bbox's words: each page's size and every word's box."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: list[tuple[float, list[tuple[str, float, float, float, float]]]] = []
        self._box: tuple[float, float, float, float] | None = None

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if tag == "page":
            self.pages.append((float(values["height"]), []))
        elif tag == "word":
            self._box = tuple(float(values[key]) for key in ("xmin", "ymin", "xmax", "ymax"))  # type: ignore[assignment]

    def handle_data(self, data):
        if self._box is not None:
            self.pages[-1][1].append((data, *self._box))
            self._box = None


def footer_words(pdf: Path) -> list[list[tuple[str, float, float, float, float]]]:
    if not shutil.which("pdftotext"):
        pytest.skip("pdftotext (poppler-utils) is not installed")
    html = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    words = Words()
    words.feed(html)
    return [[word for word in page if word[2] > height - 18 / 25.4 * 72] for height, page in words.pages]


def test_the_footer_wraps_a_long_run_id_and_never_runs_under_the_page_number(long_named_run):
    pages = footer_words(long_named_run / "report.pdf")
    assert len(pages) > 5
    for number, footer in enumerate(pages, start=1):
        text = " ".join(word[0] for word in footer)
        assert re.search(rf"page {number} of {len(pages)}", text), text
        assert LONG_RUN_ID in text.replace(" ", "") or LONG_RUN_ID[:30] in text.replace(" ", ""), text
        numbering = [word for word in footer if word[0] in ("page", str(number), "of", str(len(pages)))][-4:]
        left_edge = min(word[1] for word in numbering)
        others = [word for word in footer if word not in numbering]
        for word, _, ymin, xmax, ymax in others:
            overlaps = xmax > left_edge and any(ymin < n[4] and ymax > n[2] for n in numbering)
            assert not overlaps, f"page {number}: {word!r} runs under the page number"
        assert "SYNTHETIC RUN" in text, f"page {number} does not say the run is synthetic: {text}"


def test_a_name_breaks_only_where_a_reader_would_break_it():
    """A narrow cell wraps a case id after a dot and a check's name after an underscore, never
    inside a word ("max_batc h_search"); the characters that allow it are not drawn."""
    from kit.report.render import ZERO_WIDTH_SPACE, breakable

    assert breakable("no_uncorrectable_ecc_error") == ZERO_WIDTH_SPACE.join(["no_", "uncorrectable_", "ecc_", "error"])
    assert breakable("stage max_batch_search ran").split(ZERO_WIDTH_SPACE) == ["stage max_", "batch_", "search ran"]
    assert breakable("serve.llama2-70b.tgi.g8").replace("\u2060", "").split(ZERO_WIDTH_SPACE) == [
        "serve.",
        "llama2-70b.",
        "tgi.",
        "g8",
    ]
    assert breakable("a plain sentence, 12.5 s") == "a plain sentence, 12.5 s"
    # a case id's underscore is no place to break it: only its dots are
    assert "_" + ZERO_WIDTH_SPACE not in breakable("comm.reduce_scatter.g8 and cases/comm.reduce_scatter.g8/")
