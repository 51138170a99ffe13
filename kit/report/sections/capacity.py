"""The report's serving capacity section: each engine's sweep, point by point, held to the latency
objectives the report is given (kit.measure.slo), and the largest throughput within them.

Every figure is computed from the points' rows (kit.measure.capacity), so a run is held to any
objectives without being measured again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kit.measure.capacity import sweep_points as pooled_points
from kit.measure.slo import Slo, SweepPoint, at_sweep_cap, capacity
from kit.plan.protocol import Case
from kit.report import charts
from kit.report.cells import devices_text, percent
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.rundir.schema import Result
from kit.units import format_value

ANCHOR = "capacity"
Capacities = Mapping[str, list[SweepPoint]]  # serve case id -> its sweep's points


def sweep_points(run: LoadedRun, result: Result, slo: Slo) -> list[SweepPoint]:
    """The points of a serve case's sweep over every run, held to `slo` (kit.measure.capacity)."""
    case_dir = run.path / "cases" / result.case_id
    return pooled_points(case_dir, result.samples, slo, run.invalid.get(result.case_id, []))


def sweep_capacities(run: LoadedRun, slo: Slo) -> dict[str, list[SweepPoint]]:
    """Every ok serve case's sweep that has points, by case id, in plan order."""
    found = {}
    for case in run.info.plan.cases:
        result = run.results.get(case.id)
        if case.workload == "serve" and result is not None and result.status == "ok":
            points = sweep_points(run, result, slo)
            if points:
                found[case.id] = points
    return found


def ms(seconds: float) -> str:
    return f"{format_value(1000 * seconds)} ms"


def _percentiles(distribution, scale: float) -> str:
    if distribution is None:
        return "none finished"
    return " / ".join(
        format_value(scale * value) for value in (distribution.median, distribution.p90, distribution.p99)
    )


def within_cell(point: SweepPoint) -> Cell:
    if point.invalid:
        return Cell(text="invalid", detail=point.invalid, tone="bad")
    if point.cut_short:
        return Cell(text="cut short", detail="the case's time ran out during it", tone="warn")
    if point.client_limited:
        return Cell(text="not judged", detail=point.not_judged, tone="warn")
    if point.judged.meets:
        return Cell(text="yes", tone="good")
    return Cell(text="no", detail=point.judged.why_not, tone="bad")


def bound_cell(point: SweepPoint) -> Cell:
    """The roofline's ceiling at the point's concurrency (why there is none: in the table's notes)."""
    if point.bound_tokens_per_s is None:
        return Cell(text="none", tone="muted")
    ratio = point.figures.output_throughput / point.bound_tokens_per_s
    return Cell(
        text=format_value(point.bound_tokens_per_s),
        detail=f"measured {format_value(ratio)} × bound" + (": invalid" if ratio > 1 else ""),
        tone="bad" if ratio > 1 else "plain",
    )


def point_row(point: SweepPoint) -> Row:
    figures = point.figures
    return Row(
        cells=[
            Cell(text=str(point.concurrency)),
            Cell(text=str(figures.requests)),
            Cell(text="invalid", detail=format_value(figures.output_throughput), tone="bad")
            if point.invalid
            else Cell(text=format_value(figures.output_throughput)),
            Cell(text=format_value(figures.request_throughput)),
            Cell(text=_percentiles(figures.ttft_s, 1)),
            Cell(text=_percentiles(figures.tpot_s, 1000)),
            Cell(text=percent(figures.error_rate), tone="bad" if figures.errors else "plain"),
            Cell(text=format_value(point.judged.goodput), detail=f"{percent(point.judged.good_share)} of requests"),
            within_cell(point),
            bound_cell(point),
        ]
    )


def case_label(case: Case) -> str:
    return f"{case.model} {case.method}, {devices_text(case)}"


def capacity_figure(points: Sequence[SweepPoint], best: SweepPoint) -> str:
    """The capacity's tokens/s, "≥" where it is the sweep's largest concurrency (a lower bound)."""
    return ("≥ " if at_sweep_cap(points, best) else "") + format_value(best.figures.output_throughput)


def capacity_cells(points: Sequence[SweepPoint]) -> tuple[Cell, Cell]:
    """The capacity of a sweep in words, and its latencies (or why no point meets the objectives,
    or why the point that would is invalid)."""
    best = capacity(points)
    if best is None:
        first = next((point for point in points if point.invalid and point.judged.meets), points[0])
        if first.invalid:
            return (
                Cell(text=f"invalid: {first.invalid}", tone="bad"),
                Cell(text=f"concurrency {first.concurrency}: not a measurement", tone="bad"),
            )
        return (
            Cell(text="none within the objectives"),
            Cell(text=f"concurrency {first.concurrency}: {first.not_judged or first.judged.why_not}"),
        )
    cap = " (the largest tried: a lower bound)" if at_sweep_cap(points, best) else ""
    return (
        Cell(text=f"{capacity_figure(points, best)} tokens/s at concurrency {best.concurrency}{cap}"),
        Cell(
            text=f"p99 TTFT {format_value(best.judged.ttft_p99_s)} s, p99 TPOT {ms(best.judged.tpot_p99_s)}; goodput "
            f"{format_value(best.judged.goodput)} requests/s; {percent(best.figures.error_rate)} failed"
        ),
    )


