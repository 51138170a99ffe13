"""Page one of the report (kit/report/page_one.py): the host, the verdict counts and the headline
figures with their standing among their kind, beside the physical bound the kit sets for this host,
the paper's value, energy and cost.

The runs are tests/support/paper_size_run.py's: cases of the real `paper` plan on 8 x A800 (synthetic
numbers, every metric from kit.measure.metrics with its real name) and the smoke plan on CPU. The
rendered PDF's first page is read back with pdftotext and held against each case's result.json.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.calibration import h100_calibration
from support.paper_size_run import A800, write_run

from kit.measure.energy import cost_per_million_tokens
from kit.plan.predictions import (
    device_spec,
    training_step_bound,
    training_throughput_bound,
)
from kit.plan.protocol import build_plan, load_protocol
from kit.reference.published import load_reference
from kit.report.build import SYNTHETIC_BANNER, build_report
from kit.report.load import load_run
from kit.report.page_one import MFU_AGAINST_BOUND, paper_cell
from kit.report.printer import write_pdf
from kit.report.render import print_parts, render_html
from kit.report.sections.energy import energy_cell
from kit.rundir.schema import Metric
from kit.theory.hardware import load_hardware

CASES = [
    "pretrain.llama2-7b.naive.g8",  # out of memory in the synthetic run
    "pretrain.llama2-7b.z2+f.g8",
    "pretrain.llama2-7b.q.g8",
    "finetune.llama2-7b.l+f.g8",
    "finetune.llama2-70b.ql+z3+o+r+f.g8",  # the case of claim C21's published value
    "serve.llama2-7b.vllm.g8",
    "serve.llama2-7b.lightllm.g8",  # its engine's image is absent: unavailable
    "comm.all_reduce.g8",
]
PRICE = 2.5


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory) -> Path:
    plan = build_plan(load_protocol(), "paper")
    return write_run(tmp_path_factory.mktemp("runs") / "a800-run", plan, cases=CASES)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    """The smoke plan's training on CPU (the generator writes GPU collectives and engines only)."""
    plan = build_plan(load_protocol(), "smoke")
    cases = [case.id for case in plan.cases if case.workload == "train"]
    return write_run(tmp_path_factory.mktemp("runs") / "smoke-run", plan, cases=cases)


@pytest.fixture(scope="module")
def report(gpu_run):
    return build_report(gpu_run, ["reference"], gpu_hour_price=PRICE)


A800_MATMUL_TFLOPS, A800_COPY_GB_S = (
    250.0,
    1700.0,
)  # what the preflight measured: inputs of the run, like its own figures
THROTTLED = "pretrain.llama2-7b.z2+f.g8"


@pytest.fixture(scope="module")
def calibrated_run(gpu_run, tmp_path_factory) -> Path:
    """The A800 run as if its preflight had measured its GPUs below their datasheet, at a power
    limit and clocks its fingerprint records, and as if one case's first rank had sampled its
    power cap (pynvml's bit) in its last two samples."""
    import pynvml

    from kit.host.fingerprint import Fingerprint, GpuClocks
    from kit.measure.telemetry import summarize
    from kit.rundir.directory import RunDir, atomic_write_model
    from kit.rundir.schema import Result

    run = tmp_path_factory.mktemp("runs") / "a800-calibrated"
    shutil.copytree(gpu_run, run)
    fingerprint = Fingerprint.model_validate_json((run / "fingerprint.json").read_text())
    calibration = h100_calibration(A800_MATMUL_TFLOPS, A800_COPY_GB_S).model_copy(update={"device_names": [A800] * 8})
    transfer = calibration.memory_copy.model_copy(
        update={"value": 24.0}
    )  # an 8-GPU host's every figure: the longest fact
    calibration = calibration.model_copy(
        update={
            "host_to_device": transfer,
            "device_to_host": transfer,
            "all_reduce_busbw": transfer.model_copy(update={"value": 180.0}),
        }
    )
    clocks = GpuClocks(
        applications_graphics_mhz=1410, applications_memory_mhz=1593, max_graphics_mhz=1410, max_memory_mhz=1593
    )
    gpus = [gpu.model_copy(update={"power_limit_w": 400.0, "clocks": clocks}) for gpu in fingerprint.gpus.gpus]
    atomic_write_model(
        run / "fingerprint.json",
        fingerprint.model_copy(
            update={"calibration": calibration, "gpus": fingerprint.gpus.model_copy(update={"gpus": gpus})}
        ),
    )
    result = Result.model_validate_json((run / "cases" / THROTTLED / "result.json").read_text())
    rank = result.samples[0].ranks[0]
    masks = [0, 0, pynvml.nvmlClocksEventReasonSwPowerCap, pynvml.nvmlClocksEventReasonSwPowerCap]
    slowed = summarize(
        0, 10.0, [2**30] * 4, [400_000] * 4, 0, 4_000_000, [1410, 1410, 1230, 1200], [70, 74, 79, 80], masks
    )
    rank = rank.model_copy(
        update={
            "telemetry": rank.telemetry.model_copy(
                update=slowed.model_dump(
                    include={
                        "sm_clock_mhz_mean",
                        "sm_clock_mhz_min",
                        "temperature_c_mean",
                        "temperature_c_max",
                        "clock_event_samples",
                        "clock_event_reasons",
                    }
                )
            )
        }
    )
    result.samples[0].ranks[0] = rank
    atomic_write_model(run / "cases" / THROTTLED / "result.json", result)
    atomic_write_model(run / "cases" / THROTTLED / "runs" / "1" / "rank-0.json", rank)
    RunDir(run).write_sums()
    return run


