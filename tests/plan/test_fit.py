"""A plan that fits the host: the paper and quick profiles on 1, 2, 4, 8 and 16 GPUs of two GPU
models, from the host's fingerprint (never by pretending a GPU is present in a workload).

The one-GPU fingerprint is the real `kit doctor --json` of an H100 host (tests/fixtures/h100x1-run,
SOURCE); the others are it with its GPU repeated, or renamed to an L40S with that card's memory as
NVML reports it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import FIXTURES

from kit.plan.protocol import build_plan, fitted_gpu_counts, load_protocol

KIT = [sys.executable, "-m", "kit.cli"]
DOCTOR = FIXTURES / "h100x1-run" / "doctor.json"
H100 = ("NVIDIA H100 80GB HBM3", None)  # None: the recorded memory (85520809984 bytes)
L40S = ("NVIDIA L40S", 46068 * 2**20)  # NVML's total of a 48 GB L40S: 46068 MiB
FITTED_STAGES = ("pretrain", "finetune", "maxbatch", "serve")


def fingerprint_with(gpus: int, model: tuple[str, int | None], path: Path) -> Path:
    """The recorded H100 host's doctor output with `gpus` GPUs of `model`."""
    data = json.loads(DOCTOR.read_text())
    name, memory = model
    recorded = data["fingerprint"]["gpus"]["gpus"][0]
    data["fingerprint"]["gpus"]["gpus"] = [
        {**copy.deepcopy(recorded), "index": i, "name": name, "memory_bytes": memory or recorded["memory_bytes"]}
        for i in range(gpus)
    ]
    path.write_text(json.dumps(data))
    return path


