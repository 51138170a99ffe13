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
    assert estimates["pretrain.llama2-7b.z2.g1"]["basis"].startswith("predicted OOM: 127.4 GiB + 3 GiB margin")
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
    assert not set(chosen) & set(listed["host"]["predicted_failures"])
    assert len(chosen_cases(listed, every=True)) == len(estimates) - len(listed["host"]["predicted_failures"])


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


FOUR_HOSTS = [(1, H100), (4, H100), (1, L40S), (2, L40S)]


def paper_listing(tmp_path: Path, gpus: int, model: tuple[str, int | None]) -> tuple[dict, str]:
    path = DOCTOR if (gpus, model) == (1, H100) else fingerprint_with(gpus, model, tmp_path / "fp.json")
    text = subprocess.run(
        [*KIT, "list", "--profile", "paper", "--fingerprint", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return kit_list("paper", path), text


@pytest.mark.parametrize(("gpus", "model"), FOUR_HOSTS, ids=["h100x1", "h100x4", "l40sx1", "l40sx2"])
def test_no_case_is_listed_as_running_where_the_host_lacks_what_it_needs(tmp_path, gpus, model):
    """The recorded host (125.9 GiB of memory, no docker engine, no flash-attn), with its GPUs as
    recorded or repeated or renamed: every case listed as running fits the GPU with the margin,
    its offloaded states fit host memory, and it needs neither flash-attn nor an image; each other
    one says why with its figures, in the text table as in JSON, counted apart."""
    from kit.host.this_host import host_described_by
    from kit.plan.fit import gpu_memory_margin
    from kit.plan.predictions import predicted_training_memory
    from kit.plan.protocol import plan_for

    listed, text = paper_listing(tmp_path, gpus, model)
    host = listed["host"]
    failures, skipped = host["predicted_failures"], host["skipped"]
    described = host_described_by(DOCTOR if (gpus, model) == (1, H100) else tmp_path / "fp.json")
    capacity = min(described.gpu_memory_bytes)
    for case in plan_for(described, "paper").cases:
        if case.id in skipped or case.id in failures:
            continue
        memory = predicted_training_memory(case).memory
        if memory is not None:
            assert memory.total + gpu_memory_margin(case.gpus) <= capacity, case.id
            assert memory.offloaded_to_host * case.gpus <= described.resources.memory_bytes, case.id
        assert not (case.step and case.step.attention == "flash_attention_2"), case.id
        assert case.method not in ("tgi", "lightllm"), case.id
    kinds = {failure["kind"] for failure in failures.values()}
    assert {"predicted OOM", "host memory", "unavailable"} <= kinds
    counts = host["counts"]
    assert sum(counts.values()) == len(listed["cases"]) and counts["runs"] == len(listed["cases"]) - len(skipped) - len(
        failures
    )
    assert f"{counts['predicted OOM']} predicted OOM" in text.splitlines()[0]
    lines = {line.split()[0]: line for line in text.splitlines()[3:]}
    for case_id, failure in failures.items():
        assert f"{failure['kind']}: {failure['reason']}" in lines[case_id]
        assert host["estimates"][case_id]["basis"].startswith(failure["kind"])


def test_the_figures_a_buyer_reads_on_the_recorded_h100_host(tmp_path):
    listed, text = paper_listing(tmp_path, 1, H100)
    failures = listed["host"]["predicted_failures"]
    assert failures["pretrain.llama2-70b.z3+o.g1"] == {
        "kind": "host memory",
        "reason": "1156 GiB offloaded > 125.9 GiB of host memory",
    }
    assert failures["pretrain.llama2-7b.naive.g1"] == {
        "kind": "predicted OOM",
        "reason": "127.4 GiB + 3 GiB margin > 79.6 GiB GPU (NVML)",
    }
    assert failures["pretrain.llama2-7b.q+f.g1"] == {"kind": "unavailable", "reason": "no flash-attn"}
    assert failures["serve.llama2-7b.tgi.g1"] == {"kind": "unavailable", "reason": "no docker engine for TGI's image"}
    # the 30 s start of each run, not 5 h 33 min of steps that cannot happen
    assert listed["host"]["estimates"]["pretrain.llama2-70b.z3+o.g1"]["seconds"] == 3 * 30


def test_four_h100s_leave_a_margin_for_the_cuda_context_and_nccl(tmp_path):
    """13B z2+r is predicted at 79.0 GiB per GPU: under the 79.6 GiB an H100 has, over it with
    the margin of a case of several GPUs."""
    listed, _ = paper_listing(tmp_path, 4, H100)
    reason = listed["host"]["predicted_failures"]["pretrain.llama2-13b.z2+r.g4"]["reason"]
    assert reason == "79.0 GiB + 4 GiB margin > 79.6 GiB GPU (NVML)"


def test_the_quick_profiles_breakdown_is_predicted_oom_on_one_l40s(tmp_path):
    listed = kit_list("quick", fingerprint_with(1, L40S, tmp_path / "fp.json"))
    failures = listed["host"]["predicted_failures"]
    assert failures["profile.llama2-7b.base.g1"]["reason"] == "52.1 GiB + 3 GiB margin > 45.0 GiB GPU (NVML)"


def test_skip_predicted_oom_skips_every_predicted_failure_and_the_disk_is_judged():
    from dataclasses import replace

    from kit.host.this_host import host_described_by
    from kit.plan.fit import predicted_failure, skip_reason
    from kit.plan.protocol import plan_for

    recorded = host_described_by(DOCTOR)
    cases = {case.id: case for case in plan_for(recorded, "paper").cases}
    offload = cases["pretrain.llama2-70b.z3+o.g1"]
    assert skip_reason(offload, recorded) is None
    assert (
        skip_reason(offload, recorded, skip_predicted_oom=True)
        == "host memory: 1156 GiB offloaded > 125.9 GiB of host memory"
    )
    assert (
        skip_reason(cases["pretrain.llama2-7b.q+f.g1"], recorded, skip_predicted_oom=True)
        == "unavailable: no flash-attn"
    )
    assert skip_reason(offload, recorded, skip_predicted_oom=True, cluster=True) is None  # the nodes' memory, not ours
    # the disk: no figure recorded, none judged; 50 GB free cannot hold a 70B checkpoint (138 GB)
    qlora = cases["finetune.llama2-70b.ql.g1"]
    assert recorded.resources.disk_free_bytes is None and predicted_failure(qlora, recorded) is None
    short = replace(recorded, resources=replace(recorded.resources, disk_free_bytes=50 * 10**9))
    assert predicted_failure(qlora, short).text == "disk: 138 GB checkpoint > 50 GB free"
    # a compiler: DeepSpeed's FusedAdam is built on first use, and cannot be without nvcc
    no_nvcc = replace(recorded, resources=replace(recorded.resources, cuda_compiler=False))
    assert predicted_failure(cases["finetune.llama2-7b.l.g1"], no_nvcc).text == (
        "unavailable: no nvcc to build DeepSpeed's FusedAdam"
    )
    assert predicted_failure(cases["pretrain.llama2-7b.q.g1"], no_nvcc) is None  # its 8-bit AdamW is bitsandbytes'


def test_a_fingerprint_records_the_disk_and_the_compiler_and_this_host_reads_its_own():
    from kit.host.collection import collect
    from kit.host.resources import this_hosts_resources

    fingerprint = collect()
    assert fingerprint.host.disk_free_bytes and fingerprint.host.disk_free_bytes > 0
    mine = this_hosts_resources()
    assert mine.memory_bytes == fingerprint.host.memory_bytes
    assert mine.packages is not None and set(mine.packages) == {"bitsandbytes", "deepspeed", "flash-attn", "vllm"}
    assert isinstance(mine.cuda_compiler, bool) and isinstance(mine.docker_engine, bool)


def test_the_engines_without_a_checkpoint_are_those_the_fit_says():
    from kit.plan.fit import IMAGE_ONLY_ENGINES
    from kit.serve.engines import ENGINES

    assert {name for name, engine in ENGINES.items() if not engine.makes_random_weights} == set(IMAGE_ONLY_ENGINES)


def test_the_quick_plan_counts_its_first_run_work_apart_and_ends_with_what_it_cannot_tell():
    done = subprocess.run(
        [*KIT, "list", "--profile", "quick", "--fingerprint", str(DOCTOR)], capture_output=True, text=True, check=True
    )
    summary, notes = done.stdout.splitlines()[0], done.stdout.split("first-run work, once per host:")[1]
    assert "+ first-run work 1 min 57 s and 2 not estimated)" in summary  # the preflight's 42 s, 7B's checkpoint 75 s
    assert "synthetic checkpoint of llama2-7b written (13.5 GB): 1 min 15 s" in notes
    assert "vLLM's CUDA environment made: ?" in notes
    assert "4 cases need more GPUs than this host's 1 (up to 2)" in notes
    assert "`kit run --skip-predicted-oom` does not attempt them" in notes
    assert "add flash-attn (pip install flash-attn) to run its 4 cases" in notes
    assert "not judged, as not recorded: free disk, a CUDA compiler" in notes
    listed = kit_list("quick", DOCTOR)["host"]
    assert [item["seconds"] and round(item["seconds"]) for item in listed["first_run"]] == [42, 75, None, None]
