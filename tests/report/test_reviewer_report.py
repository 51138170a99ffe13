"""The report as a reviewer who must decide reads it, read back from the PDF on three kinds of run:
the recorded one-H100 run (tests/fixtures/h100x1-run: 223 of its cases need 8 GPUs), the paper-size
8 x A800 run of tests/support/paper_size_run.py (synthetic numbers, one of them past its physical bound, a
host check that fails) and this machine's real smoke run (conftest's real_smoke_run).

Page one answers (a verdict in three lines, what the report cannot tell, host checks and provenance
as pass, warn or fail); cases are counted as attempted, measured, OOM, unavailable and skipped; a
figure past its bound is invalid everywhere; methods are ranked like with like, ties said; one
measured quantity is judged once; energy and cost are in the PDF in one unit and a currency; no
text is under 7 pt, case ids wrap only at their dots, a table of skipped cases is one line; charts
mark failures, give each model its own scale and say how many runs a bar holds; a capped max-batch
search reads as a lower bound, skipped cases take no time, an archive install has no commit. Each
expected figure is computed here from the run's result.json files, not copied from the report.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from support import FIXTURES
from support.paper_size_run import write_paper_size_run, write_run

from kit.host.fingerprint import Fingerprint
from kit.plan.protocol import build_plan, load_protocol
from kit.report.render import render
from kit.rundir.directory import RunDir

H100_FIXTURE = FIXTURES / "h100x1-run" / "run.tgz"
PRICE, CURRENCY = 2.5, "EUR"  # the paper-size run is priced, in euros; the others are not
PAST_BOUND = "serve.llama2-70b.vllm.g8"  # the paper-size run's case made to run past its roofline
SMALLEST_POINTS = 7.0


class Printed:
    """A rendered report: its run's results, the PDF's pages as laid out text, and report.json."""

    def __init__(self, run: Path, out: Path, **priced):
        render(run, ["reference"], ["pdf", "json"], out, **priced)
        self.run, self.pdf = run, out / "report.pdf"
        self.results = {result.case_id: result for result in RunDir(run).results()}
        self.info = RunDir(run).read_info()
        layout = subprocess.run(
            ["pdftotext", "-layout", str(self.pdf), "-"], capture_output=True, text=True, check=True
        )
        self.pages = layout.stdout.split("\f")[:-1]
        self.document = json.loads((out / "report.json").read_text())

    @property
    def text(self) -> str:
        return flat("\n".join(self.pages))

    @property
    def first(self) -> str:
        return flat(self.pages[0])

    def section(self, start: str, end: str) -> str:
        """The flat text from `start` to `end`, after page one and the cover's contents."""
        text = flat("\n".join(self.pages[2:]))
        begin = text.index(start)
        return text[begin : text.index(end, begin + len(start))]

    def on_page_one(self, start: str, end: str) -> str:
        begin = self.first.index(start)
        return self.first[begin : self.first.index(end, begin + len(start))]


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module", autouse=True)
def poppler():
    if not shutil.which("pdftotext"):
        pytest.skip("reads the PDF with pdftotext (poppler-utils)")


@pytest.fixture(scope="module")
def h100(tmp_path_factory) -> Printed:
    folder = tmp_path_factory.mktemp("h100")
    with tarfile.open(H100_FIXTURE) as archive:
        archive.extractall(folder, filter="data")
    return Printed(folder / "runh100", tmp_path_factory.mktemp("h100-report"))


@pytest.fixture(scope="module")
def paper(tmp_path_factory) -> Printed:
    run = write_paper_size_run(tmp_path_factory.mktemp("paper") / "a800", past_bound=(PAST_BOUND,))
    return Printed(run, tmp_path_factory.mktemp("paper-report"), gpu_hour_price=PRICE, currency=CURRENCY)


@pytest.fixture(scope="module")
def smoke(real_smoke_run, tmp_path_factory) -> Printed:
    return Printed(real_smoke_run, tmp_path_factory.mktemp("smoke-report"))