def kit_list(profile: str, fingerprint: Path) -> dict:
    done = subprocess.run(
        [*KIT, "list", "--profile", profile, "--json", "--fingerprint", str(fingerprint)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("model", [H100, L40S], ids=["h100-80gb", "l40s-48gb"])
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_a_host_of_fewer_than_eight_gpus_runs_every_stage_fitted_to_them(tmp_path, gpus, model):
    listed = kit_list("paper", fingerprint_with(gpus, model, tmp_path / "fp.json"))
    assert listed["fitted_to_gpus"] == gpus and listed["host"]["gpus"] == gpus
    cases, skipped = {c["id"]: c for c in listed["cases"]}, listed["host"]["skipped"]
    fitted = [c for c in cases.values() if c["stage"] in FITTED_STAGES]
    assert fitted and all(c["fitted_from"] == 8 and c["gpus"] <= gpus for c in fitted)
    assert not [cid for cid in skipped if cases[cid]["stage"] in FITTED_STAGES and "GPUs, host has" in skipped[cid]]
    training = [c for c in fitted if c["stage"] != "serve"]
    assert {c["gpus"] for c in training} == {gpus} and all(c["id"].split(".")[3] == f"g{gpus}" for c in training)
    assert "pretrain.llama2-7b.z3+o.g8" not in cases and f"pretrain.llama2-7b.z3+o.g{gpus}" in cases
    assert "this host has" in cases[f"finetune.llama2-70b.ql.g{gpus}"]["interpretation"]["fitted"]

    serving = {(c["model"], c["method"]): c for c in cases.values() if c["stage"] == "serve"}
    assert len(serving) == 9
    # 7B and 13B fit one GPU of either model; 70B (128.7 GiB with a sequence's KV cache) needs
    # 2 H100s or 4 L40Ss, each holding 90 % of its memory at most.
    for engine in ("vllm", "tgi", "lightllm"):
        assert serving["llama2-7b", engine]["gpus"] == serving["llama2-13b", engine]["gpus"] == 1
        seventy = serving["llama2-70b", engine]
        needed = 2 if model is H100 else 4
        if gpus >= needed:
            assert seventy["gpus"] == needed and seventy["id"] not in skipped
        else:
            assert seventy["gpus"] == gpus
            assert skipped[seventy["id"]].startswith(
                "the weights and one sequence's KV cache (128.7 GiB) need more than 90%"
            )


@pytest.mark.parametrize("gpus", [8, 16])
def test_a_host_of_eight_or_more_runs_the_papers_cases_as_written(tmp_path, gpus):
    listed = kit_list("paper", fingerprint_with(gpus, H100, tmp_path / "fp.json"))
    cases = {c["id"]: c for c in listed["cases"]}
    assert listed["host"]["skipped"] == {}
    assert all(c["fitted_from"] is None for c in cases.values())
    assert cases["pretrain.llama2-7b.naive.g8"]["gpus"] == cases["serve.llama2-70b.tgi.g8"]["gpus"] == 8
    assert sorted(c["gpus"] for c in cases.values() if c["stage"] == "scaling" and not c["variant"]) == [
        n for n in (1, 2, 4, 8, 16) if n <= gpus
    ]
    assert {c["gpus"] for c in cases.values() if c["stage"] == "comm"} == {gpus}


def test_the_quick_profile_on_one_h100_runs_every_stage_in_twenty_minutes():
    """A quarter hour, and the serving sweep's five minutes since it measures a capacity."""
    listed = kit_list("quick", DOCTOR)
    skipped, estimates = listed["host"]["skipped"], listed["host"]["estimates"]
    runnable = {c["stage"] for c in listed["cases"] if c["id"] not in skipped}
    assert runnable == {"pretrain", "maxbatch", "finetune", "scaling", "profile", "serve"}  # comm needs 2 GPUs
    assert {
        "pretrain.llama2-7b.z3+o.g1",
        "pretrain.llama2-7b.q.g1",
        "pretrain.llama2-7b.q+r.g1",
        "pretrain.llama2-7b.q+f.g1",
        "finetune.llama2-7b.l.g1",
        "finetune.llama2-7b.ql.g1",
        "serve.llama2-7b.vllm.g1",
        "profile.llama2-7b.base.g1",
        "maxbatch.llama2-7b.q.g1",
    } <= set(estimates)
    assert all(estimate["seconds"] is not None for estimate in estimates.values())
    total = sum(estimate["seconds"] for estimate in estimates.values())
    assert total <= 20 * 60, f"kit list estimates the quick profile on one H100 at {total:.0f} s"
    # the cases without ZeRO's partitioning cannot hold a 7B step's states on one GPU, and say so
    assert estimates["pretrain.llama2-7b.z2.g1"]["basis"].startswith("analytic: predicted OOM")
    # the GPU check (tests/gpu_check.py) runs one of each stage: the cheapest that fits
    from gpu_check import chosen_cases

    chosen = chosen_cases(listed, every=False)
    assert [case.split(".")[0] for case in chosen] == [
        "pretrain",
        "finetune",
        "scaling",
        "maxbatch",
        "profile",
        "serve",
    ]
    assert not any(estimates[case]["basis"].startswith("analytic: predicted OOM") for case in chosen)
    assert len(chosen_cases(listed, every=True)) == len(estimates)


def test_a_fitted_case_is_said_to_be_fitted_in_the_plan(tmp_path):
    done = subprocess.run(
        [*KIT, "list", "--profile", "quick", "--fingerprint", str(DOCTOR)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("pretrain.llama2-7b.q.g1 "))
    assert "1 (fitted: 1 of 8 GPUs)" in line


def test_a_profile_keeps_its_written_counts_without_a_gpu_host():
    assert fitted_gpu_counts("sweep", (1, 2, 4, 8), None) == (1, 2, 4, 8)
    assert fitted_gpu_counts("fixed", (8,), 4) == (8,)
    assert fitted_gpu_counts("host", (8,), 4) == (8,)  # each case is fitted with its model and parameters
    assert fitted_gpu_counts("sweep", (1, 2, 4, 8), 6) == (1, 2, 4, 6)
    smoke = build_plan(load_protocol(), "smoke", host_gpus=4)  # a CPU profile is not fitted
    assert smoke.fitted_to_gpus is None and {c.gpus for c in smoke.cases if c.stage == "comm"} == {2}
    assert all(case.fitted_from is None for case in smoke.cases)


def test_a_claim_about_the_papers_eight_gpu_case_says_this_host_ran_it_fitted(tmp_path):
    """C16 (LoRA about twice QLoRA) on a synthetic one-H100 run (tests/support/paper_size_run.py) of the
    fitted cases: not measured, never counted against the paper or the expectation."""
    from support.paper_size_run import write_run

    from kit.reference.claims import evaluate_claims
    from kit.reference.expectation import expect_claims
    from kit.reference.measured_run import measured_run
    from kit.reference.published import load_reference
    from kit.rundir.directory import RunDir

    plan = build_plan(load_protocol(), "paper", host_gpus=1, gpu_memory_bytes=85520809984)
    path = write_run(
        tmp_path / "h100", plan, gpu_name=H100[0], cases=["finetune.llama2-7b.l.g1", "finetune.llama2-7b.ql.g1"]
    )
    run = RunDir(path)
    assert all(result.status == "ok" for result in run.results())
    measured = measured_run(run.read_info(), run.results())
    reference = load_reference()
    c16 = next(outcome for outcome in evaluate_claims(reference, [measured]) if outcome.id == "C16")
    relation = next(r for r in c16.relations if "llama2-7b" in r.relation)
    assert relation.verdict == "not measured"
    assert "finetune.llama2-7b.l.g8 (run h100 has it fitted: 1 of 8 GPUs as finetune.llama2-7b.l.g1" in relation.finding
    expected = next(e for e in expect_claims(reference, [measured]) if e.id == "C16")
    assert {r.verdict for r in expected.relations} <= {"not measured", "paper verdict", "no expectation"}
