"""A serve case's concurrency sweep held to latency objectives, from the rows its runs wrote
(runs/<k>/sweep/c<N>/requests.jsonl): the points the report lays out, pooled over the runs, and
each run's capacity on its own, which an acceptance spec judges as a figure of several runs.

Every figure is computed from the rows, so a finished run is held to any objectives without being
measured again (kit.measure.slo).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kit.measure.metrics import summarize
from kit.measure.serve import rows_of
from kit.measure.slo import Slo, SweepPoint, capacity, judge
from kit.plan.predictions import ConcurrencyBound
from kit.rundir.schema import Metric, Result, RunSample
from kit.rundir.serving import (
    NoBound,
    RequestTimes,
    ServeDetails,
    SweepPointDetails,
    latency_figures,
    sweep_point_folder,
)

# The name of a serve case's capacity as a figure of its runs (computed here, never written by a
# workload): output tokens/s at the sweep's largest point within the objectives, one value a run
CAPACITY_METRIC = "capacity_output_tokens_per_s"


def sweep_points(
    case_dir: Path, samples: Sequence[RunSample], slo: Slo, case_invalid: Sequence[str]
) -> list[SweepPoint]:
    """The points of a serve case's sweep, each from its rows in every run of `samples`, held to
    `slo` (percentiles of all the rows, throughput over the runs' summed durations); none for a case
    without a sweep. `case_invalid`: why the case's figures are no measurement, if they are not."""
    pooled: dict[int, list[tuple[int, SweepPointDetails, list[RequestTimes]]]] = {}
    for sample in samples:
        driver = next((rank for rank in sample.ranks if rank.rank == 0), None)
        details = driver.details_as(ServeDetails) if driver else None
        sweep = details.sweep if details else None
        for point in sweep.points if sweep else []:
            folder = case_dir / "runs" / str(sample.index) / sweep_point_folder(point.concurrency)
            rows = rows_of(folder / "requests.jsonl", RequestTimes)
            pooled.setdefault(point.concurrency, []).append((sample.index, point, rows))
    points = []
    for concurrency, measured in sorted(pooled.items()):
        rows = [row for _, _, run_rows in measured for row in run_rows]
        duration = sum(
            max((row.ended_at for row in run_rows if row.ended_at is not None), default=0.0)
            for _, _, run_rows in measured
        )
        bounds = [point.bounds for _, point, _ in measured]
        known = [bound.max_output_tokens_per_s for bound in bounds if isinstance(bound, ConcurrencyBound)]
        limited = [
            f"run {index}: {'; '.join(point.saturation.reasons)}"
            for index, point, _ in measured
            if point.saturation.client_limited
        ]
        found = SweepPoint(
            concurrency=concurrency,
            figures=latency_figures(rows, duration),
            judged=judge(rows, duration, slo),
            bound_tokens_per_s=sum(known) / len(known) if len(known) == len(bounds) else None,
            bound_note=next((bound.unavailable for bound in bounds if isinstance(bound, NoBound)), None),
            cut_short=any(point.cut_short for _, point, _ in measured),
            client_limited="; ".join(limited) or None,
        )
        invalid = found.above_bound or next(iter(case_invalid), None)
        points.append(found.model_copy(update={"invalid": invalid}) if invalid else found)
    return points


def capacity_per_run(case_dir: Path, result: Result, slo: Slo, case_invalid: Sequence[str]) -> list[float] | None:
    """Each run's output tokens/s at its own sweep's capacity within `slo` (0 where no point of
    that run counts), in the order of the runs; None where no run made a sweep."""
    found: list[float] = []
    for sample in result.samples:
        points = sweep_points(case_dir, [sample], slo, case_invalid)
        if points:
            best = capacity(points)
            found.append(best.figures.output_throughput if best is not None else 0.0)
    return found or None


def capacity_metric(case_dir: Path, result: Result, slo: Slo, case_invalid: Sequence[str]) -> Metric | None:
    """The case's capacity within `slo` as a figure over its runs (mean, spread, each run's value)."""
    values = capacity_per_run(case_dir, result, slo, case_invalid)
    return summarize(values, "tokens/s") if values else None