@pytest.fixture(scope="module", params=["h100", "paper", "smoke"])
def printed(request) -> Printed:
    return request.getfixturevalue(request.param)


def statuses(printed: Printed) -> Counter:
    return Counter(printed.results[cid].status for cid in printed.info.selected)


def primary(printed: Printed, stage: str) -> list:
    return [r for r in printed.results.values() if r.stage == stage and r.case.variant is None]


def kind(result) -> str:
    params = result.case.params
    return "adapter" if params.peft != "none" else "4-bit base" if params.quantization != "none" else "full-parameter"


def numbers_of(metric) -> str:
    """mean ± std as the report prints it: three significant digits, the std to as many decimals."""
    from kit.report.cells import mean_std

    return mean_std(metric)


# --- 1. Page one answers ------------------------------------------------------------------------


def test_page_one_opens_with_a_verdict_of_three_lines_and_what_the_report_cannot_tell(printed):
    first = printed.first
    order = [
        first.index(words)
        for words in ("This host", "Against", "Limited by", "What this report cannot tell you:", "Headline figures")
    ]
    assert order == sorted(order)
    assert "This report" not in first and flat(printed.pages[1]).index("This report") < 300  # page one is one page


def test_a_one_gpu_run_says_its_gpu_count_limits_it_and_what_to_run(h100):
    counted = statuses(h100)
    short = [r for r in h100.results.values() if r.status == "skipped" and r.case.gpus > 1]
    assert f"Limited by Its 1 GPU: {len(short)} of {len(h100.info.selected)} cases need more (2, 8)." in h100.first
    cannot = h100.on_page_one("What this report cannot tell you:", "Run runh100")
    assert (
        "Pre-training, the largest micro-batch each method holds, fine-tuning, serving throughput and latency "
        "(skipped: needs 8 GPUs, host has 1; this kit's `kit run --all --profile paper` fits the plan to the "
        "host's 1 GPU)"
    ) in cannot
    assert "communication bandwidth" in cannot and "they need a host of 2 GPUs" in cannot
    flash = h100.results["profile.llama2-7b.f.g1"]
    assert (
        f"1 of 3 cases of module breakdown of a pre-training step (unavailable: {flash.reason.removeprefix('rank 0: ')})"
        in cannot
    )
    assert counted["ok"] == 3


def test_the_paper_size_run_names_its_failing_host_check_and_what_it_holds_back(paper):
    first = paper.first
    check = next(c for c in paper.info.checks if c.name == "driver_supports_images")
    assert (
        check.status == "fail" and f"Limited by The host check driver_supports_images fails: {check.observed}." in first
    )
    assert "Host checks fail: driver_supports_images;" in first
    cannot = paper.on_page_one("What this report cannot tell you:", "Run a800")
    assert (
        "3 of 9 cases of serving throughput and latency (unavailable: image ghcr.io/modeltc/lightllm:v1.0.1" in cannot
    )
    failed = [r.case_id for r in paper.results.values() if r.status == "error"]
    assert f"the {len(failed)} cases that failed or did not finish" in cannot
    assert f"the figures marked invalid ({PAST_BOUND}: past their physical bounds)" in cannot


def test_a_cpu_run_says_a_cpu_limits_it_and_nothing_about_a_gpu_can_be_told(smoke):
    assert "Limited by A CPU: the smoke profile runs the kit's code paths on CPU processes" in smoke.first
    assert "What this report cannot tell you: Anything about a GPU (a CPU run;" in smoke.first
    assert "Host checks not checked:" in smoke.first  # no GPU check applies to a CPU host


