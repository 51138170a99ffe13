"""`kit report` for real, at the size of a paper run, through the CLI as a user runs it.

The run directory is tests/support/paper_size_run.py's: every case of the `paper` plan on 8 x A800,
written the way `kit run` writes one, with synthetic numbers (some OOM, errors, unavailable
cases). The PDF is read back as text (pdftotext from poppler-utils, else pypdfium2), its pages
are rasterised to check that nothing is printed past the margins, and the HTML is opened in
headless Chromium. Set KIT_REPORT_PAGES=DIR to keep the page images for a person to look at.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support.paper_size_run import write_paper_size_run, write_run

from kit.plan.protocol import build_plan, load_protocol
from kit.report.build import SYNTHETIC_BANNER
from kit.rundir.directory import RunDir
from kit.rundir.evidence import verify
from kit.rundir.schema import RankSample

KIT = [sys.executable, "-m", "kit.cli"]
A4_WIDTH_MM, SIDE_MARGIN_MM = 210.0, 14.0  # report_templates/style.css, @page
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def kit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*KIT, *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})


def significant(value: float) -> int:
    """Decimals that show `value` to three significant digits."""
    return max(0, 2 - math.floor(math.log10(abs(value))))


def mean_std_text(values: list[float], scale: float = 1.0) -> str:
    """How a table prints a metric over the runs: the mean to three significant digits, the
    sample standard deviation to as many decimals."""
    values = [value * scale for value in values]
    mean = statistics.fmean(values)
    if len(values) == 1:
        return f"{mean:.{significant(mean)}f} (1 run)"
    return f"{mean:.{significant(mean)}f} ± {statistics.stdev(values):.{significant(mean)}f}"


def method_label(method: str) -> str:
    return "Naive" if method == "naive" else method.upper()


def pdf_pages(pdf: Path) -> list[str]:
    """The text of each page, laid out as printed (pdftotext -layout), else as pdfium reads it."""
    if shutil.which("pdftotext"):
        text = subprocess.run(
            ["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True
        ).stdout
        return text.split("\f")[:-1]
    pdfium = pytest.importorskip("pypdfium2", reason="neither pdftotext (poppler-utils) nor pypdfium2 is installed")
    document = pdfium.PdfDocument(pdf)
    return [document[i].get_textpage().get_text_range() for i in range(len(document))]


def needs_layout_text() -> None:
    if not shutil.which("pdftotext"):
        pytest.skip("row-by-row checks need pdftotext's layout mode (apt-get install poppler-utils)")


def between(text: str, start: str, end: str) -> str:
    first = text.index(start)
    return text[first : text.index(end, first)]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A folder with runs/<paper-size run>, as `kit run --all` leaves it."""
    root = tmp_path_factory.mktemp("workspace")
    write_paper_size_run(root / "runs" / "20260302T080000Z-paper")
    return root


@pytest.fixture(scope="module")
def paper_run(workspace) -> Path:
    return workspace / "runs" / "20260302T080000Z-paper"


@pytest.fixture(scope="module")
def results(paper_run):
    return {result.case_id: result for result in RunDir(paper_run).results()}


@pytest.fixture(scope="module")
def readme_command(workspace, paper_run) -> subprocess.CompletedProcess:
    """The second half of the README's main command: `kit report --compare reference`."""
    return kit("report", "--compare", "reference", cwd=workspace)


@pytest.fixture(scope="module")
def pages(readme_command, paper_run) -> list[str]:
    assert readme_command.returncode == 0, readme_command.stdout + readme_command.stderr
    return pdf_pages(paper_run / "report.pdf")


@pytest.fixture(scope="module")
def text(pages) -> str:
    return "\n".join(pages)


# --- The run and the README's command -----------------------------------------------------------


def test_the_paper_size_run_has_every_case_of_the_paper_plan_and_every_outcome(paper_run, results):
    plan = build_plan(load_protocol(), "paper")
    assert list(results) == [case.id for case in plan.cases]
    statuses = Counter(result.status for result in results.values())
    assert statuses["ok"] > 90 and statuses["oom"] > 10 and statuses["error"] >= 2 and statuses["unavailable"] >= 1
    assert any((result.reason or "").startswith("host out of memory") for result in results.values())  # oom, not error
    assert {result.stage for result in results.values()} == {
        "pretrain",
        "maxbatch",
        "finetune",
        "scaling",
        "profile",
        "serve",
        "comm",
    }
    assert verify(paper_run) == []


