"""Each chart drawn once: a second report of the same figures reads the drawing from the kit cache."""

from __future__ import annotations

import pytest

from kit.cache import read_kept
from kit.report import charts
from kit.report.chart_cache import charts_folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


BARS = [charts.Bar(label="z2", group="llama2-7b", value=24.5, error=0.3, runs=3)]


def test_a_chart_is_drawn_once_and_read_back_byte_for_byte(cache, monkeypatch):
    first = charts.bar_chart("throughput", BARS, "10^3 tokens/s")
    assert [read_kept(path, 1 << 24) for path in charts_folder().glob("*.svg")] == [first.encode()]

    def not_drawn():
        raise AssertionError("drawn again")

    monkeypatch.setattr(charts, "pyplot", not_drawn)
    assert charts.bar_chart("throughput", BARS, "10^3 tokens/s") == first


def test_any_change_to_what_a_chart_shows_draws_it_anew(cache):
    charts.bar_chart("throughput", BARS, "10^3 tokens/s")
    charts.bar_chart("throughput", [BARS[0].model_copy(update={"value": 24.500001})], "10^3 tokens/s")
    charts.bar_chart("throughput", BARS, "10^3 tokens/s", log=True)
    charts.bar_chart("memory", BARS, "10^3 tokens/s")
    assert len(list(charts_folder().glob("*.svg"))) == 4


def test_a_cache_that_cannot_be_written_still_gives_the_chart(tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("KIT_CACHE", str(blocked))
    assert charts.bar_chart("throughput", BARS, "10^3 tokens/s").startswith("<svg")


def test_a_drawing_edited_in_the_cache_is_drawn_again_never_inlined(cache):
    """A chart's SVG goes into the HTML report as it is: one someone put in the cache is not read."""
    first = charts.bar_chart("throughput", BARS, "10^3 tokens/s")
    (path,) = charts_folder().glob("*.svg")
    sealed = path.read_bytes()
    path.write_bytes(sealed.replace(b"<svg", b"<svg onload='alert(1)'", 1))  # the seal kept, the drawing not
    assert charts.bar_chart("throughput", BARS, "10^3 tokens/s") == first
    assert path.read_bytes() == sealed