@pytest.fixture(scope="module")
def calibrated(calibrated_run):
    return build_report(calibrated_run, ["reference"], gpu_hour_price=PRICE)


def result_json(run: Path, case_id: str) -> dict:
    return json.loads((run / "cases" / case_id / "result.json").read_text())


def rows_by_case(report) -> dict[str, list]:
    """The headline rows, keyed by the case folder named under each figure (before its workload)."""
    found = {}
    for row in report.page_one.headline.rows:
        folder = (row.cells[0].detail or "").split("; ")[0]
        if folder.startswith("cases/"):
            found[folder.removeprefix("cases/").rstrip("/")] = row.cells
    return found


def numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", text)]


def shown(value: float) -> str:
    """Three significant digits, as a reviewer reads them (no exponent at these sizes)."""
    decimals = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{decimals}f}"


def spread(metric: dict, scale: float = 1.0) -> str:
    mean = metric["mean"] * scale
    if metric["std"] is None:
        return shown(mean)
    return f"{shown(mean)} ± {metric['std'] * scale:.{max(0, 2 - math.floor(math.log10(abs(mean))))}f}"


# --- Which figures, and their values ------------------------------------------------------------


def test_the_headline_is_the_fastest_case_of_each_model_and_kind_with_its_spread_from_result_json(report, gpu_run):
    """Z2+F (full-parameter; Naive ran out of memory) and Q (on a frozen 4-bit base) do different
    work per token: each is the fastest of its own kind, in a row of its own."""
    rows = rows_by_case(report)
    for case_id, kind in (("pretrain.llama2-7b.z2+f.g8", "full-parameter"), ("pretrain.llama2-7b.q.g8", "4-bit base")):
        metrics = result_json(gpu_run, case_id)["metrics"]
        measured, standing = rows[case_id][1:3]
        assert measured.text == f"{spread(metrics['tokens_per_s'])} tokens/s"
        assert measured.detail.startswith(f"{shown(metrics['tokens_per_s']['mean'] / 8)} per GPU")
        assert standing.text == f"the only {kind} measured"
    assert (
        rows["pretrain.llama2-7b.z2+f.g8"][1].detail.split("; ")[1]
        == f"MFU {spread(result_json(gpu_run, 'pretrain.llama2-7b.z2+f.g8')['metrics']['mfu'], 100)} %"
    )
    assert "pretrain.llama2-7b.naive.g8" not in rows


def test_a_serving_row_has_output_throughput_and_median_and_p99_ttft(report, gpu_run):
    metrics = result_json(gpu_run, "serve.llama2-7b.vllm.g8")["metrics"]
    measured = rows_by_case(report)["serve.llama2-7b.vllm.g8"][1]
    assert measured.text.startswith(f"{spread(metrics['output_throughput'])} tokens/s")
    assert measured.detail.split("; ", 1)[1].startswith(  # the paper plan serves once: said once, beside its TTFT
        f"1 run; TTFT median {spread(metrics['ttft_median_s'])} s, p99 {spread(metrics['ttft_p99_s'])} s"
    )


