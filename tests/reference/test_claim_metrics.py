"""The claim-metric contract: every metric a claim of the reference reads is one a real result of
its stage carries. The results are real: one case per stage the claims read, from the session's
real `kit run --all` on this CPU (the `real_smoke_run` fixture), so a claim that names a metric no
workload writes fails here rather than staying "not measured" for ever.

On this CPU the stages give every metric but the GPU idle shares of the profile stage, which
kit/measure/breakdown.py writes per phase (`{phase}_idle_share`) only where the profiler's trace has
GPU kernels; a claim's idle share passes when the CPU result has that phase's time
(`{phase}_s`) and its note on the GPU idle share, so a misspelt phase still fails. Those, and the
energy figures, are held to results recorded on a GPU host (tests/fixtures/gpu_results, SOURCE).
"""

from __future__ import annotations

import json

import pytest
from support import FIXTURES
from support.recorded_h100_traces import recorded

from kit.measure.energy import JOULES_PER_TOKEN, MEAN_POWER_PER_GPU
from kit.measure.profile import breakdown_figures
from kit.reference.published import Reference, load_reference, relation_metrics
from kit.rundir.directory import RunDir
from kit.rundir.schema import Result

GPU_RESULTS = FIXTURES / "gpu_results"

# One smoke case of each stage the claims read.
STAGE_CASES = {
    "pretrain": "pretrain.tiny-llama.naive.g2",
    "maxbatch": "maxbatch.tiny-llama.naive.g1",
    "finetune": "finetune.tiny-llama.l.g2",
    "scaling": "scaling.tiny-llama.q.g1.b2",
    "profile": "profile.tiny-llama.base.g1",
    "serve": "serve.tiny-llama.vllm.g1",
    "comm": "comm.all_reduce.g2",
}
GPU_ONLY_SUFFIX, GPU_ONLY_NOTE = "_idle_share", "GPU idle share: "


@pytest.fixture(scope="module")
def smoke_results(real_smoke_run) -> dict[str, Result]:
    run = RunDir(real_smoke_run)
    results = {stage: run.read_result(case) for stage, case in STAGE_CASES.items()}
    failed = {stage: f"{r.status}: {r.reason}" for stage, r in results.items() if r.status != "ok"}
    assert not failed, failed
    return results


def produces(result: Result, metric: str) -> bool:
    if metric in result.metrics:
        return True
    phase = metric.removesuffix(GPU_ONLY_SUFFIX)
    return (
        metric.endswith(GPU_ONLY_SUFFIX)
        and f"{phase}_s" in result.metrics
        and any(note.startswith(GPU_ONLY_NOTE) for note in result.notes)
    )


def unproduced(reference: Reference, results: dict[str, Result]) -> list[str]:
    """`claim: stage metric` for each metric a claim reads that no real result of its stage has."""
    found = []
    for claim in reference.claims:
        for stage, metric in sorted(set().union(*(relation_metrics(r) for r in claim.relations))):
            if stage not in results:
                found.append(f"{claim.id}: no real result of stage {stage}")
            elif not produces(results[stage], metric):
                found.append(f"{claim.id}: {stage} does not produce {metric}")
    return found


@pytest.mark.e2e
def test_every_metric_a_claim_reads_is_produced_by_its_stage(smoke_results):
    assert unproduced(load_reference(), smoke_results) == []


@pytest.mark.e2e
def test_a_claim_naming_a_metric_no_stage_produces_fails_the_contract(smoke_results, manifests_copy):
    path = manifests_copy / "references" / "arxiv-2311.03687.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace("metric: duration_s", "metric: generated_tokens_per_s")
        .replace("part: optimizer_s", "part: optimiser_s")
        .replace('"{phase}_idle_share"', '"{phase}_idle_shares"'),
        encoding="utf-8",
    )
    missing = unproduced(load_reference(path), smoke_results)
    assert "C25: serve does not produce generated_tokens_per_s" in missing
    assert "C10: profile does not produce optimiser_s" in missing
    assert "C11: profile does not produce forward_idle_shares" in missing


@pytest.mark.e2e
def test_on_this_cpu_the_energy_figures_are_absent_and_the_reason_is_given(smoke_results):
    for stage in ("pretrain", "serve"):
        result = smoke_results[stage]
        assert JOULES_PER_TOKEN not in result.metrics and MEAN_POWER_PER_GPU not in result.metrics
        assert any(
            note.startswith("joules per token and mean power per GPU: not measured") and "CPU" in note
            for note in result.notes
        ), result.notes


def gpu_result(case_id: str) -> Result:
    return Result.model_validate(json.loads((GPU_RESULTS / f"h200x1-{case_id}.json").read_text()))


def test_every_profile_metric_a_claim_reads_is_in_a_real_gpu_result():
    """The H200 results predate the device-timeline breakdown (kit.measure.breakdown): they have every metric
    the claims read but C15's whole, the device's busy time, which the recorded H100 trace's
    timeline gives (tests/support/recorded_h100_traces.py)."""
    profile = gpu_result("profile.llama2-7b.base.g1")
    read = {
        metric
        for claim in load_reference().claims
        for relation in claim.relations
        for stage, metric in relation_metrics(relation)
        if stage == "profile"
    }
    assert {metric for metric in read if metric.endswith(GPU_ONLY_SUFFIX)}  # the idle shares are among them
    assert sorted(read - set(profile.metrics)) == ["device_busy_s"]
    figures = breakdown_figures(recorded("profile.llama2-7b.base.g1").breakdown)
    assert {"device_busy_s", "forward_idle_share", "backward_idle_share"} <= set(figures)


def test_on_a_gpu_the_energy_figures_are_measured():
    result = gpu_result("scaling.llama2-7b.q.g1.b2")
    joules, watts = result.metrics[JOULES_PER_TOKEN], result.metrics[MEAN_POWER_PER_GPU]
    assert 0 < joules.mean < 10 and 50 < watts.mean <= 700  # the H200's power limit is 700 W
    assert (joules.unit, watts.unit) == ("J/token", "W")
