"""Megatron-LM's engine (megatron-core) as the kit drives it, on CPU over gloo: the layers split
over two ranks compute what one rank computes, and the smoke case is a training case like any
other (same harness, result format, option judgement)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kit.plan.protocol import build_plan, load_protocol
from kit.rundir.directory import atomic_write_model

SMOKE_CASE = "pretrain.tiny-llama.megatron+tp2.g2"


def smoke_case(**params):
    case = next(c for c in build_plan(load_protocol(), "smoke").cases if c.id == SMOKE_CASE)
    return case.model_copy(update={"params": case.params.model_copy(update=params)})


def losses_of(case, gpus: int, folder) -> list[list[float]]:
    """Each rank's per-step losses of one launch of the real workload in `gpus` processes."""
    case = case.model_copy(update={"gpus": gpus})
    atomic_write_model(folder / "case.json", case)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit.workloads.launch",
            "--nproc",
            str(gpus),
            "--",
            sys.executable,
            "-m",
            "kit.workloads",
            "--case",
            str(folder / "case.json"),
            "--out",
            str(folder / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    samples = [json.loads((folder / "out" / f"rank-{r}.json").read_text()) for r in range(gpus)]
    assert all(s["status"] == "ok" for s in samples), [s["reason"] for s in samples]
    return [s["details"]["losses"] for s in samples]


@pytest.mark.e2e
def test_tensor_parallel_2_gives_the_losses_of_one_rank_step_by_step(tmp_path):
    (tmp_path / "tp1").mkdir(), (tmp_path / "tp2").mkdir()
    [alone] = losses_of(smoke_case(tensor_parallel=1, runs=1, launch="per_run"), 1, tmp_path / "tp1")
    split = losses_of(smoke_case(tensor_parallel=2, runs=1, launch="per_run"), 2, tmp_path / "tp2")
    steps = smoke_case().params.warmup_steps + smoke_case().params.measured_steps
    assert len(alone) == steps and split[0] == split[1]  # both ranks of the group see one loss
    assert split[0] == pytest.approx(alone, rel=1e-4)  # float32: the split matmuls add in another order
    assert alone[-1] != alone[0]  # the optimizer moved the weights


@pytest.mark.e2e
def test_the_smoke_megatron_case_is_a_training_case_with_its_engine_judged(real_smoke_run):
    result = json.loads((real_smoke_run / "cases" / SMOKE_CASE / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]
    engine = result["effective"]["framework"]
    assert engine["in_effect"] and "tensor parallel 2, data parallel 1" in engine["observed"]
    assert "DistributedOptimizer" in engine["observed"] and result["effective"]["attention"]["in_effect"]
    for sample in result["samples"]:  # the group's first rank counts the batch, its peer none
        assert [r["tokens_per_step"] for r in sample["ranks"]] == [result["case"]["params"]["seq_len"] * 1, 0]
    assert result["metrics"]["tokens_per_s"]["n"] == 3


def test_claim_c9_reads_megatron_beside_deepspeed_at_batch_1_and_at_each_largest_batch(tmp_path):
    """A synthetic A800 run (tests/support/paper_size_run.py): Megatron-LM's 7B step fits 80 GB (its
    distributed optimizer shards the Adam states), DeepSpeed's naive one does not; C9 says so."""
    from support.paper_size_run import write_run

    from kit.host.fingerprint import Fingerprint
    from kit.reference.claims import evaluate_claim
    from kit.reference.measured_run import measured_run
    from kit.reference.published import load_reference
    from kit.rundir.directory import RunDir

    cases = [
        "pretrain.llama2-7b.megatron.g8",
        "pretrain.llama2-7b.naive.g8",
        "maxbatch.llama2-7b.megatron.g8",
        "maxbatch.llama2-7b.naive.g8",
    ]
    path = write_run(tmp_path / "a800", build_plan(load_protocol(), "paper"), cases=cases)
    run = RunDir(path)
    results = {r.case_id: r for r in run.results()}
    assert (
        results["pretrain.llama2-7b.megatron.g8"].status == "ok"
        and results["pretrain.llama2-7b.naive.g8"].status == "oom"
    )
    largest = results["maxbatch.llama2-7b.megatron.g8"]
    assert largest.status == "ok" and largest.metrics["max_micro_batch"].mean > 1
    measured = measured_run(
        run.read_info(), run.results(), Fingerprint.model_validate_json(run.fingerprint_path.read_text())
    )
    reference = load_reference()
    c9 = evaluate_claim(next(c for c in reference.claims if c.id == "C9"), reference, [measured])
    assert c9.verdict == "not measured" and len(c9.relations) == 3
    assert all(
        "pretrain.llama2-7b.naive.g8 (oom)" in r.finding or "maxbatch.llama2-7b.naive.g8 (oom)" in r.finding
        for r in c9.relations
    ), [r.finding for r in c9.relations]
