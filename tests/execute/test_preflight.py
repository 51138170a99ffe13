"""Preflight: every image the plan needs, checked in minutes by a miniature of its stages."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from support import FIXTURES

from kit.execute.preflight import (
    all_gpu_all_reduce,
    gpus_seen_differ,
    miniature,
    representatives,
)
from kit.rundir.schema import Preflight, PreflightLine

KIT = [sys.executable, "-m", "kit.cli"]


def test_a_miniature_keeps_what_the_case_exercises_and_shrinks_what_takes_time(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-70b.z3+o+r.g8")
    small = miniature(case)
    assert (small.stage, small.method, small.image, small.device, small.gpus) == (
        case.stage,
        case.method,
        case.image,
        "cuda",
        8,
    )
    assert (small.params.zero_stage, small.params.offload, small.params.recompute) == (3, True, True)
    assert small.model == "tiny-llama" and small.shape.num_layers == 2
    assert (small.params.runs, small.params.warmup_steps, small.params.measured_steps) == (1, 0, 1)
    serve = miniature(next(c for c in paper_plan.cases if c.id == "serve.llama2-7b.tgi.g8"))
    assert (serve.params.engine, serve.params.prompts, serve.params.max_output_tokens) == ("tgi", 1, 8)
    comm = miniature(next(c for c in paper_plan.cases if c.id == "comm.all_reduce.g8"))
    assert comm.params.min_bytes == comm.params.max_bytes == 1024 and comm.params.backend == "nccl-tests"


def test_one_representative_per_image_and_workload_never_one_unavailable_by_design(smoke_plan, paper_plan):
    picked = representatives(smoke_plan.cases)
    assert len({(c.image, c.workload) for c in picked}) == len(picked)
    assert {c.workload for c in picked} == {c.workload for c in smoke_plan.cases}
    assert [c.stage for c in picked] == ["pretrain", "comm", "profile", "serve"]
    assert not any("f" in c.method.split("+") for c in picked)  # FlashAttention is unavailable on a CPU
    engines = {c.params.engine for c in representatives(paper_plan.cases) if c.stage == "serve"}
    assert engines == {"vllm", "tgi", "lightllm"}  # each engine has its own image


def test_a_failed_line_fails_the_cases_of_its_image_only():
    lines = [
        PreflightLine(image="host", check="environment (kit doctor)", status="fail", detail="x", seconds=0),
        PreflightLine(
            image="serve-tgi",
            check="image present",
            status="fail",
            detail="absent",
            hint="kit images pull serve-tgi",
            seconds=0,
        ),
        PreflightLine(image="smoke", check="pretrain: one training step", status="ok", detail="ran", seconds=1),
    ]
    failed = Preflight(lines=lines, seconds=1).failed_images()
    assert list(failed) == ["serve-tgi"] and "image present failed: absent" in failed["serve-tgi"]


def test_a_gpu_seen_inside_must_be_one_the_host_has():
    """nccl-tests' own device lines (a real RTX 5090 run, tests/fixtures/nccl_tests) against the
    host's NVML names: the same GPU passes, another model or none fails naming both."""

    from kit.execute import nccl_tests
    from kit.plan.protocol import build_plan, load_protocol
    from kit.rundir.schema import RunSample

    case = next(c for c in build_plan(load_protocol(), "paper").cases if c.stage == "comm")
    output = (FIXTURES / "nccl_tests/rtx5090-alltoall-single-size.txt").read_text()
    rank = nccl_tests.rank_sample(case, ["alltoall_perf"], output, "", 0, "out.txt", "t0", "t1", None)
    sample = RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[rank])
    assert gpus_seen_differ(sample, ["NVIDIA GeForce RTX 5090"] * 2) is None
    differ = gpus_seen_differ(sample, ["NVIDIA H100 80GB HBM3"] * 8)
    assert differ == "the processes saw NVIDIA GeForce RTX 5090; the host has NVIDIA H100 80GB HBM3"
    assert gpus_seen_differ(sample, []).endswith("the host has no GPU")


