"""Like with like: a headline ranks a case only against cases of its own workload, and says which."""

from __future__ import annotations

import pytest
from support.paper_size_run import write_run

from kit.report.build import build_report
from kit.report.load import load_run
from kit.report.ranking import standing, workload
from kit.rundir.schema import Metric

BREAKDOWN = ["profile.llama2-7b.base.g1", "profile.llama2-7b.f.g1", "profile.llama2-7b.r.g1.b16"]


@pytest.fixture(scope="module")
def breakdown_run(tmp_path_factory, paper_plan):
    return write_run(tmp_path_factory.mktemp("ranking") / "a800", paper_plan, cases=BREAKDOWN)


def test_a_step_of_sixteen_sequences_is_not_ranked_against_steps_of_one(breakdown_run):
    """The module breakdown measures BASE and F at micro-batch 1 and R at 16 (as on the recorded
    H100 run, where page one said R was the 'highest full-parameter; next BASE')."""
    results = load_run(breakdown_run, False).results
    ranked = standing(list(results.values()), "tokens_per_s")
    assert ranked.best.case_id == "profile.llama2-7b.r.g1.b16"  # the most tokens/s: 16 sequences a step
    assert workload(ranked.best.case) == "micro-batch 16 × 350 tokens, bf16"
    assert ranked.words.startswith("the only full-parameter measured; 2 of another workload not ranked")
    assert "next" not in ranked.words
    same = standing([results["profile.llama2-7b.base.g1"], results["profile.llama2-7b.f.g1"]], "tokens_per_s")
    assert "next" in same.words or "tied" in same.words


@pytest.mark.parametrize(
    ("runner_mean", "words"),
    [(95.0, "full-parameter, tied with F 95.0 ± 4.0"), (80.0, "fastest full-parameter; next F 80.0 ± 4.0")],
)
def test_the_highest_is_fastest_only_where_its_interval_clears_the_next_ones(breakdown_run, runner_mean, words):
    """mean ± std of the highest and of the next: meeting is a tie, apart is "fastest"."""
    results = load_run(breakdown_run, False).results

    def measured(case_id, mean):
        metric = Metric(mean=mean, std=4.0, n=3, unit="tokens/s", per_run=[mean - 4, mean, mean + 4])
        result = results[case_id]
        return result.model_copy(update={"metrics": {**result.metrics, "tokens_per_s": metric}})

    ranked = standing(
        [measured("profile.llama2-7b.base.g1", 100.0), measured("profile.llama2-7b.f.g1", runner_mean)], "tokens_per_s"
    )
    assert ranked.best.case_id == "profile.llama2-7b.base.g1"
    assert ranked.words == words


def test_the_headline_row_and_the_verdict_say_the_workload(breakdown_run):
    """Each training row's workload is said on the row, or once in its group's heading where the
    group's rows share one (page one has no line to spare)."""
    report = build_report(breakdown_run, ["reference"])
    heading = ""
    said = {}
    for row in report.page_one.headline.rows:
        if row.heading:
            heading = row.cells[0].text
        elif (row.cells[0].detail or "").startswith("cases/profile."):
            folder = row.cells[0].detail.split("; ")[0]  # then the workload's phrase
            said[folder] = f"{heading} {row.cells[2].detail or ''}"
    assert said == {"cases/profile.llama2-7b.r.g1.b16/": said["cases/profile.llama2-7b.r.g1.b16/"]}
    assert said["cases/profile.llama2-7b.r.g1.b16/"].count("micro-batch 16 × 350 tokens, bf16") == 1
    this_host = next(fact.value for fact in report.page_one.verdict if fact.label == "This host")
    assert "micro-batch 16 × 350 tokens, bf16, 1 GPU" in this_host and "data-parallel" not in this_host
