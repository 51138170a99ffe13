"""Numbers and units as the report shows them and a published value is written: the units a value
may carry, converting between them, and a figure's significant digits.
"""

from __future__ import annotations

import math
from typing import Annotated, NamedTuple

from pydantic import AfterValidator

# Units a published value may be written in: each is (dimension, factor to the dimension's base).
UNITS: dict[str, tuple[str, float]] = {
    "tokens/s": ("throughput", 1.0),
    "10^3 tokens/s": ("throughput", 1e3),
    "GB": ("memory", 1e9),
    "GiB": ("memory", 2.0**30),
    "s": ("time", 1.0),
    "ms": ("time", 1e-3),
    "us": ("time", 1e-6),
    "TFLOP/s": ("flops", 1e12),
    "GB/s": ("bandwidth", 1e9),
    "fraction": ("fraction", 1.0),
    "%": ("fraction", 0.01),
}


def _known_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r} (known: {', '.join(UNITS)})")
    return unit


Unit = Annotated[str, AfterValidator(_known_unit)]


def format_value(value: float, significant: int = 3, trim: bool = False) -> str:
    """A number with about `significant` digits and no exponent in the usual range; `trim`
    drops trailing zeros (for published values, which carry no measurement precision)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 7 or magnitude < -3:
        return f"{value:.{significant - 1}e}"
    text = f"{value:.{max(0, significant - 1 - magnitude)}f}"
    return text.rstrip("0").rstrip(".") if trim and "." in text else text


class Scale(NamedTuple):
    """How a relation's numbers are shown: fractions as per cent, ratios with x, else a unit."""

    factor: float
    suffix: str
    difference_suffix: str

    def show(self, value: float, trim: bool = False) -> str:
        return f"{format_value(value * self.factor, trim=trim)}{self.suffix}"

    def show_difference(self, value: float, trim: bool = False) -> str:
        return f"{format_value(abs(value) * self.factor, trim=trim)}{self.difference_suffix}"


TIMES = Scale(1.0, " ×", "")
PERCENT = Scale(100.0, " %", " points")


def unit_scale(unit: str | None) -> Scale:
    if unit in ("fraction", "%"):
        return PERCENT
    if unit is None:
        return Scale(1.0, "", "")
    return Scale(1.0, f" {unit}", f" {unit}")


METRIC_LABELS = {
    "tokens_per_s": "tokens/s",
    "step_time_s": "step time",
    "peak_memory_gib": "peak memory",
    "achieved_tflops": "achieved TFLOP/s",
    "mfu": "MFU",
    "output_throughput": "output tokens/s",
    "latency_median_s": "median request latency",
    "duration_s": "burst duration",
}


def metric_label(metric: str) -> str:
    """The kit's own metrics in words; metrics of stages still to come keep their names."""
    return METRIC_LABELS.get(metric, metric)


def convert(value: float, from_unit: str, to_unit: str) -> float | None:
    """`value` in `from_unit` expressed in `to_unit`; None when the two measure different things."""
    if from_unit == to_unit:
        return value
    if from_unit not in UNITS or to_unit not in UNITS:
        return None
    (from_dim, from_factor), (to_dim, to_factor) = UNITS[from_unit], UNITS[to_unit]
    return value * from_factor / to_factor if from_dim == to_dim else None


def counted(count: int, noun: str) -> str:
    """A count and its noun, singular for one: "1 GPU", "8 GPUs"."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def binary_size(size: float) -> str:
    """A size in bytes in its largest binary unit ("1 GiB", "256 KiB"), as message sizes are said."""
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            return f"{size / factor:g} {unit}"
    return f"{size:g} B"