def test_the_readme_command_writes_both_files_into_the_newest_run(readme_command, paper_run):
    assert readme_command.returncode == 0, readme_command.stdout + readme_command.stderr
    assert (paper_run / "report.html").stat().st_size > 0 and (paper_run / "report.pdf").stat().st_size > 0
    assert verify(paper_run) == []  # the report beside the evidence leaves it intact


# --- The PDF's text -----------------------------------------------------------------------------


def test_every_pretraining_row_prints_the_result_files_numbers_in_model_order(pages, results, paper_run):
    needs_layout_text()
    table = between("\n".join(pages), "Pre-training: 8 GPUs", "Mean ± sample standard deviation")
    plan = RunDir(paper_run).read_info().plan
    cases = [case for case in plan.cases if case.stage == "pretrain"]
    models = list(dict.fromkeys(case.model for case in cases))
    for method in dict.fromkeys(case.method for case in cases):
        expected = [method_label(method)]
        for model in models:
            result = results[f"pretrain.{model}.{method}.g8"]
            if result.status == "ok":
                expected += [
                    mean_std_text(result.metrics["tokens_per_s"].per_run, 1e-3),
                    mean_std_text(result.metrics["peak_memory_gib"].per_run),
                ]
            else:
                expected += ["-", "-"] if result.status == "oom" else [result.status]
        rows = [line for line in table.splitlines() if line.split()[:1] == [method_label(method)]]
        assert [re.split(r"\s{2,}", row.strip()) for row in rows] == [expected], method


def test_a_printed_throughput_traces_back_to_the_rank_samples(text, paper_run):
    """tokens/s of a run = tokens of all ranks per step / mean step time, a step lasting as long
    as its slowest rank; the table prints mean ± std of the runs in 10^3 tokens/s."""
    case = paper_run / "cases" / "pretrain.llama2-13b.z3.g8"
    per_run = []
    for run in sorted((case / "runs").iterdir()):
        ranks = [RankSample.model_validate_json(path.read_text()) for path in run.glob("rank-*.json")]
        assert len(ranks) == 8 and all(rank.device_name == "NVIDIA A800-SXM4-80GB" for rank in ranks)
        steps = [max(times) for times in zip(*(rank.step_s for rank in ranks))]
        per_run.append(sum(rank.tokens_per_step for rank in ranks) / statistics.fmean(steps))
    assert len(per_run) == 3
    assert mean_std_text(per_run, 1e-3) in text


def test_the_summary_counts_the_outcomes_of_the_result_files(text, results):
    statuses = Counter(result.status for result in results.values())
    summary = flat(text)
    attempted = len(results) - statuses["skipped"]
    assert f"attempted {attempted} of the {len(results)} cases it selected" in summary
    assert (
        f"{statuses['ok']} measured, {statuses['oom']} OOM, {statuses['unavailable']} unavailable, "
        f"{statuses['skipped']} skipped, {statuses['error']} error"
    ) in summary


def kind(result) -> str:
    """Full-parameter, on a frozen 4-bit base, or an adapter: work of three kinds, ranked apart."""
    params = result.case.params
    return "adapter" if params.peft != "none" else "4-bit" if params.quantization != "none" else "full"


def test_page_one_holds_the_fastest_figure_of_each_kind_and_no_more(pages, results):
    """The fastest pre-training case of each model and kind, the fastest adapter fine-tuning, the
    highest engine of each model and the all-reduce bus bandwidth, all on the first page, which
    ends before the second begins (a figure past its bound: tests/report/test_reviewer_report.py)."""
    first = flat(pages[0])
    measured = [r for r in results.values() if r.status == "ok" and r.case.variant is None]
    for stage in ("pretrain", "finetune"):
        for group in {(r.case.model, kind(r)) for r in measured if r.stage == stage}:
            fastest = max(
                (r for r in measured if r.stage == stage and (r.case.model, kind(r)) == group),
                key=lambda r: r.metrics["tokens_per_s"].mean,
            )
            assert f"{mean_std_text(fastest.metrics['tokens_per_s'].per_run)} tokens/s" in first, fastest.case_id
    served = [r for r in measured if r.stage == "serve"]
    for model in {r.case.model for r in served}:
        highest = max((r for r in served if r.case.model == model), key=lambda r: r.metrics["output_throughput"].mean)
        mean = highest.metrics["output_throughput"].mean
        assert f"{mean:.{significant(mean)}f} tokens/s" in first, highest.case_id
    assert first.count("1 run; TTFT") == len({r.case.model for r in served})  # said beside its TTFT
    busbw = results["comm.all_reduce.g8"].metrics["bus_bandwidth_gb_s"].mean
    assert f"{busbw:.{significant(busbw)}f} GB/s" in first
    assert "Methods: Naive: DeepSpeed data parallel, no ZeRO;" in first  # the legend, last on the page
    assert flat(pages[1]).removeprefix(SYNTHETIC_BANNER + " ").startswith("This report")  # after the banner


