"""More runs of a case until its interval is narrow (kit.execute.narrowing): the loop's rule, on the
runs a real H200 recorded (tests/fixtures/gpu_results, SOURCE), then `kit run --runs-for SPEC` as a
user runs it, on this CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import FIXTURES

from kit.execute.narrowing import RepetitionBudget, headline_values, narrowed
from kit.measure.interval import relative_halfwidth
from kit.plan.protocol import Repetition
from kit.rundir.schema import Result, RunSample

RECORDED = FIXTURES / "gpu_results" / "h200x1-scaling.llama2-7b.q.g1.b2.json"


@pytest.fixture(scope="module")
def recorded() -> Result:
    """Three real runs at 4614, 4462 and 3970 tokens/s: ± 19 % at 95 %, too wide to decide a 95 % line."""
    return Result.model_validate_json(RECORDED.read_text())


def replaying(samples: list[RunSample], launched: list[list[int]]):
    """A launch that makes each run asked for a copy of a recorded run in turn, as numbered."""

    def launch(indices: list[int]) -> list[RunSample]:
        launched.append(indices)
        return [samples[(index - 1) % len(samples)].model_copy(update={"index": index}) for index in indices]

    return launch


def budget(minutes: float = 60, most: int = 12, halfwidth: float = 0.04, cases: int = 1) -> RepetitionBudget:
    return RepetitionBudget(Repetition(halfwidth=halfwidth, max_runs=most, time_cap_minutes=minutes), 0.0, cases)


def test_runs_that_stay_as_spread_are_repeated_to_the_most_and_said_so(recorded):
    launched: list[list[int]] = []
    runs, note = narrowed(recorded.case, recorded.samples, budget(most=9), replaying(recorded.samples, launched))
    assert [run.index for run in runs] == list(range(1, 10))
    assert launched == [[index] for index in range(4, 10)]  # one launch per run: the case does not share one
    width = relative_halfwidth(headline_values(recorded.case, runs))
    assert (
        note
        == f"repeated to the spec's most runs: 9 runs (3 planned); its 95 % interval is ± {width * 100:.1f} %, wider than ± 4 %"
    )


def test_runs_stop_as_soon_as_the_interval_is_within_the_width(recorded):
    """Two of the recorded runs, 3.4 % apart, in turn: three give ± 4.8 %, four ± 3.1 %, five
    ± 2.3 %, the first within ± 3 %."""
    close = [recorded.samples[0], recorded.samples[1]]
    launched: list[list[int]] = []
    runs, note = narrowed(
        recorded.case, [*close, recorded.samples[0]], budget(halfwidth=0.03), replaying(close, launched)
    )
    values = headline_values(recorded.case, runs)
    assert relative_halfwidth(values) <= 0.03 < relative_halfwidth(values[:-1])
    assert launched == [[4], [5]]
    assert note == "repeated until its 95 % interval was within ± 3 %: 5 runs (3 planned), ± 2.3 %"


def test_planned_runs_narrow_enough_are_not_repeated(recorded):
    launched: list[list[int]] = []
    runs, note = narrowed(recorded.case, recorded.samples, budget(halfwidth=0.5), replaying(recorded.samples, launched))
    assert runs == recorded.samples and launched == []
    assert note.startswith("not repeated: its 3 runs (3 planned) gave a 95 % interval of ± 19.")


def test_no_run_is_launched_beyond_the_cases_share_of_the_time_cap(recorded):
    """The recorded runs took 38-98 s each: a share of 30 s (1 min over two cases) affords none."""
    launched: list[list[int]] = []
    shared = budget(minutes=1, cases=2)
    assert shared.allowance_s() == 30
    runs, note = narrowed(recorded.case, recorded.samples, shared, replaying(recorded.samples, launched))
    assert launched == [] and len(runs) == 3
    assert note.startswith("repeated within its share of the spec's time cap (30 s): 3 runs (3 planned)")


def test_time_a_case_leaves_unspent_goes_to_the_cases_after_it():
    shared = budget(minutes=10, cases=4)
    assert shared.allowance_s() == 150
    shared.spend(30)
    shared.case_passed()
    assert shared.allowance_s() == 190  # (600 - 30) s over the 3 cases left


def test_a_failed_run_ends_the_repetition_and_the_case(recorded):
    failed = recorded.samples[2].model_copy(update={"status": "error", "reason": "exit code 1", "ranks": []})
    launched: list[list[int]] = []
    runs, note = narrowed(recorded.case, recorded.samples, budget(), replaying([failed], launched))
    assert len(runs) == 4 and runs[-1].status == "error" and launched == [[4]]
    assert note == "not repeated further: a run failed (4 runs (3 planned))"


SPEC = """name: narrow
min_runs: 3
repeat: {halfwidth: 0.04, max_runs: 6, time_cap_minutes: 1}
requirements:
  - {quantity: training_tokens_per_s, fraction: 0.95}
