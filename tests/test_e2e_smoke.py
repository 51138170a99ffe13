"""`kit run --all` as a user runs it, on this CPU machine: complete, its report true to its results;
and a run killed mid-way, resumed."""

from __future__ import annotations

import subprocess

import pytest
from support.interrupted import KIT, killed_and_resumed

from kit.measure.effective import options_of
from kit.measure.registry import unit_of
from kit.plan.protocol import build_plan, load_protocol
from kit.rundir.directory import RunDir

pytestmark = pytest.mark.e2e


def test_a_killed_run_resumes_keeping_its_finished_cases(tmp_path):
    """kill -9 of `kit run` once two cases are in the evidence (the comm stage: the quickest
    cases), then `kit run --resume`: the kept cases are not redone, the rest are run."""
    killed = killed_and_resumed(tmp_path / "run", ["--profile", "smoke", "--stage", "comm"])
    assert killed.kept, "the evidence lists no finished case"
    assert not killed.left_alive, "processes of the killed run are still alive"
    assert not killed.torn  # every file the kill left is whole or absent
    assert killed.resumed.returncode == 0, killed.resumed.stderr[-3000:]
    # a write the kill cut short may leave its temporary file (kit.files.atomic); the resume removes it
    assert not list(killed.path.rglob("*.tmp")), killed.temporary
    assert all(path.read_bytes() == content for path, content in killed.kept.items()), "a finished case was redone"
    run = RunDir(killed.path)
    info = run.read_info()
    assert info.status == "finished" and info.resumed_at
    assert all(run.read_result(case).status == "ok" for case in info.selected), info.selected
    check = subprocess.run(
        ["sha256sum", "--check", "--quiet", "SHA256SUMS"], cwd=killed.path, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout


def test_run_all_completes_every_smoke_case(real_smoke_run):
    run = real_smoke_run
    info = RunDir(run).read_info()
    assert info.status == "finished"
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
            # cap made a real out-of-memory above it (tests/measure/test_maxbatch.py checks the rest).
            trials = {sample.micro_batch: sample.status for sample in result.samples}
            best = int(result.metrics["max_micro_batch"].mean)
            assert trials[best] == "ok" and "oom" in {status for batch, status in trials.items() if batch > best}, (
                trials
            )
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
    # The report of the real run, rendered beside it (tests/report/test_report_scale.py reads one back).
    report = subprocess.run([*KIT, "report", str(run), "--compare", "reference"], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (run / "report.html").stat().st_size and (run / "report.pdf").stat().st_size
    html = (run / "report.html").read_text()
    assert "each option in effect, as the running engine reported it" in html
    assert "zero_stage: stage 3" in html and "reserved" in html
    assert info.preflight and all(line.status == "ok" for line in info.preflight.lines)
    assert "Preflight before the first case" in html and "one streamed request" in html
    assert "Duration by stage: estimated before the run, and actual" in html
    # The pre-training and fine-tuning tables and the serving table, read back: each row gives
    # result.json's figures.
    from kit.report.cells import mean_std, method_label

    for case in plan.cases:
        result = RunDir(run).read_result(case.id)
        if result.status != "ok" or case.stage not in ("pretrain", "finetune", "serve"):
            continue
        section = html[html.index(f'<section id="{case.stage}"') :]
        if case.stage == "serve":
            figures = [
                mean_std(result.metrics[name]) for name in ("output_throughput", "request_throughput", "ttft_median_s")
            ]
            row = (
                f'<td colspan="1" class="tone-plain">{figures[0]}</td><td colspan="1" class="tone-muted">none'
                f'<span class="detail">no peak figures for a CPU: no bound computed</span></td>'
                f'<td colspan="1" class="tone-plain">{figures[1]}</td><td colspan="1" class="tone-plain">{figures[2]}</td>'
            )
        else:
            row = (
                f'<td colspan="1" class="tone-strong">{method_label(case.method)}</td>'
                f'<td colspan="1" class="tone-plain">{mean_std(result.metrics["tokens_per_s"], "10^3 tokens/s")}</td>'
                f'<td colspan="1" class="tone-plain">{mean_std(result.metrics["peak_memory_gib"])}</td>'
            )
        assert row in section, case.id
    # The verdicts: the smoke profile is not comparable, so every published finding is not applicable.
    from kit.reference.published import load_reference

    findings = len(load_reference().claims)
    assert f"{findings} published findings of arXiv:2311.03687: none judged" in html
