"""Claims from too few runs are inconclusive, not deviating (kit.reference.claims.judge).

The rule, on hand-picked values; then on a synthetic paper-size run (tests/support/paper_size_run.py:
fine-tuning cases of 3 runs each, the profile case of 1, as the paper profile runs them), whose
spread is set per test; then on the session's real smoke run, whose one-run cases read
inconclusive (for information: the smoke run is not comparable, so its verdicts are not
applicable)."""

from __future__ import annotations

import statistics

import pytest

from kit.reference.claims import (
    DECISIVE_RUN,
    MIN_RUNS,
    Spread,
    evaluate_claim,
    evaluate_claims,
    judge,
    verdict_counts,
)
from kit.reference.measured_run import MeasuredRun, measured_run
from kit.reference.published import Published, load_reference
from kit.rundir.directory import RunDir
from kit.rundir.schema import Metric
from kit.units import PERCENT, TIMES

TOLERANCE = Published(value=2.0, tolerance=0.3)  # C16: LoRA about twice QLoRA


@pytest.fixture(scope="module")
def reference():
    return load_reference()


def claim(reference, claim_id):
    return next(c for c in reference.claims if c.id == claim_id)


# --- The rule ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, spread, verdict, says",
    [
        (3.0, Spread((), 0.1), "deviates", "outside ± 0.3"),  # 3 runs, far outside
        (2.4, Spread((), 0.1), "deviates", "outside ± 0.3"),  # outside the tolerance, which is wider
        (2.4, Spread((), 0.5), "inconclusive", "but within its runs' spread (± 0.500"),  # the spread is wider
        (2.1, Spread((), 0.5), "consistent", "within the published bound"),
        (
            3.0,
            Spread(("1 run of finetune.llama2-7b.l.g8",), None),
            "inconclusive",
            "1 run of finetune.llama2-7b.l.g8; 3 needed",
        ),
        (
            2.0,
            Spread(("1 run of finetune.llama2-7b.l.g8",), None),
            "inconclusive",
            "within the published bound; 1 run of",
        ),
        (2.0, Spread(("2 runs of finetune.llama2-7b.l.g8",), 0.1), "consistent", "by more than its runs' spread"),
        (2.25, Spread(("2 runs of finetune.llama2-7b.l.g8",), 0.1), "inconclusive", "by less than its runs' spread"),
    ],
)
def test_a_value_is_judged_as_its_runs_allow(value, spread, verdict, says):
    found, finding = judge(TOLERANCE, value, spread, TIMES)
    assert found == verdict and says in finding


def test_a_one_sided_bound_deviates_only_beyond_the_runs_spread():
    at_least = Published(at_least=0.5)
    assert judge(at_least, 0.45, Spread((), 0.1), PERCENT)[0] == "inconclusive"
    assert judge(at_least, 0.35, Spread((), 0.1), PERCENT)[0] == "deviates"
    assert judge(Published(between=(0.05, 0.1)), 0.766, Spread(("1 run of x",), None), PERCENT)[0] == "inconclusive"


# --- A synthetic paper-size run: 3 runs of fine-tuning, 1 of the profile ---------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory, paper_plan) -> MeasuredRun:
    from support.paper_size_run import write_run

    cases = ["finetune.llama2-7b.l.g8", "finetune.llama2-7b.ql.g8", "profile.llama2-7b.base.g1"]
    root = write_run(tmp_path_factory.mktemp("paper") / "a800", paper_plan, cases=cases)
    run = RunDir(root)
    return measured_run(run.read_info(), run.results(), None)


def with_runs(run: MeasuredRun, case_id: str, metric: str, values: list[float]) -> MeasuredRun:
    """The run with one case's metric replaced by these per-run values."""
    result = run.results[case_id]
    found = Metric(
        mean=statistics.fmean(values),
        std=statistics.stdev(values) if len(values) > 1 else None,
        n=len(values),
        unit=result.metrics[metric].unit,
        per_run=values,
    )
    changed = result.model_copy(update={"metrics": {**result.metrics, metric: found}})
    return run.model_copy(update={"results": {**run.results, case_id: changed}})