def test_provenance_is_a_line_of_pass_warn_or_fail(h100, paper, smoke):
    assert (
        "Provenance warn: kit 0.1.0, commit not recorded (installed from an archive, no .git in /tmp/kitsrc)"
        in h100.first
    )
    assert (
        "Provenance warn: kit 0.1.0, commit not recorded (installed from an archive, no .git in /opt/kit)"
        in paper.first
    )
    kit = smoke.info.kit  # a checkout: pass where it was clean, warn where it had changes
    verdict, checkout = (
        ("warn", "with uncommitted changes (dirty checkout)") if kit.dirty else ("pass", "clean checkout")
    )
    assert (
        f"Provenance {verdict}: kit 0.1.0, commit {kit.git_commit}, {checkout}; source SHA-256 {kit.source_sha256[:12]}…"
        in smoke.first
    )
    # the environment section says the same of the kit, never a commit of zeros
    assert "Kit 0.1.0, commit not recorded (installed from an archive, no .git in /tmp/kitsrc)" in h100.text
    assert "0000000000" not in paper.text


# --- 2. Honest counts and summaries -------------------------------------------------------------


def test_cases_are_counted_as_attempted_measured_oom_unavailable_and_skipped(printed):
    counted = statuses(printed)
    attempted = len(printed.info.selected) - counted["skipped"]
    badges = (
        f"{attempted} attempted {counted['ok']} measured {counted['oom']} OOM {counted['unavailable']} unavailable "
        f"{counted['skipped']} skipped"
    )
    assert badges in printed.first
    summary = printed.section("Executive summary", "Environment and fingerprint checks")
    assert f"attempted {attempted} of the {len(printed.info.selected)} cases it selected" in summary
    assert (
        f"{counted['ok']} measured, {counted['oom']} OOM, {counted['unavailable']} unavailable, {counted['skipped']} skipped"
        in summary
    )


def test_summary_figures_are_of_cases_as_the_protocol_writes_them_each_with_model_and_method(paper):
    summary = paper.section("Executive summary", "Environment and fingerprint checks")
    full = [r for r in primary(paper, "pretrain") if r.status == "ok" and kind(r) == "full-parameter"]
    fast = max(full, key=lambda r: r.metrics["tokens_per_s"].mean)
    light = min(full, key=lambda r: r.metrics["peak_memory_gib"].mean)
    assert (
        f"Pre-training, full-parameter: the highest throughput is {fast.case.method.upper()} on {fast.case.model}"
        in summary
    )
    assert (
        f"the lowest peak memory {light.case.method.upper()} on {light.case.model}, "
        f"{numbers_of(light.metrics['peak_memory_gib'])} GiB"
    ) in summary
    variants = [r for r in paper.results.values() if r.stage == "pretrain" and r.case.variant and r.status == "ok"]
    lighter = min(variants, key=lambda r: r.metrics["peak_memory_gib"].mean)
    assert lighter.metrics["peak_memory_gib"].mean < light.metrics["peak_memory_gib"].mean  # a p2p-off variant's
    assert numbers_of(lighter.metrics["peak_memory_gib"]) not in summary


# --- 3. Invalid figures stay out ----------------------------------------------------------------


def test_a_figure_past_its_bound_is_invalid_everywhere_never_a_headline_nor_priced(paper):
    case = PAST_BOUND
    result = paper.results[case]
    ratio = result.metrics["output_throughput"].mean / result.metrics["output_throughput_bound"].mean
    assert ratio > 1
    value = f"{result.metrics['output_throughput'].mean:.0f} tokens/s"
    # beside the engine that served 70B within its bound, in a column of its own: word by word
    assert value not in paper.first and "vllm: invalid:" in paper.first and f"{ratio:.3g} ×" in paper.first
    cases = {entry["case"]: entry for entry in paper.document["cases"]}
    assert cases[case]["invalid"] and "cost_per_million_tokens" not in cases[case]["metrics"]
    assert "cost_per_million_tokens" in cases["serve.llama2-7b.vllm.g8"]["metrics"]
    deviations = paper.section("Figures marked invalid", "Claims the run deviates from")
    assert f"{case} output tokens/s {ratio:.3g} × the roofline bound" in deviations
    serving = paper.section("Serving throughput and latency: the burst of each engine", "Definitions are those")
    assert "invalid: output tokens/s" in serving
    assert f"{case} (invalid: output tokens/s" in paper.section("every measured metric", "Communication bandwidth")
    judged = [r["finding"] for claim in paper.document["claims"] for r in claim["relations"] if case in r["finding"]]
    assert judged and all(f"{case} (invalid:" in finding for finding in judged)  # no claim is judged on it


