"""kit.serve.correctness: the real vLLM CPU build (the kit's engine environment) serving the
smoke profile's tiny Llama from its seeded checkpoint, its greedy tokens against transformers'
on the same weights; and how a mismatch is found and makes the case's figures invalid."""

from pathlib import Path

import pytest
from support.wrong_output import with_wrong_output

from kit.execute.choice import named
from kit.execute.preflight import miniature, run_check
from kit.host.this_host import this_host
from kit.measure.validity import invalid_reasons, output_wrong
from kit.plan.protocol import ServeParams, plan_for
from kit.rundir.serving import ServeDetails
from kit.serve.correctness import compared, not_checked_because
from kit.serve.engines import engine_for, loads_checkpoint


@pytest.fixture(scope="module")
def serve_case():
    return next(case for case in plan_for(this_host(), "smoke").cases if case.workload == "serve")


def test_a_mismatch_names_the_prompt_and_the_token():
    agreed, mismatches = compared([[5, 6, 7], [5, 6, 7]], [[5, 6, 7], [5, 9, 7]], 3)
    assert (agreed, mismatches) == (1, ["prompt 2, token 2: engine 6, transformers 9"])
    assert compared([[5]], [[5, 6]], 2)[1] == ["prompt 1, token 2: engine none, transformers 6"]


def test_the_tiny_model_is_served_from_its_checkpoint_a_paper_model_is_not(serve_case):
    engine = engine_for(serve_case.params_as(ServeParams))
    assert loads_checkpoint(serve_case, engine) and not_checked_because(serve_case, engine) is None
    paper = next(case for case in plan_for(this_host(), "paper").cases if case.workload == "serve")
    why = not_checked_because(paper, engine_for(paper.params_as(ServeParams)))
    assert why is not None and "B parameters" in why


@pytest.mark.e2e
def test_vllm_cpu_greedy_output_equals_transformers(serve_case, tmp_path: Path):
    small = miniature(serve_case)
    sample, folder = run_check(small, named("local"), tmp_path)
    assert not isinstance(sample, str), sample
    assert sample.status == "ok", (folder / "log.txt").read_text()[-3000:]
    details = sample.ranks[0].details_as(ServeDetails)
    check = details.correctness if details else None
    assert check is not None and check.status == "pass", check
    # the miniature generates 8 tokens (the smoke case 32, of which 16 are compared)
    assert (check.prompts, check.agreed, check.tokens_compared) == (
        3,
        3,
        small.params_as(ServeParams).max_output_tokens,
    )
    assert check.reference.startswith("transformers ")
    assert details is not None and details.model is not None and details.model.kind == "synthetic checkpoint"


@pytest.mark.e2e
def test_a_wrong_output_makes_the_figures_invalid(real_smoke_run):
    """The result of a real serving run (the smoke run's), its check set to a failure."""
    from kit.rundir.directory import read_model
    from kit.rundir.schema import Result

    (found,) = real_smoke_run.glob("cases/serve.*/result.json")
    result = read_model(found, Result)
    result = with_wrong_output(result)
    assert (
        output_wrong(result)
        == "output wrong in run 1: 2 of 3 prompts agreed; prompt 2, token 5: engine 311, transformers 87"
    )
    assert output_wrong(result) in invalid_reasons(result)
