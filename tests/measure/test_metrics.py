"""Metric definitions: the paper's tokens/s, spread over runs, TFLOPS and MFU with their limits."""

from __future__ import annotations

import math

import pytest

from kit.measure.metrics import step_times, summarize, tokens_per_second
from kit.measure.training import train_case_metrics
from kit.rundir.schema import PeakMemory, RankSample, RunSample

H100 = "NVIDIA H100 80GB HBM3"


def rank(r, steps, device="cpu", name="x86_64", tokens=350, allocated=None):
    return RankSample(
        rank=r,
        world_size=2,
        status="ok",
        device=device,
        device_name=name,
        step_s=steps,
        tokens_per_step=tokens,
        peak_memory=PeakMemory(host_rss_bytes=2**30, device_allocated_bytes=allocated),
        started_at="t",
        finished_at="t",
    )


def run(index, *ranks):
    return RunSample(index=index, status="ok", exit_code=0, wall_s=1.0, ranks=list(ranks))


def test_a_step_lasts_as_long_as_its_slowest_rank():
    assert step_times([rank(0, [1.0, 2.0]), rank(1, [1.5, 1.0])]) == [1.5, 2.0]


def test_tokens_per_second_is_global_tokens_over_mean_step_time():
    # micro-batch 1 x 350 tokens x 8 GPUs, steps of 0.5 s and 1.5 s -> 2800 / 1.0
    assert tokens_per_second(8 * 350, [0.5, 1.5]) == pytest.approx(2800.0)


def test_spread_is_the_sample_standard_deviation():
    metric = summarize([1.0, 2.0, 3.0], "x")
    assert (metric.mean, metric.std, metric.n) == (2.0, 1.0, 3)
    assert summarize([5.0], "x").std is None


def test_cpu_cases_get_tflops_but_no_mfu(smoke_plan):
    case = next(c for c in smoke_plan.cases if c.id == "pretrain.tiny-llama.z2.g2")
    runs = [run(i, rank(0, [0.1] * 3), rank(1, [0.1] * 3)) for i in (1, 2)]
    found, notes = train_case_metrics(case, runs)
    assert found["tokens_per_s"].mean == pytest.approx(7000.0)
    assert found["achieved_tflops"].mean > 0
    assert "mfu" not in found and any("CPU" in note for note in notes)


def test_mfu_divides_by_the_summed_peak_of_a_known_gpu(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.naive.g8")
    ranks = [rank(r, [1.0], device="cuda", name=H100, allocated=40 * 2**30) for r in range(8)]
    found, notes = train_case_metrics(case, [run(1, *ranks)])
    tokens = 8 * 350
    assert found["tokens_per_s"].mean == tokens
    assert found["peak_memory_gib"].mean == pytest.approx(40.0)
    tflops = found["achieved_tflops"].mean
    assert found["mfu"].mean == pytest.approx(tflops / (8 * 989.4), rel=1e-3)
    assert not [note for note in notes if "not computed" in note or "impossible" in note]


def test_an_unknown_gpu_gets_no_mfu(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.naive.g8")
    ranks = [rank(r, [1.0], device="cuda", name="NVIDIA Mystery 9000", allocated=1) for r in range(8)]
    found, notes = train_case_metrics(case, [run(1, *ranks)])
    assert "mfu" not in found and any("Mystery" in note for note in notes)


def test_impossible_mfu_is_flagged(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.naive.g8")
    ranks = [rank(r, [1e-6], device="cuda", name=H100, allocated=1) for r in range(8)]
    found, notes = train_case_metrics(case, [run(1, *ranks)])
    assert found["mfu"].mean > 1 and any("impossible" in note for note in notes)


def test_frozen_weights_get_no_model_flops(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "finetune.llama2-7b.l.g8")
    ranks = [rank(r, [1.0], device="cuda", name=H100, allocated=1) for r in range(8)]
    found, notes = train_case_metrics(case, [run(1, *ranks)])
    assert "achieved_tflops" not in found and math.isclose(found["tokens_per_s"].mean, 2800)
