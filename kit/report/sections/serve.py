"""The serving section (paper Sec. V): each engine's burst, throughput beside its roofline bound,
requests/s and the latency distribution per request (figures: kit.measure.serve)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.measure.unit import StageUnit
from kit.plan.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import devices_text, has_metrics, metric_cell, status_cell
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.sections.common import (
    bars_note,
    case_bar,
    generic_stage,
    runs_note,
    stage_cases,
)
from kit.rundir.schema import Result
from kit.rundir.serving import RequestRecord, ServeDetails

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun
from kit.measure.serve import no_bound_reason, rows_of

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
    details = driver.details_as(ServeDetails) if driver else None
    reason = no_bound_reason(details) if details else "not computed"
    return Cell(text="none", detail=reason, tone="muted")


def request_rows(run: LoadedRun, case_id: str) -> list[RequestRecord]:
    """Every request of every run of a serving case's burst, as its requests.jsonl recorded it."""
    return [
        row
        for path in sorted((run.path / "cases" / case_id / "runs").glob("*/requests.jsonl"))
        for row in rows_of(path)
    ]


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
    throughput = Chart(
        title="Output throughput per engine",
        caption="Output tokens/s over each burst, one panel per model; a mark in the place of an engine "
        f"that served no figure, hatched where a figure is invalid. {bars_note(b.runs for b in bars if b.value)}",
        svg=charts.bar_chart("serve-throughput", bars, "output tokens/s", panels=True),
    )
    if not any(series.values for series in ttft + latency):
        return [throughput]  # no requests.jsonl kept (a run directory cut down to its results)
    return [
        throughput,
        Chart(
            title="Latency distribution",
            svg=charts.cdf_chart(
                "serve-latency", [("Time to first token", ttft), ("End-to-end latency", latency)], "s"
            ),
            caption="Empirical CDF over every finished request of every run (requests.jsonl): the share of requests "
            "answered within a given time; a long tail shows where a median hides it.",
        ),
    ]


def serve_section(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """Each engine's burst: throughput and the latency distribution as pictures, then throughput
    beside its roofline bound and the latency percentiles, then every measured metric."""
    section = generic_stage(stage, run)
    served = [
        (case, run.results[case.id])
        for case in stage_cases(run, stage.name)
        if has_metrics(run.results.get(case.id), "output_throughput")
    ]
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
            measured[0] = measured[0].model_copy(
                update={"detail": f"invalid: {run.invalid[case.id][0]}", "tone": "bad"}
            )
        failed = metric_cell(result, "error_rate", "%")
        rows.append(Row(cells=[name, measured[0], _serving_bound(result), *measured[1:], failed]))
    section.tables.insert(
        0,
        Table(
            caption=f"{section.title}: the burst of each engine",
            header=[
                "Case",
                SERVE_COLUMNS[0][1],
                "bound (tokens/s)",
                *[label for _, label in SERVE_COLUMNS[1:]],
                "failed (%)",
            ],
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
        ),
    )
    return section