# --- 4. Like with like ---------------------------------------------------------------------------


def test_each_kind_of_method_is_ranked_apart_and_fastest_only_clear_of_the_next(paper, smoke):
    """Per model and kind, the fastest mean is "fastest" where its interval (mean ± std) clears the
    next one's, else "tied with" it; page one says which as often as the result files say so."""
    for printed in (paper, smoke):
        said = Counter()
        for stage in ("pretrain", "finetune"):
            done = [r for r in primary(printed, stage) if r.status == "ok"]
            for group in {(r.case.model, kind(r)) for r in done}:
                ranked = sorted(
                    (r for r in done if (r.case.model, kind(r)) == group),
                    key=lambda r: r.metrics["tokens_per_s"].mean,
                    reverse=True,
                )
                assert f"{numbers_of(ranked[0].metrics['tokens_per_s'])} tokens/s" in printed.first
                if len(ranked) == 1:
                    said[f"the only {group[1]}"] += 1
                    continue
                best, runner = (r.metrics["tokens_per_s"] for r in ranked[:2])
                said[f"fastest {group[1]}" if best.mean - best.std > runner.mean + runner.std else "tied with"] += 1
        page = printed.pages[0]
        assert {words: page.count(words) for words in said} == dict(said), printed.run


def test_page_one_has_a_legend_of_every_method_letter(printed):
    letters = {token for cid in printed.info.selected for token in printed.results[cid].case.method.split("+")}
    options = load_protocol().option_sets["training"]
    legend = printed.first[printed.first.index("Methods:") :]
    for token in letters & set(options):
        assert f"{'Naive' if token == 'naive' else token.upper()}: " in legend, token


# --- 5. One verdict per quantity -----------------------------------------------------------------


def test_the_scaling_efficiency_is_judged_once_and_the_claims_resting_on_it_point_there(paper):
    by_id = {claim["id"]: claim for claim in paper.document["claims"]}
    assert by_id["C1"]["verdict"] == "deviates" and by_id["C1"]["expectation"]["verdict"] == "paper verdict"
    for claim in ("C2", "C3"):
        expected = by_id[claim]["expectation"]
        assert (expected["verdict"], expected["relations"][0]["judged_in"]) == ("judged in another claim", "C1")
    claims = paper.section("The paper's published findings against this run", "Deviations, failures and waivers")
    # judged in C1, neither is judged here: each is a line of the list of claims this run does not judge
    unjudged = claims[claims.index("Claims this run does not judge") :]
    assert re.search(r"\bC2\b", unjudged) and re.search(r"\bC3\b", unjudged)
    deviating = (
        paper.section("Claims where this host's GPUs deviate", "Notes the results carry")
        if ("Claims where this host's GPUs deviate" in paper.text)
        else ""
    )
    assert "C2" not in deviating and "C3" not in deviating


# --- 6. Energy and cost in the PDF ---------------------------------------------------------------


def test_energy_and_cost_are_printed_in_one_unit_and_the_currency_given(paper, h100):
    energy = paper.section("Energy and cost", "Reference claims")
    assert "Energy per token: the most frugal case of each model and stage" in energy
    done = [r for r in primary(paper, "pretrain") if r.status == "ok" and r.case.model == "llama2-7b"]
    frugal = min(done, key=lambda r: r.metrics["joules_per_token"].mean)
    assert f"{numbers_of(frugal.metrics['tokens_per_s'])} {numbers_of(frugal.metrics['joules_per_token'])}" in energy
    assert frugal.case_id in energy
    assert (
        f"Priced at 2.5 {CURRENCY} per GPU-hour (--gpu-hour-price, --currency)." in energy and f"({CURRENCY}," in energy
    )
    assert paper.document["currency"] == CURRENCY and h100.document["currency"] == "USD"
    for printed in (paper, h100):
        assert "per 1k tokens" not in printed.text and "J per 1k" not in printed.text
        assert "(J/token)" in printed.first  # the headline table's energy column


