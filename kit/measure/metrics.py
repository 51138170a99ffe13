"""The metric maths every stage shares: step time over ranks, throughput, memory, mean and spread
over runs. Each stage's figures are stated by its unit (kit/measure/), from these.

Throughput follows the paper (arXiv:2311.03687, Sec. IV): tokens/s = micro-batch x sequence
length x GPUs / step time, summed over all GPUs, with the step time averaged over the measured
steps. A data-parallel step ends when its slowest rank ends, so the step time of a multi-process
run is the per-step maximum over ranks.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from kit.rundir.schema import Metric, RankSample

GIB = 1024**3


def step_times(ranks: Sequence[RankSample]) -> list[float]:
    """Per-step wall time of a run: the slowest rank of each step."""
    lengths = {len(rank.step_s) for rank in ranks}
    if len(lengths) != 1:
        raise ValueError(f"ranks measured different numbers of steps: {sorted(lengths)}")
    return [max(times) for times in zip(*(rank.step_s for rank in ranks))]


def tokens_per_second(tokens_per_step: int, times: Sequence[float]) -> float:
    """Tokens of one global step divided by the mean step time."""
    return tokens_per_step / statistics.fmean(times)


def global_tokens_per_step(ranks: Sequence[RankSample]) -> int:
    return sum(rank.tokens_per_step for rank in ranks)


def peak_memory_gib(rank: RankSample) -> float:
    """Device peak (max allocated) where there is a device allocator, else the host peak RSS."""
    memory = rank.peak_memory
    if memory is None:
        raise ValueError(f"rank {rank.rank} recorded no memory")
    if memory.device_allocated_bytes is not None:
        return memory.device_allocated_bytes / GIB
    return memory.host_rss_bytes / GIB


def summarize(values: Sequence[float], unit: str) -> Metric:
    """Mean and sample standard deviation (n-1) over independent runs; std is None for one run."""
    values = list(values)
    return Metric(
        mean=statistics.fmean(values),
        std=statistics.stdev(values) if len(values) > 1 else None,
        n=len(values),
        unit=unit,
        per_run=values,
    )


def reserved_memory_gib(rank: RankSample) -> float | None:
    """The allocator's peak reserved memory (what it holds from the device, cached blocks included)."""
    memory = rank.peak_memory
    return None if memory is None or memory.device_reserved_bytes is None else memory.device_reserved_bytes / GIB


def device_used_memory_gib(rank: RankSample) -> float | None:
    """The device-level peak used memory NVML reported during the measured steps: the CUDA
    context, every allocator and other processes on that GPU included; what a buyer sizes by."""
    telemetry = rank.telemetry
    return None if telemetry is None or telemetry.peak_used_bytes is None else telemetry.peak_used_bytes / GIB
