"""The harness turns every way a process can end into a recorded sample."""

from __future__ import annotations

import sys
import types

import pytest

from kit.rundir.schema import CalibrationDetails, CopyTiming, MatmulTiming, TrainDetails
from kit.workloads import harness

pytest.importorskip("torch")


class CountingWorkload:
    tokens_per_step = 700

    def __init__(self):
        self.steps = 0
        self.details = TrainDetails(world_size=1)

    def step(self):
        self.steps += 1

    def close(self):
        pass


def use_workload(monkeypatch, build):
    module = types.ModuleType("kit_test_workload")
    module.WORKLOAD = harness.SteppedWorkload(build)
    monkeypatch.setitem(sys.modules, "kit_test_workload", module)
    monkeypatch.setitem(harness.WORKLOADS, "train", "kit_test_workload")


def case_of(smoke_plan):
    return next(c for c in smoke_plan.cases if c.id == "pretrain.tiny-llama.naive.g2")


def test_warm_up_steps_are_run_but_not_recorded(monkeypatch, smoke_plan, tmp_path):
    workload = CountingWorkload()
    use_workload(monkeypatch, lambda case: workload)
    case = case_of(smoke_plan)
    sample, _ = harness.run_process(case, tmp_path)
    assert sample.status == "ok"
    assert workload.steps == case.params.warmup_steps + case.params.measured_steps
    assert len(sample.step_s) == case.params.measured_steps and len(sample.warmup_step_s) == case.params.warmup_steps
    assert sample.tokens_per_step == 700 and sample.peak_memory.host_rss_bytes > 0
    assert "torch" in sample.versions


def test_a_cpu_sample_says_why_it_has_no_device_telemetry(monkeypatch, smoke_plan, tmp_path):
    use_workload(monkeypatch, lambda case: CountingWorkload())
    sample, _ = harness.run_process(case_of(smoke_plan), tmp_path)
    assert sample.telemetry.source == "nvml" and "CPU" in sample.telemetry.unavailable
    assert sample.telemetry.energy_j is None and sample.telemetry.peak_used_bytes is None


@pytest.mark.parametrize(
    "error, status",
    [
        (MemoryError("cannot allocate"), "oom"),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom"),
        (ValueError("shapes do not match"), "error"),
        (harness.Unavailable("flash-attn is not installed"), "unavailable"),
        # g++ short of memory while building an op (its own words) is not the case running out
        (harness.SetupFailed("cc1plus: out of memory; virtual memory exhausted: Cannot allocate memory"), "error"),
    ],
)
def test_failures_become_statuses_with_their_reason(monkeypatch, smoke_plan, error, status, tmp_path):
    def build(case):
        raise error

    use_workload(monkeypatch, build)
    sample, workload = harness.run_process(case_of(smoke_plan), tmp_path)
    assert (sample.status, workload) == (status, None)
    assert str(error) in sample.reason


def test_a_self_timing_workload_returns_its_details_and_telemetry_as_the_sample(monkeypatch, smoke_plan, tmp_path):
    module = types.ModuleType("kit_test_measure")
    timed = CalibrationDetails(
        matmul=[MatmulTiming(m=2, k=2, n=2, dtype="fp32", iterations=1, repeat_s=[1e-6])],
        copies=[CopyTiming(bytes=8, iterations=1, repeat_s=[1.5e-6])],
    )
    module.WORKLOAD = harness.SelfTimedWorkload(
        lambda case, device, out_dir: (timed, device.telemetry_sampler().stop())
    )
    monkeypatch.setitem(sys.modules, "kit_test_measure", module)
    monkeypatch.setitem(harness.WORKLOADS, "train", "kit_test_measure")
    sample, workload = harness.run_process(case_of(smoke_plan), tmp_path)
    assert (sample.status, workload) == ("ok", None)
    assert sample.details == timed and sample.step_s == []
    assert "CPU" in sample.telemetry.unavailable  # what the workload's own sampler said


@pytest.mark.e2e
def test_a_real_out_of_memory_on_cpu_is_recorded_as_oom(smoke_plan, tmp_path):
    """The real training workload, one process, building Llama2-7B in bf16 (13 GB of weights)
    under a 3 GiB address-space limit (a quarter of the way in): torch's own allocator refuses,
    and the sample says oom."""
    import json
    import os
    import resource
    import socket
    import subprocess
    import sys

    from kit.plan.protocol import load_protocol
    from kit.rundir.directory import atomic_write_model

    case = next(c for c in smoke_plan.cases if c.id == "pretrain.tiny-llama.naive.g2")
    big = case.model_copy(
        update={
            "id": "pretrain.llama2-7b.naive.g1",
            "gpus": 1,
            "model": "llama2-7b",
            "shape": load_protocol().models["llama2-7b"],
        }
    )
    atomic_write_model(tmp_path / "case.json", big)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    limit = 3 * 2**30
    done = subprocess.run(
        [sys.executable, "-m", "kit.workloads", "--case", str(tmp_path / "case.json"), "--out", str(tmp_path / "out")],
        env=env,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    sample = json.loads((tmp_path / "out" / "rank-0.json").read_text())
    assert sample["status"] == "oom", done.stderr[-2000:]
    assert "can't allocate memory" in sample["reason"] and done.returncode != 0
