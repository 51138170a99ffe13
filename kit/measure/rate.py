"""The figures of a rate point, from its rows: a percentile's interval, whether its arrivals were
a Poisson process, and whether the engine kept up with them (kit.rundir.serving's records).

The interval is distribution-free: the ranks whose order statistics bracket the q-th percentile
with the given confidence follow from the binomial distribution of how many samples fall below
it (as MLPerf Inference's early-stopping rule reasons about its p99s). The arrivals' test is
Kolmogorov-Smirnov against the exponential distribution of the planned rate, with the
asymptotic p-value and Stephens' small-sample correction (Stephens 1970).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kit.rundir.serving import ArrivalCheck, Backlog, QuantileInterval, RequestRecord

CONFIDENCE = 0.95
ARRIVALS_LEVEL = 0.01  # a Poisson point's gaps fail the test below this p-value
LEAST_GAPS = 8  # fewer gaps than this: no test
LEAST_WINDOW_SENDS = 8  # fewer sends than this in the window: the backlog is not judged
COMPLETED_SHARE = 0.9  # requests ending slower than 90 % of the rate they arrive at ...
GROWTH_SHARE = 0.1  # ... while the queue grows by more than 0.1 request per arrival: saturated


def _binomial_cdf(n: int, p: float) -> list[float]:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, p); each term from logs, so n of thousands stays finite."""
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    cdf, total = [], 0.0
    for k in range(n + 1):
        total += math.exp(log_n - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_p + (n - k) * log_q)
        cdf.append(min(total, 1.0))
    return cdf


def quantile_interval(values: Sequence[float], q: float, confidence: float = CONFIDENCE) -> QuantileInterval:
    """The interval [x(l), x(u)] of the sorted samples (ranks 1..n) that holds the q-th percentile
    (0-100) with at least `confidence`, its tails split evenly: l the highest rank with
    P(B <= l - 1) <= tail, u the lowest with P(B <= u - 1) >= 1 - tail; a bound no rank
    reaches is None."""
    ordered = sorted(values)
    n, tail = len(ordered), (1 - confidence) / 2
    if not n:
        return QuantileInterval(percentile=q, confidence=confidence, n=0, low=None, high=None)
    cdf = _binomial_cdf(n, q / 100)
    lower = [rank for rank in range(1, n + 1) if cdf[rank - 1] <= tail]
    upper = next((rank for rank in range(1, n + 1) if cdf[rank - 1] >= 1 - tail), None)
    return QuantileInterval(
        percentile=q,
        confidence=confidence,
        n=n,
        low=ordered[lower[-1] - 1] if lower else None,
        high=ordered[upper - 1] if upper is not None else None,
    )


def _kolmogorov_p(statistic: float, n: int) -> float:
    """P(D_n >= statistic) for a fully specified distribution (asymptotic, Stephens' correction)."""
    root = math.sqrt(n)
    lam = (root + 0.12 + 0.11 / root) * statistic
    if lam < 0.2:
        return 1.0
    total = sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return max(0.0, min(1.0, 2 * total))


def arrival_check(send_times: Sequence[float], rate: float, level: float = ARRIVALS_LEVEL) -> ArrivalCheck | None:
    """The send times' gaps against Exp(rate); None where there are too few gaps to test."""
    ordered = sorted(send_times)
    gaps = sorted(b - a for a, b in zip(ordered, ordered[1:]))
    n = len(gaps)
    if n < LEAST_GAPS:
        return None
    statistic = 0.0
    for index, gap in enumerate(gaps):
        expected = 1 - math.exp(-rate * gap)
        statistic = max(statistic, (index + 1) / n - expected, expected - index / n)
    p_value = _kolmogorov_p(statistic, n)
    return ArrivalCheck(
        gaps=n, mean_gap_s=sum(gaps) / n, ks_statistic=statistic, p_value=p_value, passes=p_value >= level
    )


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread > 0 else 0.0


def backlog(rows: Sequence[RequestRecord]) -> Backlog:
    """Whether the engine kept up with a rate point's arrivals (kit.rundir.serving.Backlog)."""
    latencies = sorted(row.latency for row in rows if row.latency is not None)
    sends = sorted(row.sent_at for row in rows)
    ramp = latencies[len(latencies) // 2] if latencies else 0.0
    last_send = sends[-1] if sends else 0.0
    window = [t for t in sends if t >= ramp]
    span = last_send - ramp
    if len(window) < LEAST_WINDOW_SENDS or span <= 0:
        return Backlog(
            window_s=max(span, 0.0),
            offered_rps=0.0,
            completed_rps=0.0,
            queue_growth_per_s=0.0,
            saturated=False,
            why=f"too short to judge: {len(window)} sends after the ramp (one median latency), {LEAST_WINDOW_SENDS} needed",
        )
    ends = [row.ended_at for row in rows if row.ok and row.ended_at is not None]
    # a request sent at t ends near t + the median latency: the window's ends against the sends one ramp earlier
    offered = sum(1 for t in sends if t <= last_send - ramp) / span
    completed = sum(1 for end in ends if ramp <= end <= last_send) / span
    in_flight = [
        sum(1 for row in rows if row.sent_at < t and (row.ended_at is None or row.ended_at > t)) for t in window
    ]
    growth = _slope(window, in_flight)
    saturated = completed < COMPLETED_SHARE * offered and growth > GROWTH_SHARE * offered
    why = (
        f"requests ended at {completed:.3g}/s, sent at {offered:.3g}/s one median latency earlier; the requests "
        f"in flight grew by {growth:.3g}/s"
        if saturated
        else None
    )
    return Backlog(
        window_s=span,
        offered_rps=offered,
        completed_rps=completed,
        queue_growth_per_s=growth,
        saturated=saturated,
        why=why,
    )
