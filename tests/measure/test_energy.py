"""Energy per token, mean power per GPU and cost per 1M tokens: the arithmetic on pure inputs.
A real CPU run's fields, absent with the reason, are checked in test_claim_metrics.py."""

from __future__ import annotations

import pytest

from kit.measure.energy import (
    JOULES_PER_TOKEN,
    MEAN_POWER_PER_GPU,
    cost_per_million_tokens,
    energy_case_metrics,
)
from kit.measure.telemetry import NoDevice, summarize
from kit.rundir.schema import DeviceTelemetry, RankSample, RunSample
from kit.rundir.serving import BurstAggregates

H100 = "NVIDIA H100 80GB HBM3"


def gpu_rank(r: int, telemetry: DeviceTelemetry, steps=(0.5, 0.5, 0.5, 0.5), tokens=4096, **extra) -> RankSample:
    return RankSample(
        rank=r,
        world_size=2,
        status="ok",
        device="cuda",
        device_name=H100,
        step_s=list(steps),
        tokens_per_step=tokens,
        telemetry=telemetry,
        started_at="t",
        finished_at="t",
        **extra,
    )


def run(index: int, *ranks: RankSample) -> RunSample:
    return RunSample(index=index, status="ok", exit_code=0, wall_s=3.0, ranks=list(ranks))


def test_joules_per_token_is_the_energy_of_every_gpu_over_the_tokens_of_the_measured_steps(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3.g8")
    # Two ranks, 4 measured steps of 4096 tokens each: 32768 tokens for 2 x 800 J (2 s at 400 W).
    telemetry = summarize(0, 2.0, [2**30], [400_000], 1_000_000, 1_800_000)
    found, notes = energy_case_metrics(case, [run(1, gpu_rank(0, telemetry), gpu_rank(1, telemetry))])
    assert notes == []
    assert found[JOULES_PER_TOKEN].mean == pytest.approx(1600 / 32768)
    assert found[JOULES_PER_TOKEN].unit == "J/token"
    assert found[MEAN_POWER_PER_GPU].mean == pytest.approx(400.0) and found[MEAN_POWER_PER_GPU].unit == "W"


def test_mean_power_per_gpu_is_the_mean_over_gpus_and_each_run_is_kept(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3.g8")
    hot = DeviceTelemetry(source="nvml", energy_j=900.0, mean_power_w=450.0, samples=20)
    cool = DeviceTelemetry(source="nvml", energy_j=700.0, mean_power_w=350.0, samples=20)
    found, _ = energy_case_metrics(
        case, [run(1, gpu_rank(0, hot), gpu_rank(1, cool)), run(2, gpu_rank(0, hot), gpu_rank(1, hot))]
    )
    assert found[MEAN_POWER_PER_GPU].per_run == pytest.approx([400.0, 450.0])
    assert found[JOULES_PER_TOKEN].per_run == pytest.approx([1600 / 32768, 1800 / 32768])
    assert found[JOULES_PER_TOKEN].n == 2


def test_a_serving_burst_divides_its_energy_by_the_output_tokens_of_its_completed_requests(paper_plan):
    case = next(c for c in paper_plan.cases if c.stage == "serve" and c.gpus == 8)
    burst = DeviceTelemetry(source="nvml", energy_j=8 * 3000.0, mean_power_w=300.0, samples=100)
    # 1000 requests of 120 output tokens over 100 s, as kit.rundir.serving writes a burst's figures
    totals = BurstAggregates(
        requests=1000,
        completed=1000,
        errors=0,
        duration_s=100.0,
        request_throughput=10.0,
        output_throughput=1200.0,
        output_tokens=120_000,
        ttft_s=None,
        tpot_s=None,
        latency_s=None,
        total_token_throughput=2480.0,
        input_tokens=128_000,
        itl_s=None,
    )
    driver = gpu_rank(
        0,
        burst,
        steps=(),
        tokens=0,
        details={"engine": {"name": "vllm", "label": "vLLM", "placement": "docker"}, "aggregates": totals.model_dump()},
    )
    found, notes = energy_case_metrics(case, [run(1, driver)])
    assert notes == []
    assert found[JOULES_PER_TOKEN].mean == pytest.approx(0.2)
    assert found[MEAN_POWER_PER_GPU].mean == pytest.approx(300.0)


@pytest.mark.parametrize(
    "telemetry, reason",
    [
        (NoDevice().stop(), "the case runs on the CPU"),
        (
            DeviceTelemetry(source="nvml", unavailable="no NVML: the nvidia-ml-py package is not installed here"),
            "no NVML",
        ),
        (DeviceTelemetry(source="nvml", mean_power_w=250.0, samples=3), "no energy counter"),
        (None, "recorded no telemetry"),
    ],
)
def test_without_a_reading_the_figures_are_absent_and_the_note_says_why(paper_plan, telemetry, reason):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3.g8")
    found, notes = energy_case_metrics(case, [run(1, gpu_rank(0, telemetry))])
    assert found == {}
    assert len(notes) == 1 and reason in notes[0] and notes[0].startswith("joules per token and mean power per GPU")


def test_a_collective_has_no_energy_per_token_and_says_so(paper_plan):
    case = next(c for c in paper_plan.cases if c.workload == "comm")
    found, notes = energy_case_metrics(case, [])
    assert found == {} and "produces no tokens" in notes[0]


def test_a_million_tokens_cost_the_gpu_hours_they_take():
    # 8 GPUs at 2.50 per GPU-hour = 20 per hour; 1M tokens at 10 000 tokens/s take 100 s.
    assert cost_per_million_tokens(10_000, 8, 2.50) == pytest.approx(20 * 100 / 3600)
    with pytest.raises(ValueError):
        cost_per_million_tokens(0, 8, 2.50)
    with pytest.raises(ValueError):
        cost_per_million_tokens(10_000, 0, 2.50)
