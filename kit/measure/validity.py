"""Figures the kit does not stand behind: a value past the physical bound its model sets for the
case's GPUs, or a case whose own self-check failed.

Such a case keeps its numbers in result.json (they are evidence of what happened), but no report
takes them for a measurement: it marks the case invalid wherever it shows it, never makes it a
headline nor prices it, judges no claim on it and lists it under the deviations. Each test reads
the case's own figures and samples (with, for training, the bound kit.plan.predictions sets for its
GPUs), never the words of its notes.
"""

from __future__ import annotations

from collections.abc import Callable

from kit.plan.predictions import (
    GIB,
    device_spec,
    memory_below_weights,
    predicted_training_memory,
    training_throughput_bound,
)
from kit.rundir.schema import Result
from kit.rundir.serving import OutputCheck, ServeDetails


def _most(result: Result, metric: str) -> float | None:
    """The largest run's value of a metric: one run past a bound is enough to doubt the case."""
    found = result.metrics.get(metric)
    return max(found.per_run) if found and found.per_run else None


def above_training_bound(result: Result) -> str | None:
    """tokens/s above the roofline of its GPUs at the datasheet peak (kit.plan.predictions)."""
    measured = _most(result, "tokens_per_s")
    devices = [rank.device_name for sample in result.samples for rank in sample.ranks]
    bound = training_throughput_bound(result.case, device_spec(result.case, devices)) if measured else None
    if bound is None or measured <= bound:  # type: ignore[operator]
        return None
    return f"tokens/s {measured / bound:.3g} × the roofline bound of its GPUs ({bound:.4g} tokens/s): impossible"  # type: ignore[operator]


def above_full_peak(result: Result) -> str | None:
    """MFU above 100 %: more FLOPs than the GPUs' datasheet peak."""
    measured = _most(result, "mfu")
    return None if measured is None or measured <= 1 else f"MFU {100 * measured:.3g} %, above 100 %: impossible"


def below_weights(result: Result) -> str | None:
    """A peak memory that cannot hold the weights each GPU must keep."""
    found = result.metrics.get("peak_memory_gib")
    if found is None or result.case.params.kind not in ("train", "profile"):
        return None
    return memory_below_weights(min(found.per_run) * GIB, predicted_training_memory(result.case))


def above_serving_bound(result: Result) -> str | None:
    """Output tokens/s above the serving roofline of the burst on its GPUs."""
    measured, bound = result.metrics.get("output_throughput"), result.metrics.get("output_throughput_bound")
    if measured is None or bound is None:
        return None
    ratio = max(value / limit for value, limit in zip(measured.per_run, bound.per_run))
    if ratio <= 1:
        return None
    return f"output tokens/s {ratio:.3g} × the roofline bound of its GPUs ({bound.mean:.4g} tokens/s): impossible"


def above_link_bound(result: Result) -> str | None:
    """Bus bandwidth above the rate of the links it crossed (kit.comm.link_bounds)."""
    fraction = _most(result, "bus_bandwidth_fraction_of_bound")
    return None if fraction is None or fraction <= 1 else f"bus bandwidth {fraction:.3g} × its link's rate: impossible"


def tokens_disagree(result: Result) -> str | None:
    """Serving's self-check: the tokens the client counted are the tokens the engine says it made."""
    if result.case.workload != "serve":
        return None
    for index, sample in enumerate(result.samples, start=1):
        driver = next((rank for rank in sample.ranks if rank.rank == 0), None)
        details = driver.details_as(ServeDetails) if driver else None
        tokens = details.tokens if details else None
        if tokens is None:
            continue
        counted = tokens.server_counters.generated_tokens
        if counted is not None and not tokens.equal:
            return (
                f"self-check failed in run {index}: the client counted {tokens.client_counted} tokens, "
                f"the engine {counted}"
            )
    return None


def output_checks(result: Result) -> list[tuple[int, OutputCheck]]:
    """A serve case's output checks (kit.serve.correctness), each with the run (from 1) that made it."""
    if result.case.workload != "serve":
        return []
    found = []
    for index, sample in enumerate(result.samples, start=1):
        driver = next((rank for rank in sample.ranks if rank.rank == 0), None)
        details = driver.details_as(ServeDetails) if driver else None
        if details is not None and details.correctness is not None:
            found.append((index, details.correctness))
    return found


def output_wrong(result: Result) -> str | None:
    """Serving correctness: the engine's greedy tokens were not the same weights' in transformers
    (kit.serve.correctness); a fast wrong engine is no measurement."""
    for index, check in output_checks(result):
        if check.status == "fail":
            first = check.mismatches[0] if check.mismatches else check.note
            return f"output wrong in run {index}: {check.agreed} of {check.prompts} prompts agreed; {first}"
    return None


CHECKS: tuple[Callable[[Result], str | None], ...] = (
    above_training_bound,
    above_full_peak,
    below_weights,
    above_serving_bound,
    above_link_bound,
    tokens_disagree,
    output_wrong,
)


def invalid_reasons(result: Result | None) -> list[str]:
    """Why an ok case's figures are not a measurement (empty: they are)."""
    if result is None or result.status != "ok":
        return []
    return [reason for check in CHECKS if (reason := check(result))]
