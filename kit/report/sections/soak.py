"""The soak section: each soak case's windows one after another, its first minute against its last, and
a chart of throughput, clocks and temperature over time (figures: kit.measure.soak)."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from kit.measure.unit import StageUnit
from kit.plan.protocol import Protocol
from kit.report import charts
from kit.report.cells import metric_of, status_cell, throttle_marked
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.sections.common import stage_cases
from kit.units import format_value

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun
from kit.measure.soak import READINGS, run_windows


def _change(first: float | None, last: float | None, unit: str) -> Cell:
    if first is None or last is None:
        return Cell(text="not measured", tone="muted")
    return Cell(
        text=f"{format_value(first)} → {format_value(last)} {unit}", detail=f"last / first {format_value(last / first)}"
    )


def soak_section(stage: StageUnit, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """A row per soak case (first window against last) and a chart of its windows over time."""
    section = Section(anchor=stage.name, title=stage.title)
    rows: list[Row] = []
    throughput: list[charts.TimeSeries] = []
    clocks: list[charts.TimeSeries] = []
    temperatures: list[charts.TimeSeries] = []
    for case in stage_cases(run, stage.name):
        result = run.results.get(case.id)
        soak = case.soak
        assert soak is not None  # a soak stage's cases are soak cases (kit/plan/soak.py)
        label = Cell(
            text=case.id,
            detail=f"{format_value(soak.seconds / 60)} min, windows of {format_value(soak.window_s)} s",
            tone="strong",
        )
        if result is None or result.status != "ok":
            status = status_cell(result, case.id in run.info.selected, colspan=5)
            rows.append(Row(cells=[label, status.model_copy(update={"detail": result.reason if result else None})]))
            continue
        windows = run_windows(result.samples[0])
        first, last = windows[0], windows[-1]
        ratio = metric_of(result, "sustained_ratio").mean
        held = throttle_marked(
            Cell(
                text=f"{format_value(first.throughput)} → {format_value(last.throughput)} tokens/s",
                detail=f"last / first {format_value(ratio)}",
                tone="good" if ratio >= 0.95 else "warn",
            ),
            result,
        )
        rows.append(
            Row(
                cells=[
                    label,
                    Cell(text=f"{len(windows)} × {format_value(statistics.fmean(w.seconds for w in windows))} s"),
                    held,
                    *(_change(getattr(first, name), getattr(last, name), unit) for name, unit in READINGS.items()),
                ]
            )
        )
        minutes = [(w.started_s + w.seconds / 2) / 60 for w in windows]
        throughput.append(
            charts.TimeSeries(
                label=case.id, points=[(m, 100 * w.throughput / first.throughput) for m, w in zip(minutes, windows)]
            )
        )
        for series, name in ((clocks, "sm_clock_mhz"), (temperatures, "temperature_c")):
            points = [(m, getattr(w, name)) for m, w in zip(minutes, windows) if getattr(w, name) is not None]
            if points:
                series.append(charts.TimeSeries(label=case.id, points=points))
    section.paragraphs.append(
        "Each case measured on end for as long as `kit run --soak` asked, in windows of at most a minute: whether the "
        "host holds its speed once warm, as a buyer accepting a server asks. A window's throughput is the tokens of all "
        "its processes over the longest of their times (a burst: its output tokens over the burst)."
    )
    section.tables.append(
        Table(
            caption="Sustained load: the first window (the first minute) against the last",
            header=["Case", "Windows", "Throughput", "SM clock", "Temperature", "Power per GPU"],
            widths=[24, 13, 20, 15, 13, 15],
            rows=rows,
            notes=[
                "Throughput marked amber: the last window below 95 % of the first, or a window measured while throttled "
                "(kit.measure.throttling). SM clock: the mean of the window's NVML samples; temperature: the hottest sample; "
                "power: the mean per GPU. Every window's figures are in the rank files (runs/1/rank-<r>.json, windows)."
            ],
        )
    )
    panels = [("Throughput", "% of the first window", throughput)]
    panels += [("SM clock", "MHz", clocks)] if clocks else []
    panels += [("Temperature", "°C (hottest GPU)", temperatures)] if temperatures else []
    if throughput:
        section.charts.append(
            Chart(
                title="Sustained load over time",
                svg=charts.time_chart("soak", panels),
                caption="Each window at its middle: throughput against the first window's"
                + (
                    ", the SM clock and the temperature NVML read."
                    if clocks
                    else "; no SM clock or temperature (no NVML reading: a CPU run)."
                ),
            )
        )
    return section
