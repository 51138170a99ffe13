"""`kit run --all` as a user runs it, on this CPU machine: killed mid-way, resumed, complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.effective import options_of
from kit.protocol import build_plan, load_protocol
from kit.results import RunDir
from kit.stages import unit_of

pytestmark = pytest.mark.e2e
KIT = [sys.executable, "-m", "kit.cli"]


def finished(run: Path) -> list[Path]:
    return sorted(run.glob("cases/*/result.json"))


def processes_mentioning(text: str) -> list[str]:
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if text in line and "ps -eo" not in line]


def test_run_all_is_killed_resumed_and_completes_every_smoke_case(tmp_path):
    run = tmp_path / "run"
    first = subprocess.Popen([*KIT, "run", "--all", "--out", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while len(finished(run)) < 2:
        assert first.poll() is None, first.stderr.read().decode()
        assert time.monotonic() < deadline, "no two cases finished in 10 minutes"
        time.sleep(0.5)
    os.kill(first.pid, signal.SIGKILL)  # no chance to clean up: the launcher must die with it
    first.wait()
    # The cases the evidence lists are kept; one whose result.json the kill left out of
    # SHA256SUMS (killed between the two) is run again, as nothing vouches for it.
    listed = (run / "SHA256SUMS").read_text()
    before = {path: path.read_bytes() for path in finished(run) if f"  {path.relative_to(run)}\n" in listed}
    assert before, "the evidence lists no finished case"
    for _ in range(60):
        if not processes_mentioning(str(run)):
            break
        time.sleep(0.5)
    assert not processes_mentioning(str(run)), "processes of the killed run are still alive"
    for path in finished(run):
        json.loads(path.read_text())  # every result.json that exists is whole
    assert not list(run.rglob("*.tmp"))

    second = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True)
    assert second.returncode == 0, second.stderr[-3000:]
    assert all(path.read_bytes() == content for path, content in before.items()), "a finished case was redone"

    info = RunDir(run).read_info()
    assert info.status == "finished" and info.resumed_at
    assert (run / "fingerprint.json").is_file() and (run / "fingerprint-after.json").is_file()
    assert info.checks and not info.forced
    plan = build_plan(load_protocol(), "smoke")
    assert info.selected == [c.id for c in plan.cases]
    for case in plan.cases:
        result = RunDir(run).read_result(case.id)
        if "f" in case.method.split("+"):
            assert result.status == "unavailable" and "CUDA" in result.reason
            continue
        assert result.status == "ok", f"{case.id}: {result.reason}"
        if unit_of(case).name == "maxbatch":
            # A search's samples are its trials: its figure is the largest ok micro-batch, and the
            # cap made a real out-of-memory above it (tests/test_maxbatch.py checks the rest).
            trials = {sample.micro_batch: sample.status for sample in result.samples}
            best = int(result.metrics["max_micro_batch"].mean)
            assert trials[best] == "ok" and "oom" in {status for batch, status in trials.items() if batch > best}, trials
            assert all(status != "ok" for batch, status in trials.items() if batch > best), trials
            continue
        # Each kind's headline figure over its runs; the details of comm, profile and serve
        # results are checked in test_comm.py, test_breakdown.py and test_serve.py.
        figure = result.metrics[unit_of(case).headline]
        assert figure.n == case.params.runs == len(result.samples)
        assert figure.mean > 0 and all(value > 0 for value in figure.per_run)
        if case.workload != "train":
            continue
        assert figure.std is not None
        # Each option the method names, as the running engine reported it, in effect.
        assert sorted(result.effective) == sorted(options_of(case.params)), case.id
        assert all(option.in_effect for option in result.effective.values()), case.id
        if case.params.recompute:
            assert "checkpointed layer calls" in result.effective["recompute"].observed, case.id
        for sample in result.samples:
            assert len(sample.ranks) == case.gpus
            assert all(len(rank.step_s) == case.params.measured_steps for rank in sample.ranks)
    check = subprocess.run(["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=run, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    # The report of the real run, rendered beside it (tests/test_report_scale.py reads one back).
    report = subprocess.run([*KIT, "report", str(run), "--compare", "reference"], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (run / "report.html").stat().st_size and (run / "report.pdf").stat().st_size
    html = (run / "report.html").read_text()
    assert "each option in effect, as the running engine reported it" in html
    assert "zero_stage: stage 3" in html and "reserved" in html
    assert info.preflight and all(line["status"] == "ok" for line in info.preflight["lines"])
    assert "Preflight before the first case" in html and "one streamed request" in html
    assert "Duration by stage: estimated before the run, and actual" in html
    # The pre-training and fine-tuning tables and the serving table, read back: each row gives
    # result.json's figures.
    from kit.report.cells import mean_std, method_label

    for case in plan.cases:
        result = RunDir(run).read_result(case.id)
        if result.status != "ok" or case.stage not in ("pretrain", "finetune", "serve"):
            continue
        section = html[html.index(f'<section id="{case.stage}"'):]
        if case.stage == "serve":
            figures = [mean_std(result.metrics[name]) for name in ("output_throughput", "request_throughput", "ttft_median_s")]
            row = (f'<td colspan="1" class="tone-plain">{figures[0]}</td><td colspan="1" class="tone-muted">none'
                   f'<span class="detail">no peak figures for a CPU: no bound computed</span></td>'
                   f'<td colspan="1" class="tone-plain">{figures[1]}</td><td colspan="1" class="tone-plain">{figures[2]}</td>')  # fmt: skip
        else:
            row = (f'<td colspan="1" class="tone-strong">{method_label(case.method)}</td>'
                   f'<td colspan="1" class="tone-plain">{mean_std(result.metrics["tokens_per_s"], "10^3 tokens/s")}</td>'
                   f'<td colspan="1" class="tone-plain">{mean_std(result.metrics["peak_memory_gib"])}</td>')  # fmt: skip
        assert row in section, case.id
    # The verdicts: the smoke profile is not comparable, so every published finding is not applicable.
    from kit.reference import load_reference

    findings = len(load_reference().claims)
    assert f"{findings} published findings of arXiv:2311.03687: none judged" in html
