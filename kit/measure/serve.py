"""The serving stage (paper Sec. V): each engine under a burst of requests; the figures of a run
are the aggregates its client computed from the requests (kit.rundir.serving, vLLM's
definitions), the section sets throughput beside its roofline bound and the latency distribution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import ValidationError

from kit.files.regular import RUN_FILE_LIMIT, UnusableJson, read_regular_text, within_bounds
from kit.manifest import first_problem
from kit.measure.metrics import summarize
from kit.measure.unit import StageUnit
from kit.plan.predictions import ServingBounds
from kit.plan.protocol import Case
from kit.rundir.directory import UnreadableRun
from kit.rundir.schema import Metric, RunSample
from kit.rundir.serving import (
    NoBound,
    RequestRecord,
    RequestTimes,
    ServeDetails,
    SweepDetails,
)
from kit.theory.hardware import HardwareTable

if TYPE_CHECKING:
    pass

Request = TypeVar("Request", bound=RequestTimes)  # a request's row as read: all of it, or its times alone

# Case metrics: each figure of each run comes from that run's aggregates (rank 0 drives the
# burst), which `aggregate` computed from the run's requests.jsonl rows. A figure reads a run's
# aggregates, or None where it has none (AttributeError: the figure is absent).
SERVE_FIGURES: dict[str, tuple[str, Callable[[Any], float]]] = {
    "request_throughput": ("requests/s", lambda a: a.request_throughput),
    "output_throughput": ("tokens/s", lambda a: a.output_throughput),
    "total_token_throughput": ("tokens/s", lambda a: a.total_token_throughput),
    "duration_s": ("s", lambda a: a.duration_s),
    "error_rate": ("fraction", lambda a: a.errors / a.requests),
    **{
        f"{name}_{stat}_s": ("s", attrgetter(f"{name}_s.{stat}"))
        for name in ("ttft", "tpot", "itl", "latency")
        for stat in ("mean", "median", "p90", "p99")
    },
}


def driver_details(run: RunSample) -> ServeDetails:
    """What run's driver (rank 0) recorded; ValueError where it recorded nothing."""
    details = next(rank for rank in run.ranks if rank.rank == 0).details_as(ServeDetails)
    if details is None:
        raise ValueError(f"run {run.index}'s driver recorded no details")
    return details


def serve_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Each figure of the burst over the runs; notes on failed requests, a client that may have
    limited it, short outputs, the roofline bound, a token count the engine disagrees with, and
    the sweep's points (whose figures the report computes from their rows, under the objectives
    it is given: kit.measure.slo)."""
    driver = [driver_details(run) for run in runs]
    found, notes = {}, []
    for name, (unit, pick) in SERVE_FIGURES.items():
        values = []
        for details in driver:
            try:
                values.append(float(pick(details.aggregates)))
            except (AttributeError, ZeroDivisionError):  # no aggregates, or no request gave the figure
                break
        found[name] = summarize(values, unit) if len(values) == len(driver) else None
    for index, details in enumerate(driver, start=1):
        totals = details.aggregates
        if totals is not None and totals.errors:
            kinds = ", ".join(f"{count} × {kind}" for kind, count in totals.error_kinds.items())
            notes.append(
                f"run {index}: {totals.errors} of {totals.requests} requests failed ({kinds}): the figures "
                f"are of the {totals.completed} that finished; see requests.jsonl"
            )
        if details.saturation is not None and details.saturation.client_limited:
            notes.append(
                f"run {index}: the client may have limited throughput: {'; '.join(details.saturation.reasons)}"
            )
        notes += [f"run {index}: {note}" for note in sweep_notes(details.sweep)]
        if details.short_outputs:
            notes.append(
                f"run {index}: {details.short_outputs} requests ended before max_output_tokens (EOS); see requests.jsonl"
            )
    bounds = [details.bounds for details in driver if isinstance(details.bounds, ServingBounds)]
    if driver and len(bounds) == len(driver):
        found["output_throughput_bound"] = summarize([bound.max_output_tokens_per_s for bound in bounds], "tokens/s")
    elif driver:
        notes.append(f"output throughput bound: {no_bound_reason(driver[0])}")
    for index, details in enumerate(driver, start=1):
        tokens = details.tokens
        if tokens is not None and tokens.server_counters.unavailable:
            notes.append(f"run {index}: the engine's own token count is unknown: {tokens.server_counters.unavailable}")
        elif tokens is not None and not tokens.equal:
            notes.append(
                f"run {index}: the client counted {tokens.client_counted} tokens, the engine "
                f"{tokens.server_counters.generated_tokens}: the rows do not match the engine's count"
            )
    engine_note = driver[0].ignore_eos_note if driver else None
    if engine_note:
        notes.append(engine_note)
    return found, notes


def sweep_notes(sweep: SweepDetails | None) -> list[str]:
    """What a reader of the sweep's figures must know: points the client may have limited, points
    not measured, a token count the engine disagrees with."""
    if sweep is None:
        return []
    limited = [str(point.concurrency) for point in sweep.points if point.saturation.client_limited]
    notes = (
        [
            f"sweep: the client may have limited the points at concurrency {', '.join(limited)} (see each point's "
            "saturation in rank-0.json)"
        ]
        if limited
        else []
    )
    stopped = [
        f"{point.concurrency} ({point.sent} of {point.planned})"
        for point in sweep.points
        if point.sent < point.planned and not point.cut_short
    ]
    if stopped:
        notes.append(
            f"sweep: the points at concurrency {', '.join(stopped)} stopped sending after max_point_s "
            f"({sweep.max_point_s} s)"
        )
    if sweep.not_measured:
        notes.append(f"sweep: {sweep.not_measured}")
    if sweep.tokens is not None and not sweep.tokens.equal:
        notes.append(
            f"sweep: the client counted {sweep.tokens.client_counted} tokens, the engine "
            f"{sweep.tokens.server_counters.generated_tokens}"
        )
    return notes


def no_bound_reason(details: ServeDetails) -> str:
    """Why a run's burst has no roofline."""
    return details.bounds.unavailable if isinstance(details.bounds, NoBound) else "not computed"


@overload
def rows_of(path: Path) -> list[RequestRecord]: ...
@overload
def rows_of(path: Path, row: type[Request]) -> list[Request]: ...
def rows_of(path: Path, row: type[RequestTimes] = RequestRecord) -> Sequence[RequestTimes]:
    """The requests of one requests.jsonl, each read as `row`; a row that is not one is
    UnreadableRun, naming the file, the line and the key."""
    rows = []
    for number, line in enumerate(read_regular_text(path, RUN_FILE_LIMIT).splitlines(), start=1):
        try:
            rows += [row.model_validate_json(within_bounds(line))] if line.strip() else []
        except ValidationError as exc:
            raise UnreadableRun(f"{path}: line {number}: {first_problem(exc)}") from None
        except UnusableJson as exc:
            raise UnreadableRun(f"{path}: line {number}: {exc}") from None
    return rows


SERVE = StageUnit(
    name="serve", title="Serving throughput and latency", case_metrics=serve_case_metrics, headline="output_throughput"
)
