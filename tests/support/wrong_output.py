"""A real serving result whose output check is set to a failure: what an engine that decodes
wrongly leaves behind, made from a result the real engine wrote."""

from __future__ import annotations

from kit.rundir.schema import Result
from kit.rundir.serving import OutputCheck, ServeDetails

MISMATCH = "prompt 2, token 5: engine 311, transformers 87"


def with_wrong_output(result: Result) -> Result:
    """`result` with its first run's driver (rank 0) holding a failed output check."""
    driver = result.samples[0].ranks[0]
    details = driver.details_as(ServeDetails)
    assert details is not None
    wrong = OutputCheck(status="fail", prompts=3, agreed=2, tokens_compared=16, mismatches=[MISMATCH])
    rank = driver.model_copy(update={"details": details.model_copy(update={"correctness": wrong})})
    sample = result.samples[0].model_copy(update={"ranks": [rank, *result.samples[0].ranks[1:]]})
    return result.model_copy(update={"samples": [sample, *result.samples[1:]]})
