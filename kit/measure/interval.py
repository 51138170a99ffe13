"""The 95 % Student-t interval of a mean over a case's independent runs: what an acceptance line is
judged on (kit.reference.acceptance), and what a run repeating a case until it is narrow watches
(kit.execute.narrowing)."""

from __future__ import annotations

import math
import statistics

# Student's t, two-sided 95 % (the 0.975 quantile) by degrees of freedom: NIST/SEMATECH
# e-Handbook of Statistical Methods, 1.3.6.7.2, "Critical values of the Student's t distribution".
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
T_975_LARGE = {20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}


def t_quantile(degrees_of_freedom: int) -> float:
    """Student's t at 0.975 for the degrees of freedom (the table's next smaller entry beyond 10)."""
    if degrees_of_freedom <= len(T_975):
        return T_975[degrees_of_freedom - 1]
    below = [t for df, t in sorted(T_975_LARGE.items()) if df <= degrees_of_freedom]
    return below[-1] if below else T_975[-1]


def mean_interval(values: list[float]) -> tuple[float, float] | None:
    """The 95 % Student-t interval of the mean; None for fewer than two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean - half, mean + half


def relative_halfwidth(values: list[float]) -> float | None:
    """The interval's half-width as a share of the mean (0.04: ± 4 %); None for fewer than two
    values or a mean of zero."""
    interval = mean_interval(values)
    if interval is None or statistics.fmean(values) == 0:
        return None
    return (interval[1] - interval[0]) / 2 / abs(statistics.fmean(values))


def runs_to_narrow(values: list[float], halfwidth: float, most: int) -> int:
    """How many runs, at the spread `values` show, make the interval at most ± `halfwidth` of the
    mean: the least such count, or `most` where even that many would not."""
    if len(values) < 2:
        return min(2, most)
    mean = statistics.fmean(values)
    variation = statistics.stdev(values) / abs(mean) if mean else math.inf
    for count in range(2, most + 1):
        if t_quantile(count - 1) * variation / math.sqrt(count) <= halfwidth:
            return count
    return most
