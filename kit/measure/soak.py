"""The soak (`kit run --soak MINUTES`, kit/plan/soak.py): each soak case's windows one after another,
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

from kit.measure.metrics import summarize
from kit.measure.telemetry import combine_gpus
from kit.measure.throttling import limiting_reasons
from kit.measure.unit import StageUnit
from kit.plan.protocol import Case
from kit.rundir.schema import Metric, RunSample
from kit.theory.hardware import HardwareTable
from kit.units import format_value

if TYPE_CHECKING:
    pass

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
        measured = telemetry if telemetry is not None and telemetry.unavailable is None else None
        found.append(
            WindowFigures(
                started_s=min(window.started_s for window in parts),
                seconds=seconds,
                throughput=sum(window.tokens for window in parts) / seconds,
                sm_clock_mhz=measured.sm_clock_mhz_mean if measured else None,
                temperature_c=measured.temperature_c_max if measured else None,
                power_w=measured.mean_power_w if measured else None,
                limiting=limiting_reasons(measured) if measured else {},
            )
        )
    return found


def soak_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Throughput over the whole soak and in its first and last windows, their ratio (sustained:
    last / first), and the first and last window's SM clock, temperature and power where NVML
    read them."""
    per_run = [run_windows(run) for run in runs]
    soak_s = summarize([ws[-1].started_s + ws[-1].seconds for ws in per_run], "s")
    found: dict[str, Metric | None] = {
        "throughput": summarize(
            [sum(w.throughput * w.seconds for w in ws) / sum(w.seconds for w in ws) for ws in per_run], "tokens/s"
        ),
        "throughput_first": summarize([ws[0].throughput for ws in per_run], "tokens/s"),
        "throughput_last": summarize([ws[-1].throughput for ws in per_run], "tokens/s"),
        "sustained_ratio": summarize([ws[-1].throughput / ws[0].throughput for ws in per_run], "fraction"),
        "soak_s": soak_s,
    }
    for name, unit in READINGS.items():
        for end, pick in (("first", 0), ("last", -1)):
            values = [getattr(ws[pick], name) for ws in per_run]
            if None not in values:
                found[f"{name}_{end}"] = summarize(values, unit)
    windows = per_run[0]
    notes = [
        f"{len(windows)} windows of about {format_value(statistics.fmean(w.seconds for w in windows))} s over "
        f"{format_value(soak_s.mean)} s; the first window against the last"
    ]
    if "sm_clock_mhz_first" not in found:
        notes.append("SM clock, temperature and power: not measured (no NVML reading of the windows)")
    return found, notes


SOAK = StageUnit(name="soak", title="Sustained load (soak)", case_metrics=soak_case_metrics, headline="throughput")