def test_a_serving_row_names_the_capacity_of_its_sweep_and_prices_a_million_tokens_there(report, gpu_run):
    """The synthetic sweep of the 7B vLLM case meets MLPerf's Llama-2-70B server objectives (p99 TTFT
    2 s, TPOT 200 ms) up to some concurrency N: the most tokens/s there, its N, its cost at 2.50 a GPU-hour."""
    from kit.measure.slo import DEFAULT_SLO, capacity
    from kit.report.sections.capacity import sweep_points

    run = load_run(gpu_run, redact=False)
    best = capacity(sweep_points(run, run.results["serve.llama2-7b.vllm.g8"], DEFAULT_SLO))
    _, _, standing, *_, cost = rows_by_case(report)["serve.llama2-7b.vllm.g8"]
    said = standing.detail.removeprefix("capacity ")
    # the sweep's largest concurrency met the objectives: the capacity is at least that, said so
    assert best.concurrency == 1000 and said.startswith("≥ ")
    assert said.endswith(f" (N={best.concurrency}, the most tried)")  # in the tokens/s of the figure beside it
    assert numbers(said)[0] == pytest.approx(best.figures.output_throughput, rel=5e-3)
    assert numbers(cost.detail)[0] == pytest.approx(
        cost_per_million_tokens(best.figures.output_throughput, 8, PRICE), rel=5e-3
    )
    heading = next(
        row.cells[0].text for row in report.page_one.headline.rows if row.heading and row.cells[0].link == "#serve"
    )
    assert "its capacity, N requests in flight, within p99 TTFT ≤ 2000 ms, TPOT ≤ 200 ms" in heading


def test_a_sweep_whose_every_point_the_client_may_have_limited_has_no_capacity_and_says_why(gpu_run, tmp_path):
    """As the smoke runs' sweeps on a 2-core host did before the client kept a CPU of its own: the
    saturation check marked every point (the event loop lagged 19-876 ms), so none is judged."""
    from kit.measure.slo import DEFAULT_SLO
    from kit.report.sections.capacity import sweep_points
    from kit.rundir.directory import RunDir, atomic_write_model
    from kit.rundir.schema import Result

    run, case_id = tmp_path / "run", "serve.llama2-7b.vllm.g8"
    shutil.copytree(gpu_run, run)
    result = Result.model_validate_json((run / "cases" / case_id / "result.json").read_text())
    rank = result.samples[0].ranks[0]
    lag = ["client event loop lagged 876.5 ms (p99), more than 5 ms and 10 % of the median time per output token"]
    for point in rank.details.sweep.points:
        point.saturation = point.saturation.model_copy(update={"client_limited": True, "reasons": lag})
    atomic_write_model(run / "cases" / case_id / "result.json", result)
    atomic_write_model(run / "cases" / case_id / "runs" / "1" / "rank-0.json", rank)
    RunDir(run).write_sums()
    points = sweep_points(load_run(run, redact=False), result, DEFAULT_SLO)
    assert points and all(
        p.not_judged == f"the client may have limited it: run 1: {lag[0]}" and not p.counted for p in points
    )
    _, _, standing, *_ = rows_by_case(build_report(run, ["reference"], gpu_hour_price=PRICE))[case_id]
    assert standing.detail == "no sweep point judged: each was cut short or client-limited"


def test_an_engine_that_did_not_run_is_one_line_with_its_status_and_reason(report, gpu_run):
    result = result_json(gpu_run, "serve.llama2-7b.lightllm.g8")
    label, status = rows_by_case(report)["serve.*.lightllm.*"]
    assert label.text == "lightllm, llama2-7b"
    assert (status.text, status.detail) == ("unavailable", result["reason"].removeprefix("rank 0: ").split(";")[0])


# --- Expected on this host ----------------------------------------------------------------------


def test_the_all_reduce_is_held_against_the_a800s_nvlink_rate(report, gpu_run):
    """hardware.yaml gives the A800 SXM4 400 GB/s NVLink in both directions: 200 GB/s each way."""
    busbw = result_json(gpu_run, "comm.all_reduce.g8")["metrics"]["bus_bandwidth_gb_s"]["mean"]
    expected = rows_by_case(report)["comm.all_reduce.g8"][3]
    assert expected.text == "≤ 200 GB/s"
    assert expected.detail == f"{shown(busbw / 200)} × bound (NVLink 3)"


