"""The serving stage (paper Sec. V): each engine under a burst of requests; the figures of a run
are the aggregates its client computed from the requests (kit.serve.aggregate, vLLM's
definitions), the section sets throughput beside its roofline bound and the latency distribution.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import ValidationError

from kit.hardware import HardwareTable
from kit.metrics import summarize
from kit.predictions import ServingBounds
from kit.protocol import Case, Protocol
from kit.regular_files import RUN_FILE_LIMIT, read_regular_text
from kit.report import charts
from kit.report.cells import devices_text, has_metrics, metric_cell, status_cell
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.stage_common import bars_note, case_bar, generic_stage, runs_note, stage_cases
from kit.results import Metric, Result, RunSample, UnreadableRun, first_problem
from kit.serve.aggregate import RequestRecord, RequestTimes
from kit.serve.details import NoBound, ServeDetails, SweepDetails
from kit.stages.unit import Stage

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun

Request = TypeVar("Request", bound=RequestTimes)  # a request's row as read: all of it, or its times alone

# Case metrics: each figure of each run comes from that run's aggregates (rank 0 drives the
# burst), which `aggregate` computed from the run's requests.jsonl rows.
SERVE_FIGURES = {
    "request_throughput": ("requests/s", lambda a: a.request_throughput),
    "output_throughput": ("tokens/s", lambda a: a.output_throughput),
    "total_token_throughput": ("tokens/s", lambda a: a.total_token_throughput),
    "duration_s": ("s", lambda a: a.duration_s),
    "error_rate": ("fraction", lambda a: a.errors / a.requests),
    **{
        f"{name}_{stat}_s": ("s", lambda a, name=name, stat=stat: getattr(getattr(a, f"{name}_s"), stat))
        for name in ("ttft", "tpot", "itl", "latency")
        for stat in ("mean", "median", "p90", "p99")
    },
}


def serve_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Each figure of the burst over the runs; notes on failed requests, a client that may have
    limited it, short outputs, the roofline bound, a token count the engine disagrees with, and
    the sweep's points (whose figures the report computes from their rows, under the objectives
    it is given: kit.serve.slo)."""
    driver = [ServeDetails.model_validate(next(rank for rank in run.ranks if rank.rank == 0).details) for run in runs]
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
            notes.append(f"run {index}: {totals.errors} of {totals.requests} requests failed ({kinds}): the figures "
                         f"are of the {totals.completed} that finished; see requests.jsonl")  # fmt: skip
        if details.saturation is not None and details.saturation.client_limited:
            notes.append(f"run {index}: the client may have limited throughput: {'; '.join(details.saturation.reasons)}")
        notes += [f"run {index}: {note}" for note in sweep_notes(details.sweep)]
        if details.short_outputs:
            notes.append(f"run {index}: {details.short_outputs} requests ended before max_output_tokens (EOS); see requests.jsonl")
    bounds = [details.bounds for details in driver]
    if driver and all(isinstance(bound, ServingBounds) for bound in bounds):
        found["output_throughput_bound"] = summarize([bound.max_output_tokens_per_s for bound in bounds], "tokens/s")
    elif driver:
        notes.append(f"output throughput bound: {no_bound_reason(driver[0])}")
    for index, details in enumerate(driver, start=1):
        tokens = details.tokens
        if tokens is not None and tokens.server_counters.unavailable:
            notes.append(f"run {index}: the engine's own token count is unknown: {tokens.server_counters.unavailable}")
        elif tokens is not None and not tokens.equal:
            notes.append(f"run {index}: the client counted {tokens.client_counted} tokens, the engine "
                         f"{tokens.server_counters.generated_tokens}: the rows do not match the engine's count")  # fmt: skip
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
    notes = [f"sweep: the client may have limited the points at concurrency {', '.join(limited)} (see each point's "
             "saturation in rank-0.json)"] if limited else []  # fmt: skip
    stopped = [f"{point.concurrency} ({point.sent} of {point.planned})" for point in sweep.points
               if point.sent < point.planned and not point.cut_short]  # fmt: skip
    if stopped:
        notes.append(f"sweep: the points at concurrency {', '.join(stopped)} stopped sending after max_point_s "
                     f"({sweep.max_point_s} s)")  # fmt: skip
    if sweep.not_measured:
        notes.append(f"sweep: {sweep.not_measured}")
    if not sweep.tokens.equal:
        notes.append(f"sweep: the client counted {sweep.tokens.client_counted} tokens, the engine "
                     f"{sweep.tokens.server_counters.generated_tokens}")  # fmt: skip
    return notes


def no_bound_reason(details: ServeDetails) -> str:
    """Why a run's burst has no roofline."""
    return details.bounds.unavailable if isinstance(details.bounds, NoBound) else "not computed"


# The serving table's columns: metric (SERVE_FIGURES) and its heading.
SERVE_COLUMNS = (
    ("output_throughput", "output tokens/s"),
    ("request_throughput", "requests/s"),
    ("ttft_median_s", "TTFT median (s)"),
    ("ttft_p99_s", "TTFT p99 (s)"),
    ("itl_median_s", "ITL median (s)"),
    ("latency_median_s", "E2E median (s)"),
    ("latency_p99_s", "E2E p99 (s)"),
)


def _serving_bound(result: Result) -> Cell:
    """The roofline's ceiling on output tokens/s beside the measured value, or why there is none."""
    if result.metrics.get("output_throughput_bound"):
        return metric_cell(result, "output_throughput_bound")
    driver = result.samples[0].ranks[0] if result.samples and result.samples[0].ranks else None
    reason = no_bound_reason(ServeDetails.model_validate(driver.details)) if driver else "not computed"
    return Cell(text="none", detail=reason, tone="muted")


