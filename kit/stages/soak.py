"""The soak (`kit run --soak MINUTES`, kit/soak_plan.py): each soak case's windows one after another,
its first window (the first minute) against its last (the last minute) in throughput, SM clock,
temperature and power, and a chart of them over the soak. A window's throughput is the tokens
all of its processes produced over the longest of their times for it (a training step lasts
as long as its slowest rank), or a burst's output tokens over the burst.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kit.hardware import HardwareTable
from kit.metrics import summarize
from kit.protocol import Case, Protocol
from kit.report import charts
from kit.report.cells import status_cell, throttle_marked
from kit.report.model import Cell, Chart, Row, Section, Table
from kit.report.stage_common import stage_cases
from kit.results import Metric, RunSample
from kit.stages.unit import Stage
from kit.telemetry import combine_gpus
from kit.throttling import limiting_reasons
from kit.units import format_value

if TYPE_CHECKING:
    from kit.report.loaded_run import LoadedRun

# Figures of a window that NVML gives (absent on a CPU), each compared first against last.
READINGS = {"sm_clock_mhz": "MHz", "temperature_c": "°C", "power_w": "W"}


class WindowFigures(BaseModel):
    """One window of a run, all of its processes together."""

    started_s: float
    seconds: float
    throughput: float  # tokens/s
    sm_clock_mhz: float | None = None  # the mean over the window's samples, of the slowest GPU's mean
    temperature_c: float | None = None  # the hottest GPU's highest sample
    power_w: float | None = None  # mean per GPU
    limiting: dict[str, int] = {}  # performance-limiting clock event reasons, samples of each


def run_windows(run: RunSample) -> list[WindowFigures]:
    """The run's windows, its processes' windows of one index taken together."""
    ranks = [rank for rank in run.ranks if rank.windows]
    if not ranks:
        raise ValueError(f"run {run.index} recorded no soak window")
    found = []
    for index in range(min(len(rank.windows) for rank in ranks)):
        parts = [rank.windows[index] for rank in ranks]
        seconds = max(window.seconds for window in parts)
        readings = [window.telemetry for window in parts if window.telemetry is not None]
        telemetry = combine_gpus(readings) if readings else None
        measured = telemetry is not None and telemetry.unavailable is None
        found.append(WindowFigures(
            started_s=min(window.started_s for window in parts), seconds=seconds,
            throughput=sum(window.tokens for window in parts) / seconds,
            sm_clock_mhz=telemetry.sm_clock_mhz_mean if measured else None,
            temperature_c=telemetry.temperature_c_max if measured else None,
            power_w=telemetry.mean_power_w if measured else None,
            limiting=limiting_reasons(telemetry) if measured else {},
        ))  # fmt: skip
    return found


def soak_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Throughput over the whole soak and in its first and last windows, their ratio (sustained:
    last / first), and the first and last window's SM clock, temperature and power where NVML
    read them."""
    per_run = [run_windows(run) for run in runs]
    found: dict[str, Metric | None] = {
        "throughput": summarize([sum(w.throughput * w.seconds for w in ws) / sum(w.seconds for w in ws) for ws in per_run], "tokens/s"),
        "throughput_first": summarize([ws[0].throughput for ws in per_run], "tokens/s"),
        "throughput_last": summarize([ws[-1].throughput for ws in per_run], "tokens/s"),
        "sustained_ratio": summarize([ws[-1].throughput / ws[0].throughput for ws in per_run], "fraction"),
        "soak_s": summarize([ws[-1].started_s + ws[-1].seconds for ws in per_run], "s"),
    }  # fmt: skip
    for name, unit in READINGS.items():
        for end, pick in (("first", 0), ("last", -1)):
            values = [getattr(ws[pick], name) for ws in per_run]
            if None not in values:
                found[f"{name}_{end}"] = summarize(values, unit)
    windows = per_run[0]
    notes = [f"{len(windows)} windows of about {format_value(statistics.fmean(w.seconds for w in windows))} s over "
             f"{format_value(found['soak_s'].mean)} s; the first window against the last"]  # fmt: skip
    if "sm_clock_mhz_first" not in found:
        notes.append("SM clock, temperature and power: not measured (no NVML reading of the windows)")
    return found, notes


