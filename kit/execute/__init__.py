"""Executors: where a case's runs happen (this Python, its pinned container, or a Slurm job).

An executor knows how to launch one independent run of a case and collect what its processes
wrote (`run_once`); what a run means (status, metrics) is decided once, in `samples` and the
case's stage unit (kit/measure/), so a case is judged the same way wherever it ran. Which executor
a case runs in: kit.execute.choice. This module: what every executor launches for a case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every command imports kit.execute.owners: it must not pay for pydantic's models
    from kit.plan.protocol import Case


def processes(case: Case) -> int:
    """Workload processes a run starts: one per GPU (rank), except for serving, where the engine
    brings its own processes and one driver fires the burst at it, and for nccl-tests, whose one
    process drives all the case's GPUs."""
    from kit.execute.nccl_tests import runs_binary

    return 1 if case.workload == "serve" or runs_binary(case) else case.gpus


def memory_cap_bytes(case: Case) -> int | None:
    """The data limit each process of a CPU case holds to (TrainParams.memory_cap_gib), or None."""
    cap = case.train.memory_cap_gib if case.train else None
    return None if cap is None or case.device != "cpu" else int(cap * 2**30)