def test_every_case_without_a_measurement_is_listed_with_its_status_and_reason(text, results):
    needs_layout_text()
    failures = between(text, "Cases that ended without a measurement", "Each was recorded as it happened")
    ended = {cid: result for cid, result in results.items() if result.status != "ok"}
    assert {"oom", "error", "unavailable"} <= {result.status for result in ended.values()}
    grouped: dict[tuple[str, str], list[str]] = {}
    for cid, result in ended.items():
        if result.status in ("skipped", "unavailable"):  # one row per reason, the cases counted
            grouped.setdefault((result.status, result.reason.split(": ", 1)[1]), []).append(cid)
            continue
        first_words = re.escape(" ".join(result.reason.split()[:3]))
        assert re.search(rf"^\s*{re.escape(cid)}\s+{result.status}\s+{first_words}", failures, re.M), cid
    assert grouped
    for (status, reason), ids in grouped.items():
        first_words = re.escape(" ".join(reason.split()[:3]))
        named = f"{len(ids)} cases" if len(ids) > 1 else ids[0]
        assert re.search(rf"^\s*{re.escape(named)}\s+{status}\s+{first_words}", failures, re.M), ids
    host_oom = next(result for result in ended.values() if "OOM killer" in result.reason)
    assert host_oom.status == "oom" and host_oom.reason.startswith("host out of memory")  # listed as such above


def test_a_table_longer_than_a_page_repeats_its_header_on_every_page(pages):
    needs_layout_text()
    # The paper-size run's cases that ended without a measurement, from the page of its caption
    # to the page of the section's next table.
    start = next(i for i, page in enumerate(pages) if "Cases that ended without a measurement" in page)
    end = next(
        i
        for i in range(start + 1, len(pages))
        if "Claims the run deviates from" in pages[i] or "Notes the results carry" in pages[i]
    )
    holding = pages[start : end + 1]
    assert len(holding) >= 2, "the paper-size run's failed cases are expected to span pages"
    for page in holding:
        assert re.search(r"^\s*Case\s+Status\s+Reason\s*$", page, re.M), page[:500]


def test_the_pdf_printed_in_parts_reads_as_one_document(pages, paper_run):
    """The PDF is printed in parts on separate cores and bound (kit/report/binding.py): every
    footer numbers its page out of the whole, the contents give the page each section's heading
    is printed on, and the links and bookmarks to sections of the other part land there too."""
    needs_layout_text()
    from pypdf import PdfReader

    total = len(pages)
    for number, page in enumerate(pages, start=1):  # at the foot, beside a footer that may wrap
        assert f"page {number} of {total}" in page[-400:], f"page {number}: {page[-200:]}"
    contents = between(pages[1], "Contents", "kit report")
    entries = re.findall(r"^\s*\d+\. (.+?)\s{2,}(\d+)\s*$", contents, re.M)
    assert len(entries) >= 12 and "Reference claims (arXiv:2311.03687)" in dict(entries), contents
    headed = {}
    for title, number in entries:
        printed = int(number)
        assert 2 < printed <= total and re.search(rf"^\s*{re.escape(title)}\s*$", pages[printed - 1], re.M), (
            f"the contents put {title!r} on page {printed}, which does not start it"
        )
        headed[title] = printed - 1
    reader = PdfReader(paper_run / "report.pdf")
    destinations = {name: reader.get_destination_page_number(dest) for name, dest in reader.named_destinations.items()}
    links = [annotation.get_object()["/Dest"] for annotation in reader.pages[1].get("/Annots", [])]
    assert {"claims", "deviations", "appendix", "pretrain"} <= set(links), links  # both parts, from the cover
    assert destinations["claims"] == headed["Reference claims (arXiv:2311.03687)"]
    assert destinations["pretrain"] == headed["Pre-training"]
    # a part that fills its last page exactly ends there: no page holds nothing but its margins
    bodies = [flat(page).removeprefix(SYNTHETIC_BANNER).split("kit report · run")[0].strip() for page in pages]
    assert not [number for number, body in enumerate(bodies, start=1) if not body]
    bookmarks = {
        item.title: reader.get_destination_page_number(item) for item in reader.outline if not isinstance(item, list)
    }
    assert {title: bookmarks.get(title) for title in headed} == headed


