"""On a host without GPUs, the serving engine and the kit's load generator share the CPUs: each
keeps CPUs of its own.

An engine computing on the CPU keeps every core it may use busy (vLLM's CPU build binds one
OpenMP thread per core and its scheduler process polls without sleeping: vLLM
utils/ompmultiprocessing.py). The client, one asyncio thread, then waits for a core, and every
event it reads in that time carries a late time stamp. Measured on a 2-core host: in smoke runs
that shared the cores, the client's event loop lagged 19-876 ms (p99) at every point of the sweep,
it read whole streams at once (a median TPOT of 0.0 ms at concurrency 8 and 16), and the
saturation check marked every point. With the engine on one core and the client on the other, the
lag stayed at most 2.5 ms at every point (a smoke run, and tests/benchmarks/serve_fidelity_results.md
runs 4-7).

So on such a host the client keeps one CPU and the engine gets the others. A GPU host's engine
computes on its GPUs and needs a few of its many cores: there the operating system places both.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

from kit.plan.protocol import Case
from kit.rundir.serving import CpuSplit


def cpu_split(case: Case, available: Sequence[int] | None = None) -> CpuSplit | None:
    """The split for a serve case: on a CPU, the highest CPU this process may use for the client
    and the rest for the engine; None on GPUs, or with a single CPU (nothing to split)."""
    if case.device != "cpu":
        return None
    cpus = sorted(os.sched_getaffinity(0) if available is None else available)
    if len(cpus) < 2:
        return None
    return CpuSplit(engine=tuple(cpus[:-1]), client=tuple(cpus[-1:]))


@contextlib.contextmanager
def running_on(cpus: Sequence[int] | None) -> Iterator[None]:
    """The calling thread (and the threads it starts) on `cpus` while in the block, then where it
    was; nothing changes for None."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