# --- 7. Layout that reads --------------------------------------------------------------------------


def test_no_text_is_printed_under_7_points(printed):
    pdfium = pytest.importorskip("pypdfium2")
    raw = pytest.importorskip("pypdfium2.raw")
    document = pdfium.PdfDocument(printed.pdf)
    small = Counter()
    for index in range(len(document)):
        page = document[index].get_textpage()
        for char in range(page.count_chars()):
            size = raw.FPDFText_GetFontSize(page.raw, char)
            if size < SMALLEST_POINTS - 0.05 and not chr(raw.FPDFText_GetUnicode(page.raw, char)).isspace():
                small[(index + 1, round(size, 1))] += 1
    assert not small, f"(page, points): characters: {dict(small)}"


def test_case_ids_wrap_only_at_their_dots(printed):
    """A piece of a case id at the end of a printed cell ends with a dot: never "serve.llama2-70" / "b.tgi.g8"."""
    names = set(printed.results) | {f"cases/{cid}/" for cid in printed.results}
    broken = set()
    for page in printed.pages:
        for line in page.splitlines():
            for cell in re.split(r"\s{2,}", line.strip()):
                piece = cell.split()[-1] if cell.split() else ""
                if (
                    "." in piece
                    and not piece.endswith(".")
                    and piece not in names
                    and any(name.startswith(piece) for name in names)
                ):
                    broken.add(piece)
    assert not broken


def test_a_table_of_nothing_but_skipped_cases_is_one_line_saying_why(h100):
    variants = [r for r in h100.results.values() if r.case.variant]
    skipped = Counter(r.reason for r in variants if r.status == "skipped")
    line = h100.section("p2p-off: each case without and with the variant:", "Peer-to-peer off")
    assert (
        f"none of its {len(variants)} cases measured (skipped: {skipped.most_common(1)[0][0]} ({skipped.most_common(1)[0][1]} cases)"
        in line
    )
    assert "Twin p2p-off p2p-off / twin" not in h100.text
    assert (
        "Table II: Megatron-LM's engine and DeepSpeed's naive configuration, same model, sequence and dtype: none of its"
        in h100.text
    )


def test_a_row_of_badges_is_printed_on_one_line(printed):
    counted = ("attempted", "measured", "OOM", "unavailable", "skipped")
    lines = [line for line in printed.pages[0].splitlines() if "attempted" in line]
    assert len(lines) == 1 and all(f" {label}" in lines[0] for label in counted), lines


# --- 8. Charts that show failures and scale ------------------------------------------------------


def test_training_charts_give_each_model_a_panel_mark_each_failure_and_say_how_many_runs(paper):
    chart = paper.section("Pre-training throughput by method", "One panel per model")
    assert all(model in chart for model in ("llama2-7b", "llama2-13b", "llama2-70b"))
    oom = sum(r.status == "oom" for r in primary(paper, "pretrain"))
    # the host out-of-memory kill is an OOM (kit.execute.samples.killed_for_host_memory), no error
    assert chart.split().count("OOM") == oom and chart.split().count("error") == 0
    caption = paper.section("One panel per model, each on its own scale; a mark", "Pre-training: peak memory")
    assert "Each bar is the mean of 3 runs, its error bar one standard deviation." in caption
    memory = paper.section("Pre-training: peak memory against the GPU's capacity", "The allocator's peak per GPU")
    fingerprint = Fingerprint.model_validate_json(RunDir(paper.run).fingerprint_path.read_text())
    capacity = min(gpu.memory_bytes for gpu in fingerprint.gpus.gpus) / 2**30
    assert f"GPU memory {capacity:.1f} GiB (NVML)" in memory
    serving = paper.section("Output tokens/s over each burst, one panel per model", "Latency distribution")
    assert "Each bar is one run: no spread to show." in serving


