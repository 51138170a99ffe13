"""A long text read from a run (a case's reason) is shortened where a report shows it, with its
length and the file that holds it whole, and any word the report prints by its ends and its
length, so that no text of a run can keep the PDF's layout busy."""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys

from markupsafe import Markup

from kit.output import elided
from kit.report.charts import data_uri
from kit.report.free_text import LONGEST_WORD, SHOWN, shown_text
from kit.report.render import without_long_words
from kit.rundir.directory import RunDir

SOURCE = "cases/c/result.json"


def test_a_short_text_is_shown_as_it_is():
    reason = "FlashAttention-2 needs a CUDA GPU; this case runs on CPU"
    assert shown_text(reason, SOURCE) == reason


def test_a_long_text_or_word_is_shown_by_its_start_with_its_length_and_file():
    words = shown_text("a reason; " * 6400, SOURCE)
    assert words.startswith("a reason; " * 5) and words.endswith(f"… (64,000 characters in {SOURCE})")
    assert len(words) < SHOWN + 100
    word = shown_text("x" * 64_000, SOURCE)
    assert max(map(len, word.split())) <= LONGEST_WORD and "(64,000 characters in cases/c/result.json)" in word
    path = "/a" * 100  # a word of 200 characters, shorter than SHOWN: shown by its ends
    assert shown_text(path, SOURCE) == f"{path[:60]}…{path[-40:]}… (200 characters in {SOURCE})"


def test_any_word_the_template_prints_is_cut_but_what_the_kit_made_safe_to_inline():
    long_word = "y" * 64_000
    assert without_long_words(f"kit run --out /{long_word}") == f"kit run --out {elided('/' + long_word)}"
    assert "(64,001 characters)" in str(without_long_words(f"/{long_word}"))
    chart = data_uri("<svg>" + "<g/>" * 1000 + "</svg>")
    assert without_long_words(chart) is chart and without_long_words(Markup(long_word)) == long_word
    assert without_long_words(3) == 3


def test_a_reason_or_a_command_line_word_of_64000_characters_renders_in_seconds(real_smoke_run, tmp_path):
    """A reason without a space took the PDF 199 s of CPU before it was shortened, a word of a
    run's command line over two minutes; now as long as any report."""
    run = tmp_path / "run"
    shutil.copytree(real_smoke_run, run)
    run_dir = RunDir(run)
    result = next(result for result in run_dir.results() if result.status == "unavailable" and result.reason)
    path = run_dir.result_path(result.case_id)
    path.write_text(result.model_copy(update={"reason": "x" * 64_000}).model_dump_json(indent=2))
    info = run_dir.read_info()
    run_dir.write_info(info.model_copy(update={"argv": ["kit", "run", "--out", "/" + "y" * 64_000]}))
    run_dir.write_sums()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "report", str(run), "--format", "html,pdf", "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert done.returncode == 0, done.stderr[-3000:]
    assert cpu < 30, cpu  # the report of the untouched run takes about 5 s of CPU here
    html = (tmp_path / "r" / "report.html").read_text()
    assert f"(64,000 characters in cases/{result.case_id}/result.json)" in html and "x" * 200 not in html
    assert "(64,001 characters)" in html and "y" * 300 not in html