"""


def test_kit_run_repeats_the_cases_its_spec_reads_until_narrow_or_capped(tmp_path):
    """A real run on this CPU: a training case the spec reads gets three runs in one launch, then
    more until it is narrow, at its most runs or out of time; the collective, which the spec does
    not read, keeps its one run. Every run is in the evidence; run.json says the time spent."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "run", "--executor", "local", "--no-preflight", "--runs-for", str(spec),
         "--case", "pretrain.tiny-llama.z2.g2", "--case", "comm.all_gather.g2", "--out", str(out)],
        capture_output=True, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    trained = json.loads((out / "cases" / "pretrain.tiny-llama.z2.g2" / "result.json").read_text())
    values = trained["metrics"]["tokens_per_s"]["per_run"]
    width = relative_halfwidth(values)
    assert 3 <= len(values) <= 6 and len(trained["samples"]) == len(values)
    assert sorted(p.name for p in (out / "cases" / "pretrain.tiny-llama.z2.g2" / "runs").iterdir()) == sorted(
        str(index) for index in range(1, len(values) + 1)
    )
    note = trained["notes"][-1]
    if width <= 0.04:
        assert note.startswith(("repeated until", "not repeated:")), note
    else:
        assert note.startswith(("repeated to the spec's most runs: 6 runs", "repeated within its share")), note
    assert f"{len(values)} runs (3 planned)" in note
    collective = json.loads((out / "cases" / "comm.all_gather.g2" / "result.json").read_text())
    assert len(collective["samples"]) == 3 and not any("repeated" in n for n in collective["notes"])
    info = json.loads((out / "run.json").read_text())
    assert info["plan"]["repetition"]["max_runs"] == 6
    assert (
        "pretrain.tiny-llama.z2.g2" in info["plan"]["repeated"] and "comm.all_gather.g2" not in info["plan"]["repeated"]
    )
    assert 0 < info["repetition_spent_s"] <= 60 + 30  # the cap, and at most one launch beyond it
    verified = subprocess.run(
        [sys.executable, "-m", "kit.cli", "report", str(out), "--verify"], capture_output=True, text=True, env=env
    )
    assert verified.returncode == 0, verified.stderr


def test_a_malformed_repeat_is_one_line_and_exit_2(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("halfwidth: 0.04", "halfwidth: 4"))
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "run", "--all", "--runs-for", str(spec), "--dry-run"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "repeat.halfwidth" in done.stderr and str(spec) in done.stderr


def test_a_dry_run_says_the_repetition_beside_the_estimate(tmp_path):
    spec = Path(__file__).resolve().parents[2] / "manifests" / "acceptance.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "run", "--all", "--profile", "smoke", "--runs-for", str(spec), "--dry-run"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    title = next(line for line in done.stdout.splitlines() if line.startswith("profile smoke"))
    assert title.endswith("+ up to 12 runs of a case until its 95 % interval is within ± 4 % (at most 20 min in all)")
    assert list(tmp_path.iterdir()) == []