def rows_of(path: Path, row: type[Request] = RequestRecord) -> list[Request]:
    """The requests of one requests.jsonl, each read as `row`; a row that is not one is
    UnreadableRun, naming the file, the line and the key."""
    rows = []
    for number, line in enumerate(read_regular_text(path, RUN_FILE_LIMIT).splitlines(), start=1):
        try:
            rows += [row.model_validate_json(line)] if line.strip() else []
        except ValidationError as exc:
            raise UnreadableRun(f"{path}: line {number}: {first_problem(exc)}") from None
    return rows


def request_rows(run: LoadedRun, case_id: str) -> list[RequestRecord]:
    """Every request of every run of a serving case's burst, as its requests.jsonl recorded it."""
    return [row for path in sorted((run.path / "cases" / case_id / "runs").glob("*/requests.jsonl")) for row in rows_of(path)]


def serve_charts(run: LoadedRun, cases: list[Case], served: list[tuple[Case, Result]]) -> list[Chart]:
    """Output throughput per engine, one panel per model, a mark where an engine did not serve;
    then the latency distribution of every finished request."""
    bars = [bar for case in cases if (bar := case_bar(run, case, "output_throughput", label=case.method))]
    ttft, latency = [], []
    for case, _ in served:
        finished = [row for row in request_rows(run, case.id) if row.ok]
        label = f"{case.model} {case.method}"
        ttft.append(charts.CdfSeries(label=label, values=[row.ttft for row in finished if row.ttft is not None]))
        latency.append(charts.CdfSeries(label=label, values=[row.latency for row in finished]))
    throughput = Chart(title="Output throughput per engine",
                       caption="Output tokens/s over each burst, one panel per model; a mark in the place of an engine "
                               f"that served no figure, hatched where a figure is invalid. {bars_note(b.runs for b in bars if b.value)}",
                       svg=charts.bar_chart("serve-throughput", bars, "output tokens/s", panels=True))  # fmt: skip
    if not any(series.values for series in ttft + latency):
        return [throughput]  # no requests.jsonl kept (a run directory cut down to its results)
    return [
        throughput,
        Chart(title="Latency distribution",
              svg=charts.cdf_chart("serve-latency", [("Time to first token", ttft), ("End-to-end latency", latency)], "s"),
              caption="Empirical CDF over every finished request of every run (requests.jsonl): the share of requests "
                      "answered within a given time; a long tail shows where a median hides it."),
    ]  # fmt: skip


def serve_section(stage: Stage, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """Each engine's burst: throughput and the latency distribution as pictures, then throughput
    beside its roofline bound and the latency percentiles, then every measured metric."""
    section = generic_stage(stage, run)
    served = [(case, run.results[case.id]) for case in stage_cases(run, stage.name)
              if has_metrics(run.results.get(case.id), "output_throughput")]  # fmt: skip
    cases = [case for case in stage_cases(run, stage.name) if case.id in run.info.selected]
    if served:
        section.charts.extend(serve_charts(run, cases, served))
    rows = []
    for case in stage_cases(run, stage.name):
        result = run.results.get(case.id)
        name = Cell(text=f"{case.model} {case.method}", detail=f"{case.id}, {devices_text(case)}", tone="strong")
        if result is None or result.status != "ok":
            rows.append(Row(cells=[name, status_cell(result, case.id in run.info.selected, len(SERVE_COLUMNS) + 2)]))
            continue
        measured = [metric_cell(result, metric) for metric, _ in SERVE_COLUMNS]
        if run.invalid.get(case.id):
            measured[0] = measured[0].model_copy(update={"detail": f"invalid: {run.invalid[case.id][0]}", "tone": "bad"})
        failed = metric_cell(result, "error_rate", "%")
        rows.append(Row(cells=[name, measured[0], _serving_bound(result), *measured[1:], failed]))
    section.tables.insert(
        0,
        Table(
            caption=f"{section.title}: the burst of each engine",
            header=["Case", SERVE_COLUMNS[0][1], "bound (tokens/s)", *[label for _, label in SERVE_COLUMNS[1:]],
                    "failed (%)"],
            widths=[15, 10, 10, 9, 9, 9, 9, 10, 10, 9],
            rows=rows,
            dense=True,
            notes=[
                "Definitions are those of vLLM's `vllm bench serve`: TTFT from sending a request to its first token "
                "event; ITL, the gaps between successive token events of a request, each stamped as the client reads "
                "it (events read together are microseconds apart, so a median ITL near zero says they arrived in "
                "bursts); E2E from sending to the end of the stream; throughput over the burst's duration, from its "
                "release to the end of its last request. failed: the share of the burst's requests that did not "
                "finish (an HTTP error, a stream cut short); the other figures are of those that did.",
                "bound: the roofline's ceiling on output tokens/s for this burst on this host's GPUs (weights and KV "
                "cache read once per decode step, FLOPs at the dense peak of manifests/hardware.yaml); none where no "
                "peak is known, with the reason. A throughput past it is impossible, marked invalid.",
                runs_note(run.results[c.id] for c in cases if c.id in run.results),
            ],
        )
    )
    return section


SERVE = Stage(
    name="serve", title="Serving throughput and latency", section=serve_section, case_metrics=serve_case_metrics,
    headline="output_throughput",
    purpose="output tokens/s beside its roofline bound, requests/s and the per-request latency distribution "
    "of each engine under a burst (paper Sec. V)",
)  # fmt: skip
