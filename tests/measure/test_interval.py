"""The 95 % interval of a mean over runs, and how many runs narrow it (kit.measure.interval)."""

from __future__ import annotations

import math
import statistics

import pytest

from kit.measure.interval import mean_interval, relative_halfwidth, runs_to_narrow, t_quantile


def test_t_quantiles_are_the_tables():
    """NIST/SEMATECH's two-sided 95 % values; beyond 10 degrees of freedom the next smaller entry."""
    assert [t_quantile(df) for df in (1, 2, 3, 10)] == [12.706, 4.303, 3.182, 2.228]
    assert t_quantile(25) == 2.086 and t_quantile(200) == 1.980


def test_the_interval_of_three_runs_is_the_t_interval():
    values = [4614.2, 4461.9, 3969.7]  # a real H200 run's three runs (tests/fixtures/gpu_results)
    low, high = mean_interval(values)
    half = 4.303 * statistics.stdev(values) / math.sqrt(3)
    assert (low, high) == pytest.approx((statistics.fmean(values) - half, statistics.fmean(values) + half))
    assert relative_halfwidth(values) == pytest.approx(half / statistics.fmean(values))
    assert mean_interval([1.0]) is None and relative_halfwidth([1.0]) is None


@pytest.mark.parametrize(
    ("variation", "halfwidth", "most", "expected"),
    [
        (0.03, 0.04, 20, 5),  # 4.303 × 3 % / √3 = 7.5 %; 3.182 × 3 % / 2 = 4.8 %; 2.776 × 3 % / √5 = 3.7 %
        (0.0, 0.04, 20, 2),
        (0.17, 0.04, 12, 12),  # would need about 70 runs: as many as allowed
    ],
)
def test_runs_to_narrow_is_the_least_count_whose_interval_is_within_the_width(variation, halfwidth, most, expected):
    values = [100 * (1 + variation * sign) for sign in (-1, 0, 1)]  # stdev = variation × mean
    assert runs_to_narrow(values, halfwidth, most) == expected
    if expected < most:
        spread = statistics.stdev(values) / statistics.fmean(values)
        assert t_quantile(expected - 1) * spread / math.sqrt(expected) <= halfwidth
        assert expected == 2 or t_quantile(expected - 2) * spread / math.sqrt(expected - 1) > halfwidth
