"""Energy and cost in the report, and its export for spreadsheets (`kit report --format json,csv`).

The run directories are tests/support/paper_size_run.py's: synthetic numbers in the real layout, every
result from kit.execute.case_run.result_of, so the energy figures come from the rank samples' telemetry
the way a real GPU run's do, and a CPU run's samples say why they have none.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.paper_size_run import write_run

from kit.report.build import build_report

GPU_CASES = [
    "pretrain.llama2-7b.z3.g8",
    "serve.llama2-7b.vllm.g8",
    "comm.all_reduce.g8",
    "profile.llama2-7b.f.g1",
    "profile.llama2-7b.base.g1",
]
CPU_CASES = ["pretrain.tiny-llama.naive.g2"]


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory, paper_plan) -> Path:
    return write_run(tmp_path_factory.mktemp("gpu") / "a800", paper_plan, cases=GPU_CASES)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory, smoke_plan) -> Path:
    return write_run(tmp_path_factory.mktemp("cpu") / "smoke", smoke_plan, cases=CPU_CASES)


def kit_report(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kit.cli", "report", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )


def energy_table(run: Path, caption: str = "Energy and cost per case", **options):
    section = next(s for s in build_report(run, **options).sections if s.anchor == "energy")
    return next(table for table in section.tables if table.caption == caption)


def energy_rows(run: Path, **options) -> dict[str, list[str]]:
    return {
        row.cells[0].text: [f"{c.text} | {c.detail}" if c.detail else c.text for c in row.cells[1:]]
        for row in energy_table(run, **options).rows
    }


def test_the_energy_section_prices_a_million_tokens_at_the_price_given(gpu_run):
    rows = energy_rows(gpu_run, compare=(), gpu_hour_price=2.5)
    # Training: 330 W per GPU (the generator's draw) over the tokens of the measured steps.
    training = rows["pretrain.llama2-7b.z3.g8"]
    assert training[2].startswith("330 ") and float(training[3].split(" ± ")[0]) > 0
    assert (
        energy_table(gpu_run, compare=(), gpu_hour_price=2.5).header[-1]
        == "Cost per 1M tokens (USD, at 2.5 USD per GPU-hour)"
    )
    assert "serve.llama2-7b.vllm.g8" in rows
    assert "comm.all_reduce.g8" not in rows  # no tokens to price
    assert rows["profile.llama2-7b.base.g1"][2].startswith("330 ")  # over the breakdown's plain measured steps


def test_without_a_price_the_report_says_how_to_give_one(gpu_run):
    report = build_report(gpu_run, compare=())
    section = next(s for s in report.sections if s.anchor == "energy")
    assert "kit report --gpu-hour-price 2.50" in section.paragraphs[1]
    assert energy_rows(gpu_run, compare=())["pretrain.llama2-7b.z3.g8"][3] == "no price"


def test_on_a_cpu_run_the_energy_is_absent_with_the_reason_and_nothing_is_priced(cpu_run):
    row = energy_rows(cpu_run, compare=(), gpu_hour_price=2.5)["pretrain.tiny-llama.naive.g2"]
    assert row[1:] == ["none: a CPU", "-", "none: a CPU"]
    section = next(s for s in build_report(cpu_run, compare=()).sections if s.anchor == "energy")
    assert (
        "No case measured energy (the case runs on the CPU; NVML measures NVIDIA GPUs only)" in section.paragraphs[-1]
    )
    assert energy_table(cpu_run, compare=()).media == "screen"  # a table of "none" is not printed


def test_json_export_has_every_claim_and_every_metric_with_its_unit(gpu_run, tmp_path):
    done = kit_report(
        str(gpu_run), "--compare", "reference", "--format", "json", "--gpu-hour-price", "2.5", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    document = json.loads((tmp_path / "report.json").read_text())
    assert document["gpu_hour_price"] == 2.5
    assert [claim["id"] for claim in document["claims"]] == [f"C{n}" for n in range(1, 28)]
    c13 = next(claim for claim in document["claims"] if claim["id"] == "C13")
    assert [r["label"] for r in c13["relations"][0]["readings"]] == ["34.9 % less time", "1.349 × the speed"]
    # The run is on A800s: RTX4090's scaling claim expects the A800's efficiency (C1's) on them.
    c2 = next(claim for claim in document["claims"] if claim["id"] == "C2")["expectation"]["relations"][0]
    assert c2["expected"] == "100 % ± 5 points" and "on 8 × A800-80G, NVLink, from C1" in c2["basis"]
    assert (c2["verdict"], c2["judged_in"]) == ("judged in another claim", "C1")  # one measurement, judged once
    cases = {case["case"]: case for case in document["cases"]}
    assert sorted(cases) == sorted(GPU_CASES)
    training = cases["pretrain.llama2-7b.z3.g8"]["metrics"]
    assert training["joules_per_token"]["unit"] == "J/token" and training["mean_power_per_gpu_w"]["mean"] == 330
    assert training["cost_per_million_tokens"]["unit"] == "USD/1M tokens" and document["currency"] == "USD"
    assert all(metric["unit"] for case in cases.values() for metric in case["metrics"].values())


def test_json_export_holds_each_sweep_point_under_the_objectives_and_a_p99_that_is_a_failed_request_as_null(
    paper_plan, tmp_path
):
    """The synthetic TGI 70B case: from concurrency 256 on, 1.2 % of its requests are answered 503,
    more than its p99 allows: that p99 is a request never answered, null in strict JSON."""
    run = write_run(tmp_path / "a800", paper_plan, cases=["serve.llama2-70b.tgi.g8"])
    done = kit_report(str(run), "--format", "json", "--slo-ttft-ms", "3000", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    document = json.loads((tmp_path / "out" / "report.json").read_text(), parse_constant=refuse)
    assert document["slo"] == {
        "ttft_s": 3.0,
        "tpot_s": 0.2,
        "percentile": 99,
        "described": "p99 TTFT ≤ 3000 ms, TPOT ≤ 200 ms (given to kit report)",
    }
    sweep = document["sweeps"]["serve.llama2-70b.tgi.g8"]
    failing = [point for point in sweep["points"] if point["figures"]["errors"]]
    assert failing and all(point["judged"]["ttft_p99_s"] is None and not point["judged"]["meets"] for point in failing)
    assert all(point["judged"]["goodput"] < point["figures"]["request_throughput"] for point in failing)
    assert failing[0]["judged"]["goodput"] > 0  # its finished requests within the objectives count (at 512 none is)
    best = max((p for p in sweep["points"] if p["judged"]["meets"]), key=lambda p: p["figures"]["output_throughput"])
    assert sweep["capacity_concurrency"] == best["concurrency"] < failing[0]["concurrency"]


def test_csv_export_is_a_table_of_relations_and_a_table_of_metrics(gpu_run, cpu_run, tmp_path):
    done = kit_report(str(gpu_run), "--compare", "reference", "--format", "csv", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    claims = list(csv.DictReader(io.StringIO((tmp_path / "report-claims.csv").read_text())))
    assert {row["claim"] for row in claims} == {f"C{n}" for n in range(1, 28)}
    c25 = [row for row in claims if row["claim"] == "C25"]
    assert len(c25) == 3 and all(row["readings"].startswith("up to 13 ×, a bound: ") for row in c25 if row["measured"])
    c10 = next(row for row in claims if row["claim"] == "C10")  # a claim of any GPU: the paper's verdict stands
    assert (c10["expected_on_this_host"], c10["verdict_vs_expectation"]) == ("37 % ± 5 points", "paper verdict")
    metrics = list(csv.DictReader(io.StringIO((tmp_path / "report-metrics.csv").read_text())))
    power = next(
        row for row in metrics if row["case"] == "serve.llama2-7b.vllm.g8" and row["metric"] == "mean_power_per_gpu_w"
    )
    assert (float(power["mean"]), power["unit"], power["n"]) == (330.0, "W", "1")  # the paper plan serves once
    assert not any(row["metric"] == "cost_per_million_tokens" for row in metrics)  # no price given
    cpu = kit_report(str(cpu_run), "--format", "csv", "--out", str(tmp_path / "cpu"))
    assert cpu.returncode == 0, cpu.stderr
    assert (tmp_path / "cpu" / "report-claims.csv").read_text().strip() == ",".join(
        [
            "claim",
            "statement",
            "claim_verdict",
            "claim_reason",
            "relation",
            "verdict",
            "judged",
            "published",
            "measured",
            "finding",
            "readings",
            "caveats",
            "expected_on_this_host",
            "expected_basis",
            "verdict_vs_expectation",
            "finding_vs_expectation",
        ]
    )  # the reference was not compared: no rows


def test_the_currency_given_is_recorded_and_names_every_cost(gpu_run, tmp_path):
    done = kit_report(
        str(gpu_run), "--format", "json", "--gpu-hour-price", "2.5", "--currency", "EUR", "--out", str(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "report.json").read_text())
    assert (document["gpu_hour_price"], document["currency"]) == (2.5, "EUR")
    assert {
        case["metrics"]["cost_per_million_tokens"]["unit"]
        for case in document["cases"]
        if "cost_per_million_tokens" in case["metrics"]
    } == {"EUR/1M tokens"}
    refused = kit_report(str(gpu_run), "--format", "json", "--currency", "US$", "--out", str(tmp_path))
    assert refused.returncode == 2 and "a currency is a short name of letters" in refused.stderr


def test_the_exports_beside_the_run_are_not_evidence_and_a_bad_price_is_refused(cpu_run):
    done = kit_report(str(cpu_run), "--format", "json,csv", "--gpu-hour-price", "2.5")
    assert done.returncode == 0, done.stderr
    assert kit_report("--verify", str(cpu_run)).returncode == 0
    refused = kit_report(str(cpu_run), "--format", "json", "--gpu-hour-price", "-1")
    assert refused.returncode == 2 and "a positive number is needed; got -1" in refused.stderr
    unknown = kit_report(str(cpu_run), "--format", "xlsx")
    assert unknown.returncode == 2 and "html, pdf, json, csv" in unknown.stderr


def test_an_invalid_figure_is_no_figure_in_the_energy_table_nor_priced(tmp_path, paper_plan):
    """Past its physical bound, a throughput is no measurement: its row says "invalid: <why>" in the
    place of the tokens/s and of the joules per token drawn from them, and is not priced."""
    run = write_run(tmp_path / "a800", paper_plan, cases=GPU_CASES, past_bound=("serve.llama2-7b.vllm.g8",))
    throughput, energy, _, cost = energy_rows(run, compare=(), gpu_hour_price=2.5)["serve.llama2-7b.vllm.g8"]
    assert throughput.startswith("invalid: output tokens/s") and throughput.endswith("impossible")
    assert energy == "invalid" and cost.startswith("not priced | invalid: output tokens/s")
    assert not energy_rows(run, compare=(), gpu_hour_price=2.5)["pretrain.llama2-7b.z3.g8"][0].startswith("invalid")