def test_a_listing_too_long_to_print_is_in_the_html_and_the_pdf_says_where(pages, paper_run):
    """The effective options of every pre-training case run to hundreds of rows: the HTML has
    them, the PDF one line with their count and where else to read them."""
    html = (paper_run / "report.html").read_text()
    text = flat("".join(pages))
    assert "Pre-training: each option in effect" in html
    assert re.search(
        r"Pre-training: each option in effect, as the running engine reported it, and peak memory "
        r"\(GiB\): \d+ rows, in the HTML report and in each case's result.json \(effective\)",
        text,
    )
    assert "Option: observed" not in text


def test_the_image_table_names_a_stage_run_wholly_in_one_image_by_its_count(paper_run, pages, results):
    html = (paper_run / "report.html").read_text()
    images = html[html.index('<section id="images"') :]
    assert f"every finetune case ({sum(1 for r in results.values() if r.stage == 'finetune')})" in images
    megatron = [cid for cid, r in results.items() if r.stage == "pretrain" and r.case.params.framework == "megatron"]
    pretrain = sum(1 for r in results.values() if r.stage == "pretrain")
    assert f"every pretrain case but {', '.join(megatron)} ({pretrain - len(megatron)} of {pretrain})" in images
    assert "serve.llama2-7b.vllm.g8, serve.llama2-13b.vllm.g8, serve.llama2-70b.vllm.g8" in images


# --- The pages as images ------------------------------------------------------------------------


