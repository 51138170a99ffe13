"""What a stage of the protocol is to the kit when it measures: how its cases are judged and their
figures from the raw samples, in one value per stage (kit/measure/<stage>.py), over the shared
harness. How the report lays a stage out is the report's (kit.report.sections.stages).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kit.plan.protocol import Case
from kit.rundir.schema import Metric, RunSample

# (case, its runs, the hardware table or None for manifests/hardware.yaml) -> (metrics, notes)
CaseMetrics = Callable[..., tuple[Mapping[str, Metric | None], list[str]]]


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
class StageUnit:
    """One stage: its name in the protocol, its name in words, the figure a run summary shows
    first, and how its case's figures come from the raw samples."""

    name: str
    title: str
    case_metrics: CaseMetrics | None = None  # None: the cases record samples and no metrics
    headline: str | None = None
    judge: Callable[[Case, Sequence[RunSample]], Judgement] = first_failure