def test_training_is_expected_below_its_roofline_the_frozen_base_of_lora_included(report, gpu_run):
    rows, results = rows_by_case(report), load_run(gpu_run, False).results
    for case_id in (next(cid for cid in rows if cid.startswith("pretrain.")), "finetune.llama2-7b.l+f.g8"):
        result = results[case_id]
        spec = device_spec(result.case, ["NVIDIA A800-SXM4-80GB"], load_hardware())
        bound = training_throughput_bound(result.case, spec)
        assert rows[case_id][3].text == f"≤ {shown(bound)} tokens/s"
        assert rows[case_id][3].detail == f"{shown(result.metrics['tokens_per_s'].mean / bound)} × bound"
    assert MFU_AGAINST_BOUND in report.page_one.headline.notes[0]  # why MFU and the share of the bound differ
    assert "MFU" not in rows["finetune.llama2-7b.l+f.g8"][1].detail  # no MFU: the FLOPs model is of full training


def test_the_training_throughput_bound_is_the_step_bound_over_every_gpus_micro_batch(gpu_run):
    results = load_run(gpu_run, False).results
    spec = load_hardware().lookup("NVIDIA A800-SXM4-80GB")
    case = results["pretrain.llama2-7b.z2+f.g8"].case
    tokens = case.params.micro_batch * case.params.seq_len * case.gpus
    assert training_throughput_bound(case, spec) * training_step_bound(case, spec).seconds == pytest.approx(tokens)
    # LoRA's frozen base skips its weight gradients: fewer FLOPs a step, a higher ceiling
    lora = results["finetune.llama2-7b.l+f.g8"].case
    assert training_throughput_bound(lora, spec) > training_throughput_bound(case, spec)
    megatron = next(
        c
        for c in build_plan(load_protocol(), "smoke").cases
        if c.params.kind == "train" and getattr(c.params, "tensor_parallel", 1) > 1
    )
    assert training_throughput_bound(megatron.model_copy(update={"device": "cuda"}), spec) is None


# --- The paper's value, energy and cost ---------------------------------------------------------


def case_of(case_id: str):
    return next(case for case in build_plan(load_protocol(), "paper").cases if case.id == case_id)


def test_the_papers_value_is_the_reference_files_with_its_claim_and_platform(report):
    cell = paper_cell(load_reference(), case_of("finetune.llama2-70b.ql+z3+o+r+f.g8"), ("tokens_per_s", "mfu"))
    assert cell.text == "200 tokens/s ± 40 tokens/s"  # as the claims table writes a published value
    assert cell.detail.startswith("C21, on ") and "4090" in cell.detail and "3090" in cell.detail
    assert rows_by_case(report)["finetune.llama2-70b.ql+z3+o+r+f.g8"][4] == cell
    assert paper_cell(load_reference(), case_of("pretrain.llama2-7b.z2+f.g8"), ("tokens_per_s",)).text == "none"
    assert paper_cell(None, case_of("pretrain.llama2-7b.z2+f.g8"), ("tokens_per_s",)).text == "not compared"
    fitted = build_plan(load_protocol(), "paper", host_gpus=1).cases[0]
    assert (paper_cell(load_reference(), fitted, ("tokens_per_s",)).text, fitted.fitted) == (
        "not compared",
        "fitted: 1 of 8 GPUs",
    )


def test_cost_per_million_tokens_is_rented_gpu_time_at_the_measured_throughput(report, gpu_run):
    # 8 GPUs at 2.50 per GPU-hour make 20 per hour; at 10^6 tokens/s a million tokens take 1 s.
    assert cost_per_million_tokens(1e6, 8, 2.5) == pytest.approx(20 / 3600)
    per_run = result_json(gpu_run, "finetune.llama2-7b.l+f.g8")["metrics"]["tokens_per_s"]["per_run"]
    costs = [cost_per_million_tokens(value, 8, PRICE) for value in per_run]
    cell = rows_by_case(report)["finetune.llama2-7b.l+f.g8"][6]
    assert numbers(cell.text)[0] == pytest.approx(sum(costs) / len(costs), rel=5e-3)
    assert report.page_one.headline.header[6] == "USD/1M tokens"  # the currency, default USD
    in_euros = build_report(gpu_run, ["reference"], gpu_hour_price=PRICE, currency="EUR")
    assert (
        in_euros.page_one.headline.header[6] == "EUR/1M tokens"
        and "2.5 EUR per GPU-hour" in in_euros.page_one.headline.notes[-1]
    )
    unpriced = build_report(gpu_run, ["reference"])
    assert not any("1M tokens" in label for label in unpriced.page_one.headline.header)  # no column of "no price"
    assert "kit report --gpu-hour-price 2.50 --currency USD" in unpriced.page_one.headline.notes[-1]


