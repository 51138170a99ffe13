"""A serve run's details travel typed (kit.rundir.serving): the driver builds them as models, what
it writes is what every reader reads, and a shape the model does not take is refused."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from kit.plan.predictions import ServingBounds
from kit.rundir.schema import RankSample
from kit.rundir.serving import NoBound, ServeDetails

ENGINE = {"name": "vllm", "label": "vLLM", "placement": "local"}


def test_every_serve_run_of_the_real_smoke_run_reads_back_as_written(real_smoke_run):
    ranks = sorted(real_smoke_run.glob("cases/serve.*/runs/*/rank-0.json"))
    assert ranks, "the smoke run has no serve case"
    for path in ranks:
        written = json.loads(path.read_text())
        if written["status"] != "ok":
            continue
        sample = RankSample.model_validate(written)
        details = sample.details_as(ServeDetails)
        assert details is not None and details.aggregates is not None and details.aggregates.completed > 0
        assert isinstance(details.bounds, NoBound) and "CPU" in details.bounds.unavailable  # no roofline for a CPU
        assert details.tokens is not None and details.tokens.equal, "the engine's count is the client's"
        assert json.loads(sample.model_dump_json()) == written, "nothing is lost or added on the way"


def test_a_bound_is_read_as_the_roofline_it_was_written_from():
    bounds = {"unavailable": "no peak figures for a CPU: no bound computed"}
    assert isinstance(ServeDetails.model_validate({"engine": ENGINE, "bounds": bounds}).bounds, NoBound)
    assert not isinstance(ServeDetails.model_validate({"engine": ENGINE, "bounds": bounds}).bounds, ServingBounds)


def test_details_the_model_does_not_take_are_refused():
    with pytest.raises(ValidationError):  # not a burst's aggregates: no requests, no durations
        ServeDetails.model_validate({"engine": ENGINE, "aggregates": {"output_tokens": 1}})