def pareto_charts(run: LoadedRun, capacities: Capacities, slo: Slo) -> list[Chart]:
    """One chart per model: each engine's points, throughput against its p99 latencies."""
    cases = [case for case in run.info.plan.cases if case.id in capacities]
    charts_ = []
    for model in dict.fromkeys(case.model for case in cases):
        series = [
            charts.ParetoSeries(
                label=f"{case.method}, {devices_text(case)}",
                points=[
                    charts.ParetoPoint(
                        concurrency=p.concurrency,
                        tokens_per_s=p.figures.output_throughput,
                        ttft_p99_s=p.judged.ttft_p99_s,
                        tpot_p99_s=p.judged.tpot_p99_s,
                        meets=p.counted,
                        invalid=p.invalid is not None,
                    )
                    for p in capacities[case.id]
                ],
            )
            for case in cases
            if case.model == model
        ]
        charts_.append(
            Chart(
                title=f"Throughput against latency, {model}",
                svg=charts.pareto_chart(f"serve-pareto-{model}", series, slo.ttft_s, slo.tpot_s),
                caption=f"Each engine's sweep, one point per concurrency (its number beside it), output tokens/s against "
                f"the p99 of the time per output token and of the time to first token; a filled point meets both "
                f"objectives ({slo.describe()}, dashed) and is judged (neither cut short nor limited by the "
                "client); a point labelled invalid is past its physical bound or of an invalid case, no measurement. "
                "Up and to the left is better; the capacity is the highest filled point.",
            )
        )
    return charts_


def _capacity_bound(points: Sequence[SweepPoint]) -> Cell:
    best = capacity(points)
    if best is None:
        return Cell(text="none", detail="no point within the objectives", tone="muted")
    return bound_cell(best) if best.bound_tokens_per_s else Cell(text="none", detail=best.bound_note, tone="muted")


def capacity_section(run: LoadedRun, capacities: Capacities, slo: Slo) -> Section:
    """Each engine's capacity within the objectives, the chart of its points, and every point."""
    title = "Serving capacity within latency objectives"
    paragraphs = [
        "After each engine's burst, on the same engine, the kit measured steady-state points: at concurrency N, N "
        "requests in flight until the point's requests were done, the next sent as one ended (as `vllm bench serve "
        "--max-concurrency N` does), every prompt new and as long as the burst's. Every request's row is kept "
        "(runs/<k>/sweep/c<N>/requests.jsonl) and every figure here is computed from them; a case of several runs "
        "pools each point's rows over its runs.",
        f"Objectives: {slo.describe()}. Goodput: the requests per second that met both, each by its own TTFT and "
        "TPOT (vLLM's request goodput); a failed request meets neither. A point is within the objectives when the "
        "p99 of its requests' TTFT and TPOT, a failed request counted as never answered, are within them; the "
        "capacity is the highest output throughput of such a point that is judged. A point is not judged where its "
        "latencies may not be the server's: the case's time cut it short, or the client may have limited it (the "
        "kit's saturation check: the client's CPU share, its event loop's lag against the TPOT). The objectives are "
        "options of the report (kit report --slo-ttft-ms, --slo-tpot-ms): the same run is held to others by "
        "rendering it again.",
    ]
    if not capacities:
        return Section(
            anchor=ANCHOR, title=title, paragraphs=paragraphs, not_run="no serve case of the run measured a sweep"
        )
    cases = [case for case in run.info.plan.cases if case.id in capacities]
    summary = Table(
        caption="Capacity: the most output tokens/s within the objectives, per engine and model",
        header=["Case", "Capacity", "At it", "Bound at it (tokens/s)"],
        widths=[25, 25, 34, 16],
        rows=[
            Row(
                cells=[
                    Cell(text=case_label(case), detail=case.id, tone="strong"),
                    *capacity_cells(capacities[case.id]),
                    _capacity_bound(capacities[case.id]),
                ]
            )
            for case in cases
        ],
    )
    rows = []
    for case in cases:
        rows.append(Row(heading=True, cells=[Cell(text=case_label(case), detail=case.id, tone="strong", colspan=10)]))
        rows += [point_row(point) for point in capacities[case.id]]
    points = Table(
        caption="Every point of every sweep",
        header=[
            "N",
            "requests",
            "output tokens/s",
            "requests/s",
            "TTFT p50 / p90 / p99 (s)",
            "TPOT p50 / p90 / p99 (ms)",
            "failed",
            "goodput (requests/s)",
            "within objectives",
            "bound (tokens/s)",
        ],
        widths=[5, 7, 10, 9, 15, 15, 7, 11, 11, 10],
        rows=rows,
        dense=True,
        notes=[
            "Latency percentiles are over the requests that finished (vLLM's definitions, as in the burst's "
            "table); failed: the share of the point's requests that did not finish; bound: the roofline of N "
            "requests served as one batch on this host's GPUs (kit.plan.predictions.concurrency_bound)"
            + "".join(
                f"; none: {note}"
                for note in sorted(
                    {
                        p.bound_note
                        for points in capacities.values()
                        for p in points
                        if p.bound_tokens_per_s is None and p.bound_note
                    }
                )
            )
            + "."
        ],
    )  # printed whole: its ten columns do not fit a line of the monospace listing
    return Section(
        anchor=ANCHOR,
        title=title,
        paragraphs=paragraphs,
        tables=[summary, points],
        charts=pareto_charts(run, capacities, slo),
    )


def capacity_part(run: LoadedRun, slo: Slo) -> tuple[Section, Capacities]:
    """The section and the sweeps it shows (page one reads them too), from one reading of the rows."""
    capacities = sweep_capacities(run, slo)
    return capacity_section(run, capacities, slo), capacities