def without_energy(result):
    return result.model_copy(update={"metrics": {k: v for k, v in result.metrics.items() if k != "joules_per_token"}})


def test_energy_is_absent_with_its_reason_never_zero(cpu_run, gpu_run):
    result = load_run(gpu_run, False).results["finetune.llama2-7b.l+f.g8"]
    gpu_cell = energy_cell(without_energy(result), "#finetune")
    assert (gpu_cell.text, gpu_cell.detail) == (
        "not measured",
        "not in result.json (written by a kit without energy figures)",
    )
    smoke = build_report(cpu_run, ["reference"], gpu_hour_price=PRICE)
    rows = rows_by_case(smoke)
    assert rows
    for cells in rows.values():
        if cells[-1].text != "not a token figure":
            assert (cells[-2].text, cells[-1].text) == ("none: a CPU", "none: a CPU")


def test_energy_is_joules_per_token_with_its_spread_the_unit_of_its_column(gpu_run, report):
    """joules_per_token is the metric kit/measure/energy.py writes from NVML's energy counter, shown in one
    unit throughout the report."""
    result = load_run(gpu_run, False).results["finetune.llama2-7b.l+f.g8"]
    measured = result.model_copy(
        update={
            "metrics": {
                **result.metrics,
                "joules_per_token": Metric(mean=0.5, std=0.01, n=3, unit="J/token", per_run=[0.49, 0.5, 0.51]),
            }
        }
    )
    assert energy_cell(measured, "#finetune").text == "0.500 ± 0.010"
    assert "Energy (J/token)" in report.page_one.headline.header
    energy = next(section for section in report.sections if section.anchor == "energy")
    assert all("Energy (J/token)" in table.header for table in energy.tables)


# --- What the preflight measured, how the GPUs were set, whether they slowed --------------------


def test_mfu_is_shown_against_the_datasheet_peak_and_the_matmul_measured_in_preflight(calibrated, calibrated_run):
    metrics = result_json(calibrated_run, THROTTLED)["metrics"]
    detail = rows_by_case(calibrated)[THROTTLED][1].detail
    shares = [100 * tflops / (8 * A800_MATMUL_TFLOPS) for tflops in metrics["achieved_tflops"]["per_run"]]
    assert f"MFU {spread(metrics['mfu'], 100)} %; preflight {shown(sum(shares) / len(shares))} ± " in detail
    assert "MFU: of the datasheet peak; preflight: of the preflight's matmul." in calibrated.page_one.headline.notes[0]


def test_the_expected_bound_is_the_roofline_at_the_measured_figures_with_the_datasheets_beside_it(
    calibrated, calibrated_run
):
    from kit.host.fingerprint import Fingerprint
    from kit.measure.calibration import Achievable

    result = load_run(calibrated_run, False).results[THROTTLED]
    spec = load_hardware().lookup(A800)
    calibration = Fingerprint.model_validate_json((calibrated_run / "fingerprint.json").read_text()).calibration
    reachable, bound = (
        training_throughput_bound(result.case, Achievable(spec, calibration).spec),
        training_throughput_bound(result.case, spec),
    )
    expected, measured = rows_by_case(calibrated)[THROTTLED][3], result.metrics["tokens_per_s"].mean
    assert reachable < bound and expected.text == f"≤ {shown(reachable)} / {shown(bound)} tokens/s"
    assert expected.detail == f"{shown(measured / reachable)} / {shown(measured / bound)} × bound"
    assert (
        "two where the preflight measured the GPUs below their datasheet: at its bf16 matmul 250 TFLOPS and memory "
        "copy 1.70 TB/s / at the datasheet's"
    ) in calibrated.page_one.headline.notes[0]


