"""The max-batch search (paper Table IV): the trials' order as pure logic, then the smoke case for
real, under a data cap that makes a real out-of-memory bound it, in this Python and in docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kit.measure.maxbatch import next_trial, outcome, predicted_start, search_cap, trial_case
from kit.plan.predictions import predicted_training_memory
from kit.rundir.schema import RunSample

SMOKE_CASE = "maxbatch.tiny-llama.naive.g1"


def walk(boundary: int, start: int, largest: int = 4096, max_trials: int = 40) -> list[tuple[int, str]]:
    """The trials the search makes on a device where micro-batches up to `boundary` fit."""
    trials: list[tuple[int, str]] = []
    while len(trials) < max_trials and (batch := next_trial(trials, start, largest)) is not None:
        trials.append((batch, "ok" if batch <= boundary else "oom"))
    return trials


def test_the_search_doubles_until_out_of_memory_then_bisects_to_the_boundary():
    assert walk(29, 16) == [(16, "ok"), (32, "oom"), (24, "ok"), (28, "ok"), (30, "oom"), (29, "ok")]
    assert walk(5, 1) == [(1, "ok"), (2, "ok"), (4, "ok"), (8, "oom"), (6, "oom"), (5, "ok")]


def test_a_start_that_does_not_fit_bisects_downwards():
    assert walk(3, 16) == [(16, "oom"), (8, "oom"), (4, "oom"), (2, "ok"), (3, "ok")]
    assert walk(0, 4) == [(4, "oom"), (2, "oom"), (1, "oom")]  # nothing fits


def test_the_search_stops_at_its_largest_and_at_a_trial_that_says_nothing_about_memory():
    assert walk(10_000, 512, largest=2048) == [(512, "ok"), (1024, "ok"), (2048, "ok")]
    assert next_trial([(16, "ok"), (32, "timeout")], 16, 4096) is None


def trials(case, *pairs) -> list[RunSample]:
    return [
        RunSample(
            index=i,
            status=status,
            reason=None if status == "ok" else f"{status} here",
            exit_code=0,
            wall_s=1.0,
            ranks=[],
            micro_batch=batch,
        )
        for i, (batch, status) in enumerate(pairs, 1)
    ]


def test_the_case_is_ok_once_a_micro_batch_ran_and_a_capped_search_is_a_lower_bound(smoke_plan):
    case = next(c for c in smoke_plan.cases if c.id == SMOKE_CASE)  # max_trials 8, largest 4096
    found = trials(case, (16, "ok"), (32, "oom"), (24, "ok"), (25, "oom"))
    assert outcome(case, found) == ("ok", None) and search_cap(case, found) is None
    cut_short = trials(case, *walk(1000, 16, max_trials=8))  # 16, 32, ... 512 ok, 1024 oom, 768 ok
    assert outcome(case, cut_short) == ("ok", None)
    assert search_cap(case, cut_short) == "search cap: 8 trials (max_trials); 1024 ran out of memory"
    never_out = trials(case, (1024, "ok"), (2048, "ok"), (4096, "ok"))
    assert search_cap(case, never_out) == "search cap: micro-batch 4096, the largest it tries"
    status, reason = outcome(case, trials(case, (16, "oom"), (8, "oom"), (4, "oom"), (2, "oom"), (1, "oom")))
    assert status == "oom" and reason.startswith("micro-batch 16 already runs out of memory")
    status, reason = outcome(case, trials(case, (16, "ok"), (32, "timeout")))
    assert status == "timeout" and reason.startswith("trial 2 (micro-batch 32) ended timeout")


def test_on_a_gpu_the_search_starts_where_the_memory_model_says_the_batch_still_fits(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "maxbatch.llama2-7b.z3.g8")
    device = 80e9
    start = predicted_start(case, device)
    assert start > 1 and predicted_training_memory(trial_case(case, start)).memory.total <= device
    assert predicted_training_memory(trial_case(case, start * 2)).memory.total > device
    assert predicted_start(case, None) == 1  # no device memory to predict against


def test_a_memory_cap_on_a_gpu_profile_is_refused(tmp_path):
    import yaml

    from kit.manifest import ManifestError, manifests_dir
    from kit.plan.protocol import load_protocol

    data = yaml.safe_load((manifests_dir() / "protocol.yaml").read_text())
    data["profiles"]["quick"]["stages"]["pretrain"]["params"]["memory_cap_gib"] = 2
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ManifestError, match="memory_cap_gib: a GPU case is bounded by its GPU's memory"):
        load_protocol(tmp_path / "protocol.yaml")


def run_smoke_case(run, executor: str) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit.cli",
            "run",
            "--profile",
            "smoke",
            "--case",
            SMOKE_CASE,
            "--executor",
            executor,
            "--no-preflight",
            "--out",
            str(run),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((run / "cases" / SMOKE_CASE / "result.json").read_text())


def assert_found_its_boundary(run, result: dict, out) -> int:
    """Every trial a real launch at its micro-batch; the largest that ran is the result and the
    next one up ran out of memory for real (torch's allocator under the data cap)."""
    assert result["status"] == "ok", result["reason"]
    samples = result["samples"]
    ran = {s["micro_batch"] for s in samples if s["status"] == "ok"}
    best = max(ran)
    beyond = next(s for s in samples if s["micro_batch"] == best + 1)
    assert beyond["status"] == "oom" and "can't allocate memory" in beyond["reason"]
    assert result["metrics"]["max_micro_batch"]["mean"] == best and result["metrics"]["tokens_per_s"]["mean"] > 0
    case_dir = run / "cases" / SMOKE_CASE
    for sample in samples:
        asked = json.loads((case_dir / "runs" / str(sample["index"]) / "case.json").read_text())
        assert asked["params"]["micro_batch"] == sample["micro_batch"] and asked["params"]["max_batch_search"] is None
    assert json.loads((case_dir / "case.json").read_text())["params"]["max_batch_search"] is not None
    report = subprocess.run(
        [sys.executable, "-m", "kit.cli", "report", str(run), "--format", "html", "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert report.returncode == 0, report.stderr[-2000:]  # the report recomputes the figures from the rank files
    html = (out / "report.html").read_text()
    assert "Table IV: the largest micro-batch per method" in html and f"{best} ok" in html
    return best


@pytest.mark.e2e
def test_the_smoke_search_finds_its_boundary_under_a_data_cap(real_smoke_run, tmp_path):
    result = json.loads((real_smoke_run / "cases" / SMOKE_CASE / "result.json").read_text())
    assert_found_its_boundary(real_smoke_run, result, tmp_path)


@pytest.mark.docker
def test_the_smoke_search_finds_its_boundary_in_its_container(tmp_path):
    from support.docker_engine import smoke_image_or_skip

    smoke_image_or_skip()
    result = run_smoke_case(tmp_path / "run", "docker")
    assert all(s["container"]["image"] for s in result["samples"])
    assert_found_its_boundary(tmp_path / "run", result, tmp_path)
