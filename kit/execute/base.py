"""What every executor is to the runner: a name, whether its ranks run this Python's frameworks,
whether a cluster's nodes (not this host) hold the GPUs, and how it does one independent run of a
case, or several runs in one launch. Where a case runs is the executor's; what a run means (its
status, its figures) is decided once, in kit.execute.samples and the case's stage unit
(kit.measure), so a case is judged the same way wherever it ran."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

if TYPE_CHECKING:
    from kit.plan.protocol import Case
    from kit.rundir.schema import RunSample


class Executor(Protocol):
    name: str  # recorded in each result: local, docker, slurm

    @property
    def uses_this_python(self) -> bool:
        """Whether the case's ranks run the frameworks of this Python (here, or on nodes that share it)."""
        ...

    @property
    def on_cluster(self) -> bool:
        """Whether a cluster's nodes, not this host, hold the GPUs a case runs on."""
        ...

    def run_once(self, case: Case, case_dir: Path, index: int, log: TextIO) -> RunSample:
        """Run `index` of the case: launch it, wait up to its timeout, collect what its processes wrote."""
        ...

    def run_launch(self, case: Case, case_dir: Path, indices: list[int], log: TextIO) -> list[RunSample]:
        """One launch doing the runs `indices` one after another; the runs it finished, in order."""
        ...