def test_a_case_measured_while_throttled_says_so_on_page_one_beside_the_power_limit_and_clocks(calibrated):
    measured = rows_by_case(calibrated)[THROTTLED][1]
    assert measured.tone == "warn" and measured.detail.split("; ", 1)[1].startswith("throttled: sw_power_cap in 2 of ")
    facts = {fact.label: fact for fact in calibrated.page_one.host}
    assert (
        "; power limit 400 W, application clocks 1410 / 1593 MHz (max 1410 / 1593); peaks "
        in facts["GPUs, link, power"].value
    )
    state = facts["Calibration"]
    assert (
        state.tone == "warn"
        and f"; 1 of 1 cases measured while throttled ({THROTTLED}: sw_power_cap in 2 of " in state.value
    )
    assert facts["Calibration"].value.startswith(
        "bf16 matmul 250 TFLOPS (80 % of the datasheet's 312 TFLOPS), memory copy "
        "1700 GB/s (83 % of 2.039 TB/s), host→device 24.0 GB/s, device→host 24.0 GB/s, "
        "all-reduce busbw 180 GB/s; raw samples raw/;"
    )


def test_a_run_without_a_calibration_says_why(report):
    facts = {fact.label: fact for fact in report.page_one.host}
    assert facts["Calibration"].tone == "muted" and facts["Calibration"].value.startswith("not measured")


# --- The host and the links ---------------------------------------------------------------------


def test_the_host_is_described_from_its_fingerprint_with_images_by_digest(report, gpu_run):
    facts = {fact.label: fact.value for fact in report.page_one.host}
    assert facts["GPUs, link"].startswith(
        "8 × NVIDIA A800-SXM4-80GB; 8 GPUs, all pairs NVLink (NV8); driver, CUDA 550.54.15"
    )
    assert "; peaks A800 SXM4 80GB, BF16 312" in facts["GPUs, link"]  # the model named once, at the start
    recorded = json.loads((gpu_run / "run.json").read_text())["images"]
    for image, digest in recorded.items():
        assert f"{image} sha256:{digest.split('sha256:')[1][:12]}…" in facts["Images"]


def test_every_link_of_page_one_leads_to_an_anchor_of_the_report(report):
    html = render_html(report)
    links = {cell.link for row in report.page_one.headline.rows for cell in row.cells if cell.link}
    assert {"#pretrain", "#finetune", "#serve", "#comm"} <= links
    for link in links:
        assert f'id="{link[1:]}"' in html, link


# --- The printed page ---------------------------------------------------------------------------


