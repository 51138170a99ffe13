"""Estimated durations: from earlier runs of a case, else the analytic model on a GPU, else said unknown."""

from __future__ import annotations

import json
import subprocess
import sys

from kit.plan.estimate import ASSUMED_START_S, ENGINE_START_S, Estimate, estimate, remaining_seconds
from kit.plan.protocol import build_plan, load_protocol

KIT = [sys.executable, "-m", "kit.cli"]


def test_a_gpu_case_is_estimated_by_the_analytic_model_and_says_on_what(paper_plan):
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3.g8")
    found = estimate(case, {}, ["NVIDIA A800-SXM4-80GB"] * 8)
    assert found.seconds > case.params.runs * ASSUMED_START_S and "roofline" in found.basis and "A800" in found.basis
    serve = next(c for c in paper_plan.cases if c.id == "serve.llama2-70b.vllm.g8")
    assert estimate(serve, {}, ["NVIDIA A800-SXM4-80GB"] * 8).seconds > ENGINE_START_S


def test_a_4bit_case_is_estimated_and_one_that_cannot_fit_costs_its_start(tmp_path):
    plan = build_plan(load_protocol(), "paper", host_gpus=1, gpu_memory_bytes=81559 * 2**20)
    cases = {case.id: case for case in plan.cases}
    quantised = estimate(cases["scaling.llama2-7b.q.g1.b2"], {}, ["NVIDIA H100 80GB HBM3"], 81559 * 2**20)
    assert quantised.seconds > 3 * ASSUMED_START_S and "roofline" in quantised.basis
    naive = estimate(cases["pretrain.llama2-7b.naive.g1"], {}, ["NVIDIA H100 80GB HBM3"], 81559 * 2**20)
    assert naive == Estimate(
        seconds=3 * ASSUMED_START_S, basis=f"analytic: predicted OOM, {ASSUMED_START_S:.0f} s start per run"
    )


def test_a_cpu_case_is_estimated_by_the_recorded_smoke_run(smoke_plan):
    """Every case of the smoke profile, where no earlier run on this host says better."""
    from kit.plan.recorded_durations import RECORDED_ON

    estimated = [estimate(case, {}, []) for case in smoke_plan.cases]
    assert all(found == Estimate(seconds=found.seconds, basis=RECORDED_ON) for found in estimated)
    assert sum(found.seconds for found in estimated) == 129
    unlisted = smoke_plan.cases[0].model_copy(update={"id": "pretrain.tiny-llama.new.g2"})
    assert estimate(unlisted, {}, []).seconds is None


def test_without_history_or_a_known_gpu_the_estimate_is_unknown(paper_plan):
    case = paper_plan.cases[0]
    assert estimate(case, {}, ["Some Future GPU"] * 8) == Estimate(seconds=None, basis=estimate(case, {}, []).basis)
    assert estimate(case, {case.id: [10.0, 30.0, 20.0]}, []).seconds == case.params.runs * 20.0  # median per run


def test_an_earlier_run_of_a_case_is_scaled_to_the_runs_asked_for(paper_plan, tmp_path):
    """A case made once before and asked for 3 runs now (kit run --runs 3) takes three times as
    long; a max-batch search is one search however many runs are asked."""
    from kit.plan.estimate import run_history
    from kit.plan.protocol import with_runs

    serve = next(c for c in paper_plan.cases if c.id == "serve.llama2-7b.vllm.g8")
    search = next(c for c in paper_plan.cases if c.stage == "maxbatch")
    for case in (serve, search):
        folder = tmp_path / "earlier" / "cases" / case.id
        folder.mkdir(parents=True)
        result = {"case_id": case.id, "status": "ok", "case": case.model_dump(mode="json")}
        result |= {"started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:10:00+00:00"}
        (folder / "result.json").write_text(json.dumps(result))
    history = run_history(tmp_path)
    assert history == {serve.id: [600.0], search.id: [600.0]}
    raised = {case.id: case for case in with_runs(paper_plan, 3).cases}
    assert raised[serve.id].params.runs == 3 and raised[search.id].params.runs == search.params.runs
    found = estimate(raised[serve.id], history, [])
    assert found.seconds == 1800.0 and found.basis == "median of 1 earlier run(s) of this case, × 3 runs"
    assert estimate(raised[search.id], history, []).seconds == 600.0


def test_runs_raises_every_case_to_at_least_that_many_and_keeps_those_above(paper_plan):
    from kit.plan.protocol import with_runs

    raised = with_runs(paper_plan, 2)
    for before, after in zip(paper_plan.cases, raised.cases):
        expected = before.params.runs if before.max_batch_search else max(before.params.runs, 2)
        assert (after.id, after.params.runs) == (before.id, expected)


def test_the_eta_is_corrected_by_how_finished_cases_compared():
    predicted = {c: Estimate(seconds=100, basis="x") for c in "abcd"}
    assert remaining_seconds(["c", "d"], predicted, {}) == 200
    assert remaining_seconds(["c", "d"], predicted, {"a": 150, "b": 150}) == 300  # the cases ran 1.5x longer
    assert remaining_seconds(["c"], {"c": Estimate(seconds=None, basis="?")}, {}) is None


def test_kit_list_estimates_a_case_from_an_earlier_run_of_it(tmp_path):
    done = subprocess.run(
        [*KIT, "run", "--case", "comm.all_reduce.g2", "--no-preflight", "--skip-predicted-oom"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    listed = subprocess.run([*KIT, "list", "--json"], cwd=tmp_path, capture_output=True, text=True)
    estimates = json.loads(listed.stdout)["host"]["estimates"]
    assert estimates["comm.all_reduce.g2"]["basis"] == "median of 1 earlier run(s) of this case"
    assert 0 < estimates["comm.all_reduce.g2"]["seconds"] < 300
    assert estimates["comm.reduce.g2"]["basis"].startswith("a recorded smoke run")
    info = json.loads(next(tmp_path.glob("runs/*/run.json")).read_text())
    assert info["no_preflight"] and info["skip_predicted_oom"] and "comm.all_reduce.g2" in info["estimates"]


def test_stray_results_and_a_clock_set_back_give_no_history_and_no_traceback(tmp_path):
    """`kit list` reads runs/*/cases/*/result.json: one holding a list, null or a string, one
    nested past any record, and one whose end the clock put before its start give no estimate."""
    cases = tmp_path / "runs" / "r1" / "cases"
    stray = {"a": "[]", "b": "null", "c": '"text"', "d": '{"a": ' * 5000 + "1" + "}" * 5000}
    for name, text in stray.items():
        (cases / name).mkdir(parents=True)
        (cases / name / "result.json").write_text(text)
    (cases / "comm.all_reduce.g2").mkdir()
    (cases / "comm.all_reduce.g2" / "result.json").write_text(
        json.dumps(
            {
                "case_id": "comm.all_reduce.g2",
                "status": "ok",
                "started_at": "2026-01-01T03:00:00+00:00",
                "finished_at": "2026-01-01T02:00:00+00:00",  # an hour before it started
            }
        )
    )
    listed = subprocess.run([*KIT, "list", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-2000:]
    # no history from any of them: the estimate is the recorded smoke run's (kit.plan.recorded_durations)
    assert json.loads(listed.stdout)["host"]["estimates"]["comm.all_reduce.g2"]["basis"].startswith("a recorded smoke")
