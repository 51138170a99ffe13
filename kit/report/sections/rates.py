"""The report's rate search section: each engine's capacity at a rate within the latency
objectives, stated as the interval between the highest rate that met them and the lowest that did
not, with every point the search ran (kit.serve.rate), its p99s and their intervals, the test of
its arrivals and its backlog. The figures are those the run recorded from each point's rows
(runs/<k>/rates/p<n>/requests.jsonl); the objectives are the run's own (the search chose its
next rate by them), stated beside the answer.
"""

from __future__ import annotations

from kit.plan.protocol import Case
from kit.report.cells import devices_text
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Row, Section, Table
from kit.report.sections.common import served_runs
from kit.rundir.serving import QuantileInterval, RateDetails, RatePointDetails
from kit.units import format_value

ANCHOR = "rate-capacity"


def rate_searches(run: LoadedRun) -> list[tuple[Case, int, RateDetails]]:
    """Every ok serve case's rate search, run by run, in plan order."""
    return [(case, index, details.rates) for case, index, details in served_runs(run) if details.rates is not None]


def answer(search: RateDetails) -> tuple[str, str]:
    """The capacity in words and its interval, or why the search found none."""
    if search.capacity_rps is None:
        first = search.points[0] if search.points else None
        why = f"{format_value(first.rate_rps)} requests/s: {first.why_not}" if first else search.stopped
        return "none within the objectives", why
    if search.missed_rps is None:
        return (
            f"at least {format_value(search.capacity_rps)} requests/s",
            f"no rate tried missed the objectives ({search.stopped})",
        )
    return (
        f"{format_value(search.capacity_rps)} requests/s",
        f"between {format_value(search.capacity_rps)} (met) and {format_value(search.missed_rps)} (missed)",
    )


def interval_text(p99: float | None, interval: QuantileInterval, scale: float) -> str:
    if p99 is None:
        return "none finished"
    low = format_value(scale * interval.low) if interval.low is not None else "?"
    high = format_value(scale * interval.high) if interval.high is not None else f"unbounded at n={interval.n}"
    return f"{format_value(scale * p99)} [{low}, {high}]"


def point_row(point: RatePointDetails) -> Row:
    figures = point.aggregates
    queue = point.backlog
    arrivals = point.arrivals
    return Row(
        cells=[
            Cell(text=format_value(point.rate_rps)),
            Cell(text=f"{point.sent} of {point.planned}"),
            Cell(text=format_value(figures.request_throughput)),
            Cell(text=format_value(figures.output_throughput)),
            Cell(text=interval_text(figures.ttft_s.p99 if figures.ttft_s else None, point.ttft_p99, 1)),
            Cell(text=interval_text(figures.tpot_s.p99 if figures.tpot_s else None, point.tpot_p99, 1000)),
            Cell(
                text="—" if arrivals is None else f"p = {arrivals.p_value:.2g}",
                detail=None if arrivals is None else f"KS D {arrivals.ks_statistic:.3f}, {arrivals.gaps} gaps",
                tone="plain" if arrivals is None or arrivals.passes else "warn",
            ),
            Cell(
                text="past saturation" if queue.saturated else "kept up",
                detail=queue.why
                or f"ended {format_value(queue.completed_rps)}/s, sent {format_value(queue.offered_rps)}/s",
                tone="bad" if queue.saturated else "plain",
            ),
            Cell(text="yes", tone="good")
            if point.meets
            else Cell(text="no", detail="past saturation" if queue.saturated else point.why_not, tone="bad"),
        ]
    )


def case_label(case: Case, index: int) -> str:
    return f"{case.model} {case.method}, {devices_text(case)}, run {index}"


def rates_section(run: LoadedRun) -> Section:
    """Each engine's capacity at a rate within the objectives, and every point of its search."""
    title = "Serving capacity at a rate"
    paragraphs = [
        "After the burst and the sweep, on the same engine, the kit sent requests at a rate: each at its own "
        "arrival time (a seeded Poisson process, as MLPerf Inference's Server scenario sends them, unless the case "
        "says constant), whatever was in flight, every prompt new and as long as the burst's. The search doubled "
        "the rate until a point missed the objectives, then bisected between the highest rate that met them and "
        "the lowest that did not, within its time cap. A point meets them when the p99 of its requests' TTFT and "
        "TPOT (a failed request never answered) are within them by more than the client's largest event loop lag, "
        "the engine kept up (past saturation: requests ended slower than they arrived while the requests in flight "
        "grew) and its time did not run out. The capacity is an interval: the true one lies between the rate that "
        "met and the one that missed.",
        "p99 [low, high]: the 95 % interval of the p99 from the order statistics of the point's requests alone; "
        "unbounded where too few requests bound it from above (about 300 are needed). Arrivals: the Kolmogorov-Smirnov "
        "test of the gaps between the send times the client recorded against the exponential distribution of the "
        "point's rate (a Poisson process passes at p ≥ 0.01). Every request's row is kept in "
        "runs/<k>/rates/p<n>/requests.jsonl.",
    ]
    searches = rate_searches(run)
    if not searches:
        return Section(
            anchor=ANCHOR, title=title, paragraphs=paragraphs, not_run="no serve case of the run searched a rate"
        )
    summary = Table(
        caption="Capacity at a rate: the highest request rate within the objectives, per engine and model",
        header=["Case", "Capacity", "Interval (requests/s)", "Objectives (the run's)", "Lengths", "Points", "Stopped"],
        widths=[18, 13, 17, 14, 16, 6, 16],
        rows=[
            Row(
                cells=[
                    Cell(text=case_label(case, index), detail=case.id, tone="strong"),
                    *(Cell(text=text) for text in answer(search)),
                    Cell(
                        text=f"p99 TTFT ≤ {format_value(1000 * search.slo_ttft_s)} ms, TPOT ≤ "
                        f"{format_value(1000 * search.slo_tpot_s)} ms"
                    ),
                    Cell(text=search.lengths or "the burst's"),
                    Cell(text=str(len(search.points))),
                    Cell(text=search.stopped),
                ]
            )
            for case, index, search in searches
        ],
    )
    rows = []
    for case, index, search in searches:
        rows.append(
            Row(heading=True, cells=[Cell(text=case_label(case, index), detail=case.id, tone="strong", colspan=9)])
        )
        rows += [point_row(point) for point in search.points]
    points = Table(
        caption="Every point of every rate search, in the order run",
        header=[
            "rate (requests/s)",
            "sent",
            "requests/s",
            "output tokens/s",
            "TTFT p99 [95 %] (s)",
            "TPOT p99 [95 %] (ms)",
            "arrivals",
            "backlog",
            "within objectives",
        ],
        widths=[9, 8, 9, 9, 15, 15, 10, 14, 11],
        rows=rows,
        dense=True,
    )
    return Section(anchor=ANCHOR, title=title, paragraphs=paragraphs, tables=[summary, points])