def pdf_page(pdf: Path, number: int) -> str:
    """One page's text in reading order (pdftotext -f N -l N)."""
    if not shutil.which("pdftotext"):
        pytest.skip("needs pdftotext (poppler-utils)")
    page = str(number)
    return subprocess.run(
        ["pdftotext", "-f", page, "-l", page, str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout


def in_a_column(layout: str, text: str) -> bool:
    """Whether `text` is printed in one column of a page laid out by pdftotext -layout, on one line
    or wrapped over the lines under it (a case id wraps at its dots)."""
    lines = layout.splitlines()
    for number, line in enumerate(lines):
        for found in re.finditer(re.escape(text.split(".")[0]), line):
            joined = ""
            for below in lines[number : number + 4]:
                joined += below[found.start() :].split("  ")[0].strip() if len(below) > found.start() else ""
                if joined.startswith(text):
                    return True
    return False


def test_page_one_of_the_pdf_holds_the_headline_figures_of_result_json(calibrated, calibrated_run, tmp_path):
    """Page one of a run with every fact it can have (the preflight's figures, power and clocks,
    a throttled case): still one page."""
    report, gpu_run = calibrated, calibrated_run
    pdf = tmp_path / "report.pdf"
    write_pdf(print_parts(report), pdf)
    page_one = pdf_page(pdf, 1)
    first = " ".join(page_one.split())
    layout = subprocess.run(
        ["pdftotext", "-layout", "-f", "1", "-l", "1", str(pdf), "-"], capture_output=True, text=True, check=True
    ).stdout
    headline = rows_by_case(report)
    assert {"pretrain.llama2-7b.z2+f.g8", "serve.llama2-7b.vllm.g8", "comm.all_reduce.g8"} <= set(headline)
    for case_id in headline:
        assert in_a_column(layout, f"cases/{case_id}/"), case_id
        if "*" in case_id:
            continue  # the cases of an engine that did not run
        result = result_json(gpu_run, case_id)
        metric = {"serve": "output_throughput", "comm": "bus_bandwidth_gb_s"}.get(result["stage"], "tokens_per_s")
        if result["status"] == "ok":
            assert spread(result["metrics"][metric]) in first, case_id
    assert "Methods: Naive: DeepSpeed data parallel, no ZeRO;" in first  # the legend, last: nothing spilled over
    # after the banner a synthetic run prints atop every page
    assert " ".join(pdf_page(pdf, 2).split()).removeprefix(SYNTHETIC_BANNER + " ").startswith("This report")


def test_a_host_that_measured_no_pre_training_nor_fine_tuning_shows_its_scaling_and_breakdown(tmp_path, report):
    """On a one-GPU host only the scaling stage's first count and the breakdown run: page one shows
    them in place of the empty training groups; a run with training keeps them off page one."""
    one_gpu = ["scaling.llama2-7b.q.g1.b2", "profile.llama2-7b.base.g1", "profile.llama2-7b.r.g1.b16"]
    run = write_run(tmp_path / "one-gpu", build_plan(load_protocol(), "paper"), cases=one_gpu)
    rows = rows_by_case(build_report(run, ["reference"], gpu_hour_price=PRICE))
    assert "scaling.llama2-7b.q.g1.b2" in rows
    fastest = max(one_gpu[1:], key=lambda cid: result_json(run, cid)["metrics"]["tokens_per_s"]["mean"])
    assert fastest in rows and not set(one_gpu[1:]) - {fastest} & set(rows)
    assert spread(result_json(run, fastest)["metrics"]["tokens_per_s"]) in rows[fastest][1].text
    assert not any(cid.startswith(("scaling.", "profile.")) for cid in rows_by_case(report))


def test_each_headline_figure_says_its_workload_and_its_value_per_gpu(report, gpu_run):
    """Beside the host's total, the figure per GPU; under its name, the workload's shape (kit.plan.workload_phrase)."""
    rows = rows_by_case(report)
    label, measured = rows["pretrain.llama2-7b.z2+f.g8"][:2]
    assert label.detail == "cases/pretrain.llama2-7b.z2+f.g8/"  # its workload: said by its ranking (test_ranking.py)
    assert measured.detail.startswith(
        f"{shown(result_json(gpu_run, 'pretrain.llama2-7b.z2+f.g8')['metrics']['tokens_per_s']['mean'] / 8)} per GPU"
    )
    label, measured = rows["serve.llama2-7b.vllm.g8"][:2]
    assert label.detail == "cases/serve.llama2-7b.vllm.g8/"  # the serving group's heading says its workload
    assert any(
        row.heading and "each 512 in / 256 out, burst of 1000, bf16" in row.cells[0].text
        for row in report.page_one.headline.rows
    )
    throughput = result_json(gpu_run, "serve.llama2-7b.vllm.g8")["metrics"]["output_throughput"]["mean"]
    assert measured.detail.startswith(f"{shown(throughput / 8)} per GPU; ")
    assert "per GPU" not in rows["comm.all_reduce.g8"][1].text  # a bus bandwidth is one GPU's already


def test_the_verdicts_range_of_bounds_is_that_of_the_figures_the_table_shows(tmp_path):
    """A case not on page one (a slower method of a model whose fastest is shown) is not in the
    range the verdict gives: its lowest and highest are the table's own shares of their bounds."""
    # two QLoRA cases, one of them offloaded: the lowest share of its bound of the run (0.0625)
    qlora = ["finetune.llama2-7b.ql+z3+o.g8", "finetune.llama2-7b.ql+z2.g8"]
    gpu_run = write_run(tmp_path / "a800-run", build_plan(load_protocol(), "paper"), cases=CASES + qlora)
    report = build_report(gpu_run, ["reference"], gpu_hour_price=PRICE)
    shares = [
        float(found.group(1))
        for cells in rows_by_case(report).values()
        if len(cells) > 3 and (found := re.match(r"([\d.]+) × bound", cells[3].detail or ""))
    ]
    said = next(fact.value for fact in report.page_one.verdict if "physical bounds" in fact.value)
    low, high = re.search(r"reach ([\d.]+)–([\d.]+) × their physical bounds", said).groups()
    assert (float(low), float(high)) == (min(shares), max(shares))
    assert not set(qlora) <= set(rows_by_case(report))  # at most one of them on the page