def _change(first: float | None, last: float | None, unit: str) -> Cell:
    if first is None or last is None:
        return Cell(text="not measured", tone="muted")
    return Cell(text=f"{format_value(first)} → {format_value(last)} {unit}", detail=f"last / first {format_value(last / first)}")


def soak_section(stage: Stage, run: LoadedRun, protocol: Protocol | None = None) -> Section:
    """A row per soak case (first window against last) and a chart of its windows over time."""
    section = Section(anchor=stage.name, title=stage.title)
    rows, throughput, clocks, temperatures = [], [], [], []
    for case in stage_cases(run, stage.name):
        result = run.results.get(case.id)
        soak = case.params.soak
        label = Cell(text=case.id, detail=f"{format_value(soak.seconds / 60)} min, windows of {format_value(soak.window_s)} s",
                     tone="strong")  # fmt: skip
        if result is None or result.status != "ok":
            status = status_cell(result, case.id in run.info.selected, colspan=5)
            rows.append(Row(cells=[label, status.model_copy(update={"detail": result.reason if result else None})]))
            continue
        windows = run_windows(result.samples[0])
        first, last = windows[0], windows[-1]
        ratio = result.metrics["sustained_ratio"].mean
        held = throttle_marked(Cell(text=f"{format_value(first.throughput)} → {format_value(last.throughput)} tokens/s",
                                    detail=f"last / first {format_value(ratio)}", tone="good" if ratio >= 0.95 else "warn"), result)  # fmt: skip
        rows.append(Row(cells=[label, Cell(text=f"{len(windows)} × {format_value(statistics.fmean(w.seconds for w in windows))} s"),
                               held, *(_change(getattr(first, name), getattr(last, name), unit) for name, unit in READINGS.items())]))  # fmt: skip
        minutes = [(w.started_s + w.seconds / 2) / 60 for w in windows]
        throughput.append(charts.TimeSeries(label=case.id, points=[(m, 100 * w.throughput / first.throughput)
                                                                   for m, w in zip(minutes, windows)]))  # fmt: skip
        for series, name in ((clocks, "sm_clock_mhz"), (temperatures, "temperature_c")):
            points = [(m, getattr(w, name)) for m, w in zip(minutes, windows) if getattr(w, name) is not None]
            if points:
                series.append(charts.TimeSeries(label=case.id, points=points))
    section.paragraphs.append(
        "Each case measured on end for as long as `kit run --soak` asked, in windows of at most a minute: whether the "
        "host holds its speed once warm, as a buyer accepting a server asks. A window's throughput is the tokens of all "
        "its processes over the longest of their times (a burst: its output tokens over the burst)."
    )
    section.tables.append(Table(
        caption="Sustained load: the first window (the first minute) against the last",
        header=["Case", "Windows", "Throughput", "SM clock", "Temperature", "Power per GPU"],
        widths=[24, 13, 20, 15, 13, 15],
        rows=rows,
        notes=["Throughput marked amber: the last window below 95 % of the first, or a window measured while throttled "
               "(kit.throttling). SM clock: the mean of the window's NVML samples; temperature: the hottest sample; "
               "power: the mean per GPU. Every window's figures are in the rank files (runs/1/rank-<r>.json, windows)."],
    ))  # fmt: skip
    panels = [("Throughput", "% of the first window", throughput)]
    panels += [("SM clock", "MHz", clocks)] if clocks else []
    panels += [("Temperature", "°C (hottest GPU)", temperatures)] if temperatures else []
    if throughput:
        section.charts.append(Chart(
            title="Sustained load over time", svg=charts.time_chart("soak", panels),
            caption="Each window at its middle: throughput against the first window's" + (
                ", the SM clock and the temperature NVML read." if clocks else
                "; no SM clock or temperature (no NVML reading: a CPU run)."),
        ))  # fmt: skip
    return section


SOAK = Stage(
    name="soak", title="Sustained load (soak)", section=soak_section, case_metrics=soak_case_metrics, headline="throughput",
    purpose="one training case and the serving burst measured on end (kit run --soak MINUTES): throughput, clocks and "
            "temperature over time, the first minute against the last",
)  # fmt: skip