def test_the_all_gpu_all_reduce_is_a_comm_case_the_real_workload_runs(paper_plan, tmp_path):
    """The training image's all-reduce across every GPU, as the preflight builds it for 16 GPUs,
    run for real by the comm workload: on this CPU over gloo in 2 processes (NCCL on a GPU)."""
    from kit.execute import local
    from kit.rundir.directory import atomic_write_model

    train = next(c for c in paper_plan.cases if c.stage == "pretrain")
    check = all_gpu_all_reduce(train, 16)
    assert (check.image, check.gpus, check.params.backend, check.params.collective) == (
        "train",
        16,
        "torch",
        "all_reduce",
    )
    small = miniature(check).model_copy(update={"gpus": 2, "device": "cpu"})
    atomic_write_model(tmp_path / "case.json", small)
    with (tmp_path / "log.txt").open("w") as log:
        sample = local.LocalExecutor().run_once(small, tmp_path, 1, log)
    assert sample.status == "ok", (tmp_path / "log.txt").read_text()[-2000:]
    assert [rank.details.rows[0].size_bytes for rank in sample.ranks] == [1024, 1024]


@pytest.mark.e2e
def test_kit_preflight_passes_on_this_cpu_host_and_prints_its_table():
    done = subprocess.run(
        [*KIT, "preflight", "--executor", "local", "--json"], capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout)
    checks = {line["check"].split(":")[0] for line in result["lines"]}
    assert {
        "environment (kit doctor)",
        "pretrain",
        "profile",
        "comm",
        "serve",
        "calibration",
        "silent data corruption",
    } <= checks
    assert all(line["status"] == "ok" for line in result["lines"]) and result["seconds"] < 300
    corruption = result["silent_data_corruption"]  # the same training on two CPU ranks, compared bit for bit
    assert corruption["status"] == "pass" and [device["rank"] for device in corruption["devices"]] == [0, 1]
    calibration = result["calibration"]  # what this CPU achieved, measured after the training image passed
    assert (
        calibration["matmul"]["value"] > 0
        and calibration["memory_copy"]["value"] > 0
        and calibration["device"] == "cpu"
    )


@pytest.mark.docker
def test_a_broken_and_a_missing_image_fail_their_lines_and_the_other_stages_run(manifests_copy, tmp_path):
    from support.docker_engine import BASE_IMAGE, engine_or_skip, smoke_image_or_skip

    smoke_image_or_skip()
    client = engine_or_skip()
    context = tmp_path / "broken"
    context.mkdir()
    (context / "Dockerfile").write_text(f'FROM {BASE_IMAGE}\nENTRYPOINT ["sh", "-c", "echo cannot start; exit 1"]\n')
    client.images.build(path=str(context), tag="kit-test/broken-engine:1", rm=True)
    lock_file = manifests_copy / "images.lock.yaml"
    lock = yaml.safe_load(lock_file.read_text())
    lock["images"]["serve-vllm"].update(
        reference="kit-test/broken-engine:1", digest=None, devices=["cpu"], note="broken on purpose"
    )
    lock["images"]["serve-tgi"].update(
        reference="kit-test/absent-engine:1", digest=None, devices=["cpu"], note="absent on purpose"
    )
    lock_file.write_text(yaml.safe_dump(lock, sort_keys=False))
    protocol_file = manifests_copy / "protocol.yaml"
    protocol = yaml.safe_load(protocol_file.read_text())
    smoke = protocol["profiles"]["smoke"]["stages"]
    smoke["serve"]["methods"] = ["vllm", "tgi"]
    smoke["serve"]["params"].update(dtype="bf16", ready_timeout_s=60)
    smoke["comm"]["methods"] = ["all_reduce"]
    protocol_file.write_text(yaml.safe_dump(protocol, sort_keys=False))

    run = tmp_path / "run"
    done = subprocess.run(
        [
            *KIT,
            "run",
            "--profile",
            "smoke",
            "--stage",
            "serve",
            "--stage",
            "comm",
            "--executor",
            "docker",
            "--out",
            str(run),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # the serve cases end `error`
    lines = json.loads((run / "run.json").read_text())["preflight"]["lines"]
    by_image = {}
    for line in lines:
        by_image.setdefault(line["image"], []).append(line)
    tgi = by_image["serve-tgi"][0]
    assert tgi["status"] == "fail" and tgi["check"] == "image present" and tgi["hint"] == "kit images pull serve-tgi"
    vllm = by_image["serve-vllm"][-1]
    assert vllm["status"] == "fail" and "before it was ready" in vllm["detail"] and "engine.log" in vllm["hint"]
    assert all(line["status"] == "ok" for line in by_image["smoke"])
    for engine in ("vllm", "tgi"):
        result = json.loads((run / f"cases/serve.tiny-llama.{engine}.g1/result.json").read_text())
        assert result["status"] == "error" and result["reason"].startswith("preflight:") and not result["samples"]
    comm = json.loads((run / "cases/comm.all_reduce.g2/result.json").read_text())
    assert comm["status"] == "ok" and comm["executor"] == "docker"