def test_in_a_paper_size_run_three_runs_judge_and_one_run_is_inconclusive(reference, synthetic):
    runs = {cid: r.metrics["tokens_per_s"].n for cid, r in synthetic.results.items()}
    assert runs == {"finetune.llama2-7b.l.g8": 3, "finetune.llama2-7b.ql.g8": 3, "profile.llama2-7b.base.g1": 1}
    c16 = evaluate_claim(claim(reference, "C16"), reference, [synthetic])
    assert c16.relations[0].verdict in ("consistent", "deviates") and "needed" not in c16.relations[0].finding
    c10 = evaluate_claim(claim(reference, "C10"), reference, [synthetic])
    assert c10.verdict == "inconclusive" and c10.relations[0].judged == "inconclusive"
    assert c10.reason == "1 of 1 relations inconclusive: 1 run of profile.llama2-7b.base.g1; 3 needed"
    assert c10.relations[0].finding.endswith(f"1 run of profile.llama2-7b.base.g1; 3 needed ({DECISIVE_RUN})")
    outcomes = evaluate_claims(reference, [synthetic])
    assert verdict_counts(o.verdict for o in outcomes)["inconclusive"] == 3
    assert [o.id for o in outcomes if o.verdict == "inconclusive"] == ["C10", "C11", "C15"]  # the base profile case's


def test_three_runs_deviate_beyond_their_spread_and_are_inconclusive_within_it(reference, synthetic):
    qlora = synthetic.results["finetune.llama2-7b.ql.g8"].metrics["tokens_per_s"].mean
    # LoRA at 3.0 × QLoRA, runs tight: outside 2 ± 0.3 by far more than the spread
    tight = with_runs(
        synthetic, "finetune.llama2-7b.l.g8", "tokens_per_s", [3.0 * qlora * f for f in (0.99, 1.0, 1.01)]
    )
    relation = evaluate_claim(claim(reference, "C16"), reference, [tight]).relations[0]
    assert relation.verdict == "deviates" and relation.finding.startswith("1.00 above the published 2")
    # the same mean from runs that scatter widely: the margin (2 standard errors, ~1.2 ×) covers it
    wide = with_runs(synthetic, "finetune.llama2-7b.l.g8", "tokens_per_s", [3.0 * qlora * f for f in (0.4, 1.0, 1.6)])
    relation = evaluate_claim(claim(reference, "C16"), reference, [wide]).relations[0]
    assert relation.verdict == "inconclusive" and "but within its runs' spread" in relation.finding
    # two runs only: never deviates, and the claim names the runs it lacks
    two = with_runs(synthetic, "finetune.llama2-7b.l.g8", "tokens_per_s", [3.0 * qlora, 3.0 * qlora])
    outcome = evaluate_claim(claim(reference, "C16"), reference, [two])
    assert outcome.relations[0].verdict == "inconclusive"
    assert outcome.reason == f"1 of 3 relations inconclusive: 2 runs of finetune.llama2-7b.l.g8; {MIN_RUNS} needed"


def test_inconclusive_is_counted_and_shown_in_its_own_tone(reference, synthetic, paper_plan):
    from kit.report.cells import VERDICT_TONES
    from kit.report.sections.claims import claims_table

    outcomes = evaluate_claims(reference, [synthetic])
    assert VERDICT_TONES["inconclusive"] not in {VERDICT_TONES[v] for v in VERDICT_TONES if v != "inconclusive"}
    rows = {row.cells[0].text: row for row in claims_table(outcomes).rows if row.heading}
    assert (rows["C10"].cells[2].text, rows["C10"].cells[2].tone) == ("inconclusive", VERDICT_TONES["inconclusive"])


# --- The real smoke run ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_in_the_real_smoke_run_the_claims_of_one_run_read_inconclusive(reference, real_smoke_run):
    run = RunDir(real_smoke_run)
    measured = measured_run(run.read_info(), run.results(), None)
    outcomes = {o.id: o for o in evaluate_claims(reference, [measured])}
    # not comparable to the reference: every verdict is not applicable, with what the numbers say beside it
    assert {o.verdict for o in outcomes.values()} == {"not applicable"}
    one_run = measured.results["profile.tiny-llama.base.g1"].metrics["step_s"].n
    assert one_run == 1
    judged = [r for r in outcomes["C10"].relations + outcomes["C15"].relations if r.judged]
    assert (
        len(judged) == 3
    )  # the optimizer's share, the decoder layers' share, the parts' order (C11's idle shares: a GPU's)
    for relation in judged:
        assert relation.judged == "inconclusive"
        assert relation.finding.startswith("inconclusive: ")
        assert relation.finding.endswith(f"1 run of profile.tiny-llama.base.g1; 3 needed ({DECISIVE_RUN})")
    # the serving claims read one burst: inconclusive too; the fine-tuning ones, three runs: judged on
    # their runs (a spread as wide as a loaded CPU makes may still leave one inconclusive, never for its count)
    assert all(r.judged == "inconclusive" for r in outcomes["C23"].relations if r.judged)
    judged = [r for r in outcomes["C16"].relations if r.judged]
    assert judged and all("needed" not in r.finding for r in judged)
    assert all(
        r.judged in ("consistent", "deviates") or "spread" in r.finding or "same stand-in" in r.finding for r in judged
    )