def test_close_figures_on_a_log_axis_draw_as_bars_of_close_length(h100):
    """A bar's length on a log axis is its value over the axis's start: the recorded H100's
    energy figures (0.098, 0.106 and 0.210 J/token) must not read as 1 to 25, as they did on an
    axis started just below the smallest."""
    from kit.report.charts import log_axis_limits

    values = sorted(
        r.metrics["joules_per_token"].mean for r in h100.results.values() if "joules_per_token" in r.metrics
    )
    start, end = log_axis_limits(values[0], values[-1])
    lengths = [math.log10(value / start) for value in values]
    assert len(values) == 3 and max(lengths) / min(lengths) < 1.5 and end > values[-1]


def test_a_single_gpu_count_is_no_curve(h100):
    scaling = h100.section("Data-parallel scaling", "Module breakdown of a pre-training step")
    assert "Scaling 1 → N" not in scaling
    assert "One GPU count measured in each series: no curve to draw" in scaling


# --- 9. Max-batch cap, durations, provenance -----------------------------------------------------


def test_a_max_batch_search_at_its_cap_reads_as_a_lower_bound(tmp_path):
    """The quick profile's search (3 trials) on one 80 GB GPU, as the GPU check runs it: it stops
    before a micro-batch one above the largest that ran has run out of memory."""
    plan = build_plan(load_protocol(), "quick", host_gpus=1, gpu_memory_bytes=80 * 10**9)
    run = write_run(tmp_path / "quick", plan, cases=["maxbatch.llama2-7b.q.g1"])
    [result] = RunDir(run).results()
    trials = [(sample.micro_batch, sample.status) for sample in result.samples]
    ran = max(batch for batch, status in trials if status == "ok")
    assert result.status == "ok" and len(trials) == 3 and (ran + 1, "oom") not in trials
    printed = Printed(run, tmp_path / "report")
    table = printed.section("Table IV: the largest micro-batch per method", "Each trial is a fresh launch")
    assert re.search(rf"≥ {ran}\b", table) and "search cap:" in table and "(max_trials);" in table  # the cell wraps
    assert "error" not in table


def test_the_duration_table_leaves_skipped_cases_out(h100):
    durations = h100.section("Duration by stage", "Actual: from a case's start")
    pretrain = sum(1 for r in h100.results.values() if r.stage == "pretrain" and r.status == "skipped")
    assert f"pretrain 0 ({pretrain} skipped) not estimated 0s -" in durations
    assert "0.00" not in durations


def test_an_ab_report_says_each_reason_its_environments_differ_once(h100, paper):
    """The real H100 run against the paper-size run: six stages not comparable for one set of reasons
    (another GPU, count, driver...) say them in one row, then what each stage adds."""
    from kit.report.build import build_report

    report = build_report(h100.run, [str(paper.run)])
    (section,) = [section for section in report.sections if section.anchor.startswith("ab-")]
    table = next(table for table in section.tables if table.caption.startswith("May the two runs' numbers be compared"))
    whys = [row.cells[2].text for row in table.rows]
    first = whys[0]
    assert table.rows[0].cells[0].text == "pretrain, maxbatch, finetune, scaling, profile, serve"
    assert first.startswith("GPU model differs: NVIDIA H100 80GB HBM3 vs NVIDIA A800-SXM4-80GB; GPU count differs")
    assert all(why.startswith("and: ") for why in whys[1:])
    reasons = [reason for why in whys for reason in why.removeprefix("and: ").split("; ")]
    assert reasons.count("GPU count differs: 1 vs 8") == 1
