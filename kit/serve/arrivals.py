"""When each request of a rate point is sent: a seeded Poisson process, or evenly spaced.

A Poisson process at rate R has independent gaps drawn from the exponential distribution of mean
1/R: MLPerf Inference's Server scenario sends queries so (loadgen draws each gap from an
exponential distribution), and so does `vllm bench serve --request-rate R` at its default burstiness
of 1. The first request is sent at t=0, each next one a drawn gap later. The same seed gives the
same times on every host, so two runs offer the same load.
"""

from __future__ import annotations

import random
from typing import Literal

Process = Literal["poisson", "constant"]


def arrival_times(rate: float, count: int, process: Process, seed: int) -> list[float]:
    """`count` send times in seconds after the release, ascending, at `rate` requests per second."""
    if rate <= 0 or count <= 0:
        raise ValueError(f"a rate point needs a rate and requests above 0 (rate {rate}, requests {count})")
    rng = random.Random(seed)
    times, now = [], 0.0
    for _ in range(count):
        times.append(now)
        now += rng.expovariate(rate) if process == "poisson" else 1.0 / rate
    return times
