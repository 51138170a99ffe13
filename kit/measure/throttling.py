"""Whether a case was measured on a slowed GPU: its power cap, its temperature or a hardware
slowdown (kit.host.clock_events' performance-limiting reasons) in any NVML sample of a measured
window (kit.measure.telemetry). Such a figure is the GPU's under that limit, not its own: the case's
notes, its row in the report and page one say so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kit.host.clock_events import PERFORMANCE_LIMITING_REASONS
from kit.rundir.schema import DeviceTelemetry, RankSample, RunSample


def limiting_reasons(telemetry: DeviceTelemetry | None) -> dict[str, int]:
    """Each performance-limiting reason of one window, with the samples that carried it."""
    if telemetry is None:
        return {}
    return {
        name: count
        for name, count in telemetry.clock_event_reasons.items()
        if name in PERFORMANCE_LIMITING_REASONS and count
    }


def _windows(rank: RankSample) -> list[DeviceTelemetry]:
    """A rank's readings: its soak windows' where it has them (a serving soak's rank telemetry is
    its first burst's), else its measured window's."""
    readings = [window.telemetry for window in rank.windows] if rank.windows else [rank.telemetry]
    return [telemetry for telemetry in readings if telemetry is not None]


@dataclass(frozen=True)
class Throttled:
    """The limiting reasons a case's measured windows carried, and in how many of their samples."""

    reasons: dict[str, int]  # reason -> samples that carried it, most first
    samples: int  # samples whose reason mask was read, over every run and rank
    runs: list[int]
    lowest_clock_mhz: int | None
    hottest_c: int | None

    @property
    def short(self) -> str:
        """ "throttled: sw_power_cap in 40 of 1200 samples", for a table's cell."""
        return "throttled: " + ", ".join(
            f"{name} in {count} of {self.samples} samples" for name, count in self.reasons.items()
        )

    @property
    def note(self) -> str:
        """ "measured while throttled: sw_power_cap in 40 of 1200 samples (run 2), SM clock down to
        1410 MHz, up to 84 °C", for the case's notes."""
        which = self.short.removeprefix("throttled: ")
        runs = f"run{'s' if len(self.runs) > 1 else ''} {', '.join(map(str, self.runs))}"
        extra = ([f"SM clock down to {self.lowest_clock_mhz} MHz"] if self.lowest_clock_mhz is not None else []) + (
            [f"up to {self.hottest_c} °C"] if self.hottest_c is not None else []
        )
        return f"measured while throttled: {which} ({runs})" + "".join(f", {part}" for part in extra)


def throttling(runs: Sequence[RunSample]) -> Throttled | None:
    """What limited the case's GPUs in its measured windows, or None where no sample of any rank
    carried a limiting reason."""
    reasons: Counter[str] = Counter()
    samples, throttled_runs, clocks, temperatures = 0, [], [], []
    for run in runs:
        readings = [telemetry for rank in run.ranks for telemetry in _windows(rank) if telemetry.clock_event_samples]
        found = [limiting_reasons(telemetry) for telemetry in readings]
        samples += sum(telemetry.clock_event_samples for telemetry in readings)
        if any(found):
            throttled_runs.append(run.index)
            for each in found:
                reasons.update(each)
            clocks += [t.sm_clock_mhz_min for t in readings if t.sm_clock_mhz_min is not None]
            temperatures += [t.temperature_c_max for t in readings if t.temperature_c_max is not None]
    if not reasons:
        return None
    return Throttled(
        reasons=dict(reasons.most_common()),
        samples=samples,
        runs=throttled_runs,
        lowest_clock_mhz=min(clocks, default=None),
        hottest_c=max(temperatures, default=None),
    )


def throttle_notes(runs: Sequence[RunSample]) -> list[str]:
    """The case's note where its measured windows were throttled; none otherwise."""
    found = throttling(runs)
    return [found.note] if found else []
