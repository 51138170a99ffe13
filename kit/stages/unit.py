"""What a stage of the protocol is to the kit: how its cases are judged and measured, and how the
report shows them, in one value per stage (kit/stages/<stage>.py), over the shared harness.

A stage's module states the figures of its cases from their raw samples (`case_metrics`) and the
section the report gives it (`section`), so that a new stage is one module, not a thread through
the executor, the metrics and the report. A comparison lays cases of several stages side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kit.protocol import Case
from kit.results import Metric, RunSample

if TYPE_CHECKING:  # the report reads the units, the units only name its types
    from kit.protocol import Protocol
    from kit.report.loaded_run import LoadedRun
    from kit.report.model import Section

# (case, its runs, the hardware table or None for manifests/hardware.yaml) -> (metrics, notes)
CaseMetrics = Callable[..., tuple[dict[str, Metric | None], list[str]]]


@dataclass(frozen=True)
class Judgement:
    """A case's status from its runs, before its metrics: the reason where not ok, notes the
    result keeps either way, and the runs whose options in effect the case is held to."""

    status: str
    reason: str | None
    evidence: Sequence[RunSample]
    notes: list[str] = field(default_factory=list)


def first_failure(case: Case, runs: Sequence[RunSample]) -> Judgement:
    """A case is what its first failed run was (OOM, error, ...), else ok: every run counts."""
    failed = next((run for run in runs if run.status != "ok"), None)
    if failed is not None:
        return Judgement(failed.status, failed.reason, runs)
    return Judgement("ok", None, runs)


@dataclass(frozen=True)
class Stage:
    """One stage: its name in the protocol, its section's title, the figure a run summary shows
    first, how its case's figures come from the raw samples, and its report section."""

    name: str
    title: str
    section: Callable[[Stage, LoadedRun, Protocol], Section]
    case_metrics: CaseMetrics | None = None  # None: the cases record samples and no metrics
    headline: str | None = None
    purpose: str | None = None  # what the section shows once the stage runs; said while it does not
    judge: Callable[[Case, Sequence[RunSample]], Judgement] = first_failure


@dataclass(frozen=True)
class Comparison:
    """Cases of one or more stages side by side (one engine beside another, a variant beside its
    twin); shown when the run's plan has a case it selects."""

    name: str
    title: str
    cases: Callable[[Case], bool]
    section: Callable[[Comparison, LoadedRun, Protocol], Section]
