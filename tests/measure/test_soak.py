"""Sustained against first minutes (kit run --soak, kit/plan/soak.py, kit/measure/soak.py), and the
preflight's calibration that lands in the run's fingerprint (kit/measure/calibration.py).

The end-to-end test runs for real on this CPU, with a tiny duration, the smoke profile's first
training case (DeepSpeed over gloo in 2 processes) through its preflight, which measures what
this CPU achieves. Serving is left out of it: vLLM's start (20 to 200 s on this machine) would
be most of the test; the serving soak is the same burst repeated (kit.serve.session.soak_bursts).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from kit.host.fingerprint import Fingerprint
from kit.host.this_host import Host
from kit.measure.calibration import calibration_of
from kit.plan.protocol import Case, build_plan, load_protocol
from kit.plan.soak import soaked, with_soak
from kit.rundir.schema import RankSample, Result, RunSample

KIT = [sys.executable, "-m", "kit.cli"]


def test_a_soak_repeats_the_first_training_and_serving_case_the_host_can_run(smoke_plan):
    plan, added = with_soak(smoke_plan, Host(gpu_names=[], gpu_memory_bytes=[]), 0.5)
    assert [case.id for case in added] == ["soak.tiny-llama.naive.g2", "soak.tiny-llama.vllm.g1"]
    assert plan.cases[-2:] == added and len(plan.cases) == len(smoke_plan.cases) + 2
    training = added[0]
    twin = next(case for case in smoke_plan.cases if case.id == "pretrain.tiny-llama.naive.g2")
    assert (training.stage, training.params.runs, training.params.launch) == ("soak", 1, "per_run")
    assert (training.params.soak.seconds, training.params.soak.window_s) == (30, 3)  # ten windows at least
    assert training.params.timeout_s == twin.params.timeout_s + 30
    assert (
        training.params.model_copy(update={"soak": None, "runs": 3, "launch": "shared", "timeout_s": 300})
        == twin.params
    )
    assert (
        with_soak(smoke_plan, Host(gpu_names=[], gpu_memory_bytes=[]), 90)[1][1].params.soak.window_s == 60
    )  # a minute at most


def test_a_serving_soak_fires_its_bursts_alone_without_the_cases_sweep_rates_prefixes_or_start_up(smoke_plan):
    _, (_, serving) = with_soak(smoke_plan, Host(gpu_names=[], gpu_memory_bytes=[]), 0.5)
    twin = next(case for case in smoke_plan.cases if case.id == "serve.tiny-llama.vllm.g1")
    own = ("sweep", "rates", "prefix", "startup")
    assert all(getattr(twin.params, name) for name in own) and not any(getattr(serving.params, name) for name in own)
    restored = {name: getattr(twin.params, name) for name in own}
    assert (
        serving.params.model_copy(update={"soak": None, "timeout_s": twin.params.timeout_s, **restored}) == twin.params
    )


def test_on_one_gpu_the_soak_skips_what_the_memory_model_says_cannot_fit():
    h100 = Host(gpu_names=["NVIDIA H100 80GB HBM3"], gpu_memory_bytes=[80 * 2**30])
    plan = build_plan(load_protocol(), "paper", host_gpus=1, gpu_memory_bytes=80 * 2**30)
    training, serving = soaked(plan, h100)
    first = next(case for case in plan.cases if case.stage == "pretrain")
    assert (
        training.stage == "pretrain" and training.id != first.id
    )  # 7B without ZeRO's partitioning does not fit one GPU
    assert serving.params.kind == "serve" and serving.gpus == 1


@pytest.mark.e2e
def test_a_soak_of_the_smoke_training_case_with_its_preflight_runs_for_real_and_is_reported(tmp_path):
    run = tmp_path / "run"
    done = subprocess.run(
        [*KIT, "run", "--soak", "0.1", "--case", "soak.tiny-llama.naive.g2", "--executor", "local", "--out", str(run)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    # The preflight measured this CPU, and the fingerprint of the run holds it with how.
    calibration = Fingerprint.model_validate_json((run / "fingerprint.json").read_text()).calibration
    assert calibration is not None and (calibration.device, calibration.matmul_dtype) == ("cpu", "fp32")
    assert (
        calibration.matmul.value > 0 and calibration.memory_copy.value > 0 and "torch.matmul" in calibration.matmul.how
    )
    assert calibration.raw_samples == "preflight/calibrate.g1/runs/1"
    case = Case.model_validate_json((run / "preflight/calibrate.g1/case.json").read_text())
    rank = RankSample.model_validate_json((run / calibration.raw_samples / "rank-0.json").read_text())
    again = calibration_of(
        case,
        RunSample(index=1, status="ok", exit_code=0, wall_s=calibration.seconds, ranks=[rank]),
        calibration.raw_samples,
    )
    assert again == calibration  # every figure is its raw times'

    # The soak: windows one after another for about 6 s, each with its steps.
    result = Result.model_validate_json((run / "cases/soak.tiny-llama.naive.g2/result.json").read_text())
    assert result.status == "ok", result.reason
    windows = result.samples[0].ranks[0].windows
    assert len(windows) >= 2 and all(window.step_s and window.tokens for window in windows)
    assert windows[-1].started_s + windows[-1].seconds >= 6 > windows[-1].started_s
    assert [len(w.step_s) for w in windows] == [
        len(w.step_s) for w in result.samples[0].ranks[1].windows
    ]  # ranks in step
    ratio = result.metrics["sustained_ratio"].mean
    assert ratio == pytest.approx(result.metrics["throughput_last"].mean / result.metrics["throughput_first"].mean)

    done = subprocess.run([*KIT, "report", str(run), "--format", "html"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    html = (run / "report.html").read_text()
    soak = html[html.index('id="soak"') :]
    assert "Sustained load over time" in soak and "<svg" in soak[: soak.index("Sustained load: the first window")]
    assert "Calibration" in html and "fp32 matmul" in html and "GFLOPS" in html