def page_images(pdf: Path, folder: Path, dpi: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    if shutil.which("pdftoppm"):
        subprocess.run(["pdftoppm", "-r", str(dpi), "-png", str(pdf), str(folder / "page")], check=True)
    else:
        pdfium = pytest.importorskip("pypdfium2", reason="neither pdftoppm (poppler-utils) nor pypdfium2 is installed")
        document = pdfium.PdfDocument(pdf)
        for index in range(len(document)):
            document[index].render(scale=dpi / 72).to_pil().save(folder / f"page-{index + 1:03d}.png")
    return sorted(folder.glob("page-*.png"))


def test_no_page_prints_past_its_side_margins(paper_run, pages, tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    from PIL import ImageOps

    keep = os.environ.get("KIT_REPORT_PAGES")
    dpi = 40
    images = page_images(paper_run / "report.pdf", Path(keep) if keep else tmp_path / "pages", dpi)
    assert len(images) == len(pages) > 30
    margin_px = SIDE_MARGIN_MM / 25.4 * dpi
    for path in images:
        with image_module.open(path) as image:
            ink = ImageOps.invert(image.convert("L")).point(lambda level: 255 if level > 24 else 0).getbbox()
            width = image.width
        assert ink is not None, f"{path.name} is blank"
        left, _, right, _ = ink
        assert left >= margin_px - 2 and right <= width - margin_px + 2, (
            f"{path.name}: ink from {left} to {right} px of {width}"
        )


# --- The HTML in a browser ----------------------------------------------------------------------


def console_messages(html: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM Chromium built from the file, and every console message it logged (any level:
    the report has no script, so any message is a fault: a resource it failed to load, a parse error)."""
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            html.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_the_html_opens_in_chromium_without_console_messages(paper_run, results, readme_command, tmp_path):
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><p>control</p><script>console.error("seen"); missing();</script>')
    _, seen = console_messages(control, tmp_path / "profile-control")
    assert any('"seen"' in line for line in seen) and any("Uncaught" in line for line in seen), "the check sees nothing"

    dom, messages = console_messages(paper_run / "report.html", tmp_path / "profile")
    assert messages == []
    assert "LLM runtime benchmark report" in dom
    z3 = results["pretrain.llama2-13b.z3.g8"].metrics["tokens_per_s"].per_run
    assert mean_std_text(z3, 1e-3) in dom


# --- Evidence -----------------------------------------------------------------------------------


@pytest.fixture
def tampered(paper_run, tmp_path) -> tuple[Path, str]:
    """A copy of the run with one figure of one result.json changed after the run."""
    copy = Path(shutil.copytree(paper_run, tmp_path / "copy", ignore=shutil.ignore_patterns("report.*")))
    relative = "cases/pretrain.llama2-7b.z2.g8/result.json"
    result = json.loads((copy / relative).read_text())
    result["metrics"]["tokens_per_s"]["mean"] *= 1.1
    (copy / relative).write_text(json.dumps(result, indent=2) + "\n")
    return copy, relative


def test_report_refuses_a_tampered_result_and_names_it(tampered):
    copy, relative = tampered
    done = kit("report", str(copy), "--compare", "reference")
    assert done.returncode == 1
    assert f"changed: {relative}" in flat(done.stdout + done.stderr)
    assert not (copy / "report.html").exists() and not (copy / "report.pdf").exists()


def test_verify_fails_on_a_tampered_result_and_names_it(tampered):
    copy, relative = tampered
    done = kit("report", "--verify", str(copy))
    assert done.returncode == 1
    assert f"changed: {relative}" in flat(done.stdout + done.stderr)


# --- A/B ----------------------------------------------------------------------------------------


def cells_of_rows(html: str, anchor: str) -> list[list[str]]:
    """The cells of every row of a section's tables, each cell's own text (its detail line left out)."""
    start = html.index(f'<section id="{anchor}"')
    section = html[start : html.index("</section>", start)]
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", section, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        rows.append(
            [re.sub(r"<[^>]+>", "", re.sub(r'<span class="detail">.*?</span>', "", cell)).strip() for cell in cells]
        )
    return rows


def test_two_smoke_runs_compared_show_the_ratio_and_welchs_test_per_case(tmp_path):
    from scipy.stats import ttest_ind  # a test dependency

    plan = build_plan(load_protocol(), "smoke")
    training = [case.id for case in plan.cases if case.workload == "train"]
    a = write_run(tmp_path / "a", plan, cases=training, seed=1)
    b = write_run(tmp_path / "b", plan, cases=training, seed=2, speed=1.25)  # every step 1/1.25 of A's
    done = kit("report", str(a), "--compare", str(b), "--format", "html", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "out" / "report.html").read_text()
    assert "A/B: this run against b" in html
    rows = {(row[0], row[1]): row[2:] for row in cells_of_rows(html, "ab-b") if len(row) == 7}
    comparable = {  # stage -> yes/no; stages with one answer share a row
        stage: row[1] for row in cells_of_rows(html, "ab-b") if len(row) == 3 for stage in row[0].split(", ")
    }
    ra, rb = RunDir(a), RunDir(b)
    compared = 0
    for cid in training:
        left, right = ra.read_result(cid), rb.read_result(cid)
        if left.status != "ok":
            assert rows[(cid, "status")][4] == "no comparison"
            continue
        va, vb = left.metrics["tokens_per_s"].per_run, right.metrics["tokens_per_s"].per_run
        ratio = statistics.fmean(vb) / statistics.fmean(va)
        shown_a, shown_b, shown_ratio, shown_p, significant_text = rows[(cid, "tokens/s")]
        assert (shown_a, shown_b) == (mean_std_text(va), mean_std_text(vb))
        assert shown_ratio == f"{ratio:.{significant(ratio)}f} ×" and 1.2 < ratio < 1.3
        if len(va) == 1:  # the max-batch search: one search, no spread to test
            assert (shown_p, significant_text) == ("—", "not testable")
        else:
            p_value = ttest_ind(vb, va, equal_var=False).pvalue
            # a difference between environments that differ is no finding about the runs (not comparable)
            verdict = "yes" if p_value < 0.05 else "no"
            assert (shown_p, significant_text) == (
                f"{p_value:.3g}",
                verdict if comparable[left.stage] == "yes" else "not comparable",
            )
        compared += 1
    assert compared >= 10


@pytest.mark.e2e
def test_two_real_smoke_runs_compared_through_the_cli_show_the_ratio_and_welchs_test(real_smoke_run, tmp_path):
    """The same A/B table from two runs `kit run` made on this machine, not written by a test (the
    session's `kit run --all` and one more run of a case): whatever they measured, the table
    gives their result.json figures, ratio and p-value."""
    from scipy.stats import ttest_ind  # a test dependency

    case = "pretrain.tiny-llama.naive.g2"  # the smoke profile's quickest training case
    a, b = real_smoke_run, tmp_path / "b"
    done = kit("run", "--profile", "smoke", "--case", case, "--no-preflight", "--out", str(b))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    done = kit("report", str(a), "--compare", str(b), "--format", "html", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "out" / "report.html").read_text()
    assert "A/B: this run against b" in html
    rows = {(row[0], row[1]): row[2:] for row in cells_of_rows(html, "ab-b") if len(row) == 7}
    comparable = {  # stage -> yes/no; stages with one answer share a row
        stage: row[1] for row in cells_of_rows(html, "ab-b") if len(row) == 3 for stage in row[0].split(", ")
    }
    va = RunDir(a).read_result(case).metrics["tokens_per_s"].per_run
    vb = RunDir(b).read_result(case).metrics["tokens_per_s"].per_run
    assert len(va) == len(vb) == 3
    ratio = statistics.fmean(vb) / statistics.fmean(va)
    p_value = ttest_ind(vb, va, equal_var=False).pvalue
    assert rows[(case, "tokens/s")] == [
        mean_std_text(va),
        mean_std_text(vb),
        f"{ratio:.{significant(ratio)}f} ×",
        f"{p_value:.3g}",
        ("yes" if p_value < 0.05 else "no") if comparable["pretrain"] == "yes" else "not comparable",
    ]


# --- Pictures -----------------------------------------------------------------------------------

PICTURES = {  # chart title -> the section whose tables it comes before
    "Phases of a training step": "Module breakdown of a pre-training step",
    "Parts of a training step": "Module breakdown of a pre-training step",
    "FlashAttention's effect per part": "Module breakdown of a pre-training step",
    "Output throughput per engine": "Serving throughput and latency",
    "Latency distribution": "Serving throughput and latency",
}


def test_the_breakdown_and_serving_are_drawn_before_their_tables(paper_run, pages, tmp_path):
    """Each picture is on a page of the PDF, ahead of its section's first table, and drawn: the
    page rendered as an image holds the chart palette's first colour (kit/report/charts.py)."""
    image_module = pytest.importorskip("PIL.Image")
    from kit.report.charts import PALETTE

    ink = tuple(int(PALETTE[0][i : i + 2], 16) for i in (1, 3, 5))
    for title, section in PICTURES.items():
        at = next((index for index, page in enumerate(pages) if title in flat(page)), None)
        assert at is not None, f"no page shows {title!r}"
        table = next(index for index, page in enumerate(pages) if f"{section}: " in flat(page))
        assert at <= table, f"{title!r} on page {at + 1}, after its section's table on page {table + 1}"
        folder = tmp_path / f"page-{at + 1}"
        folder.mkdir(exist_ok=True)  # two pictures can share a page
        subprocess.run(
            [
                "pdftoppm",
                "-r",
                "50",
                "-f",
                str(at + 1),
                "-l",
                str(at + 1),
                "-png",
                str(paper_run / "report.pdf"),
                str(folder / "page"),
            ],
            check=True,
        )
        with image_module.open(next(folder.glob("*.png"))) as image:
            colours = {colour for _, colour in image.convert("RGB").getcolors(maxcolors=1 << 20)}
        assert any(sum(abs(a - b) for a, b in zip(colour, ink)) < 12 for colour in colours), f"{title!r} is not drawn"


def test_the_latency_distribution_is_every_finished_request_of_requests_jsonl(paper_run):
    from kit.report.load import load_run
    from kit.report.sections.serve import request_rows

    run = load_run(paper_run, False)
    case_id = next(cid for cid, result in run.results.items() if result.stage == "serve" and result.status == "ok")
    lines = [
        line
        for path in sorted((paper_run / "cases" / case_id / "runs").glob("*/requests.jsonl"))
        for line in path.read_text().splitlines()
    ]
    rows = request_rows(run, case_id)
    assert len(rows) == len(lines) > 0
    assert sorted(row.ttft for row in rows if row.ok) == sorted(
        json.loads(line)["ttft"]
        for line in lines
        if json.loads(line)["error"] is None and json.loads(line)["latency"] is not None
    )
