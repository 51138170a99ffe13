"""The claim-metric contract: every metric a claim of the reference reads is one a real result of
its stage carries. The results are real: one case per stage the claims read, from the session's
real `kit run --all` on this CPU (the `real_smoke_run` fixture), so a claim that names a metric no
workload writes fails here rather than staying "not measured" for ever.

On this CPU the stages give every metric but the GPU idle shares of the profile stage, which
kit/breakdown.py writes per phase (`{phase}_idle_share`) only where the profiler's trace has
GPU kernels; a claim's idle share passes when the CPU result has that phase's time
(`{phase}_s`) and its note on the GPU idle share, so a misspelt phase still fails.
"""

from __future__ import annotations

import pytest

from kit.energy import JOULES_PER_TOKEN, MEAN_POWER_PER_GPU
from kit.reference import Reference, load_reference, relation_metrics
from kit.results import Result, RunDir

pytestmark = pytest.mark.e2e

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
    return (metric.endswith(GPU_ONLY_SUFFIX) and f"{phase}_s" in result.metrics
            and any(note.startswith(GPU_ONLY_NOTE) for note in result.notes))  # fmt: skip


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


def test_every_metric_a_claim_reads_is_produced_by_its_stage(smoke_results):
    assert unproduced(load_reference(), smoke_results) == []


def test_a_claim_naming_a_metric_no_stage_produces_fails_the_contract(smoke_results, manifests_copy):
    path = manifests_copy / "references" / "arxiv-2311.03687.yaml"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("metric: duration_s", "metric: generated_tokens_per_s")
                    .replace("part: optimizer_s", "part: optimiser_s")
                    .replace('"{phase}_idle_share"', '"{phase}_idle_shares"'), encoding="utf-8")  # fmt: skip
    missing = unproduced(load_reference(path), smoke_results)
    assert "C25: serve does not produce generated_tokens_per_s" in missing
    assert "C10: profile does not produce optimiser_s" in missing
    assert "C11: profile does not produce forward_idle_shares" in missing


def test_on_this_cpu_the_energy_figures_are_absent_and_the_reason_is_given(smoke_results):
    for stage in ("pretrain", "serve"):
        result = smoke_results[stage]
        assert JOULES_PER_TOKEN not in result.metrics and MEAN_POWER_PER_GPU not in result.metrics
        assert any(note.startswith("joules per token and mean power per GPU: not measured") and "CPU" in note
                   for note in result.notes), result.notes  # fmt: skip
