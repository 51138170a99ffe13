"""Acceptance of a host against a spec and a named baseline: the rule a buyer states up front (as
NVIDIA's DGX Cloud Exemplar program states "more than 95 % of the baseline on every workload",
and SuperBench's diagnosis rules flag a 5 % degradation), and the decision a run meets under it.

A spec (YAML, manifests/acceptance.yaml is the default) requires of each quantity
(kit.reference.quantities) a fraction of the baseline's median, and a least number of runs. Each
baseline figure a requirement reads is one line of the decision: the run's mean per GPU with its
95 % Student-t interval over the runs, against the required value; a line passes where the whole
interval clears it, fails where the whole interval falls short, and is inconclusive where the
interval straddles it, where the case made fewer runs than the spec asks, or where the run did not
measure it. The spec's health and correctness requirements are lines too
(kit.reference.health_requirements). One failing line rejects; else one undecided line leaves the
whole inconclusive.
"""

from __future__ import annotations

import hashlib
import statistics
from fnmatch import fnmatch
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, Field

from kit.manifest import load_manifest, manifests_dir
from kit.measure.interval import mean_interval
from kit.plan.protocol import Case, Repetition, Strict
from kit.reference.baseline import Baseline, BaselineFigure
from kit.reference.health_requirements import ConditionLine, HealthRequirements, condition_lines
from kit.reference.measured_run import MeasuredRun
from kit.reference.quantities import QUANTITIES, QuantityName
from kit.rundir.signing import SignatureCheck

SPEC_FILE = "acceptance.yaml"
Decided = Literal["ACCEPT", "REJECT", "INCONCLUSIVE"]
LineOutcome = Literal["pass", "fail", "inconclusive", "not measured"]
# The exit status of `kit report --accept`: 0 accept, 1 reject, and one of its own for a run that
# cannot decide (too few runs, an interval across the threshold, a case not run), which a script
# must not read as either.
EXIT_STATUS: dict[Decided, int] = {"ACCEPT": 0, "REJECT": 1, "INCONCLUSIVE": 3}


class Requirement(Strict):
    """One quantity required at `fraction` of the baseline (0.95: 95 % of its throughput, or at most
    1/0.95 of its joules per token), of every case the baseline has, or those `cases` match."""

    quantity: QuantityName
    fraction: float = Field(gt=0, le=10)
    cases: tuple[str, ...] = ()  # fnmatch patterns of case ids; none: every case


class LatencyObjectives(Strict):
    """The serving objectives the report holds each sweep to (its capacity within them)."""

    ttft_ms: float = Field(gt=0)
    tpot_ms: float = Field(gt=0)


class AcceptanceSpec(Strict):
    name: str = Field(min_length=1)
    description: str = ""
    baseline: str | None = None  # the baseline file, relative to the spec's folder; --baseline overrides it
    min_runs: int = Field(ge=1, le=100)
    repeat: Repetition | None = None  # kit run --runs-for SPEC: more runs where min_runs leave an interval wide
    latency: LatencyObjectives | None = None
    health: HealthRequirements = HealthRequirements()
    requirements: tuple[Requirement, ...] = Field(min_length=1)


class LoadedSpec(BaseModel):
    """A spec as read, with where it came from and the SHA-256 of its bytes (the sign-off names it)."""

    spec: AcceptanceSpec
    path: Path
    digest: str

    @property
    def baseline_path(self) -> Path | None:
        return self.path.parent / self.spec.baseline if self.spec.baseline else None


def reads(spec: AcceptanceSpec, case: Case) -> bool:
    """Whether a requirement of the spec reads a figure of noise from the case (the cases its
    `repeat:` narrows)."""
    return any(
        QUANTITIES[requirement.quantity].reads(case)
        and QUANTITIES[requirement.quantity].sampled
        and (not requirement.cases or any(fnmatch(case.id, pattern) for pattern in requirement.cases))
        for requirement in spec.requirements
    )


def default_spec_path() -> Path:
    return manifests_dir() / SPEC_FILE


def load_spec(path: Path) -> LoadedSpec:
    """The spec at `path`, strictly (ManifestError: one line naming the file, the key and why)."""
    spec = load_manifest(path, AcceptanceSpec)
    return LoadedSpec(spec=spec, path=path, digest="sha256:" + hashlib.sha256(path.read_bytes()).hexdigest())


class DecisionLine(BaseModel):
    """One requirement on one case: what was required, what the run showed, and how it stands."""

    quantity: QuantityName
    label: str
    case_id: str
    workload: str
    unit: str
    required: float  # at least this (at most, where lower is better)
    higher_is_better: bool
    baseline_median: float
    observed: float | None = None  # the mean per GPU over the run's runs
    interval: tuple[float, float] | None = None  # 95 % Student-t interval of the mean
    runs: int = 0
    margin: float | None = None  # observed against required, signed so that > 0 is better
    outcome: LineOutcome
    why: str | None = None


class Decision(BaseModel):
    decided: Decided
    spec_name: str
    spec_path: str
    spec_digest: str
    min_runs: int
    baseline_name: str
    baseline_kind: str
    baseline_digest: str
    evidence_digest: str
    lines: list[DecisionLine]
    conditions: list[ConditionLine] = []  # the spec's health and correctness requirements
    unread: list[str] = []  # requirements the baseline has no figure of, said as such

    @property
    def exit_status(self) -> int:
        return EXIT_STATUS[self.decided]

    def counted(self, outcome: str) -> int:
        return sum(line.outcome == outcome for line in self.conditions) + sum(
            line.outcome == outcome for line in self.lines
        )


class Judgement(NamedTuple):
    """A decision and the baseline's signature as checked (a failing one fails the report)."""

    decision: Decision
    baseline_path: Path
    baseline_signature: SignatureCheck


def _line(requirement: Requirement, figure: BaselineFigure, run: MeasuredRun, min_runs: int) -> DecisionLine:
    quantity = QUANTITIES[requirement.quantity]
    if quantity.higher_is_better:
        required = requirement.fraction * figure.median
    else:
        required = figure.median / requirement.fraction
    line = DecisionLine(
        quantity=requirement.quantity,
        label=quantity.label,
        case_id=figure.case_id,
        workload=figure.workload,
        unit=figure.unit,
        required=required,
        higher_is_better=quantity.higher_is_better,
        baseline_median=figure.median,
        outcome="not measured",
    )
    result = run.results.get(figure.case_id)
    metric = run.metric(figure.case_id, quantity.metric)
    if result is None:
        return line.model_copy(update={"why": "the case was not run"})
    if quantity.held_to_objectives and figure.objectives != run.objectives:
        return line.model_copy(
            update={
                "why": f"objectives differ: the baseline's figure is held to {figure.objectives}, the spec's to "
                f"{run.objectives} (make the baseline with the spec's: kit baseline --slo-ttft-ms --slo-tpot-ms)"
            }
        )
    if result.status != "ok" or metric is None:
        return line.model_copy(
            update={"why": f"the case is {result.status}" + (f": {result.reason}" if result.reason else "")}
        )
    if run.invalid.get(figure.case_id):
        return line.model_copy(update={"why": f"invalid: {run.invalid[figure.case_id][0]}"})
    values = quantity.values(result.case, metric)
    observed = statistics.fmean(values)
    sign = 1 if quantity.higher_is_better else -1
    measured = line.model_copy(
        update={
            "observed": observed,
            "interval": mean_interval(values),
            "runs": len(values),
            "margin": sign * (observed / required - 1),
        }
    )
    if quantity.sampled and len(values) < min_runs:
        return measured.model_copy(
            update={"outcome": "inconclusive", "why": f"too few runs: {len(values)} of the {min_runs} the spec asks"}
        )
    low, high = measured.interval or (observed, observed)
    clears, short = (
        (low >= required, high < required) if quantity.higher_is_better else (high <= required, low > required)
    )
    if clears:
        return measured.model_copy(update={"outcome": "pass"})
    if short:
        return measured.model_copy(update={"outcome": "fail"})
    return measured.model_copy(
        update={"outcome": "inconclusive", "why": "the interval straddles the required value: more runs may decide"}
    )


def decide(spec: LoadedSpec, baseline: Baseline, run: MeasuredRun, evidence_digest: str) -> Decision:
    """Every requirement of the spec on every baseline figure it reads, and the decision they make."""
    lines, unread = [], []
    for requirement in spec.spec.requirements:
        figures = [
            figure
            for figure in baseline.figures
            if figure.quantity == requirement.quantity
            and (not requirement.cases or any(fnmatch(figure.case_id, pattern) for pattern in requirement.cases))
        ]
        if not figures:
            unread.append(f"{QUANTITIES[requirement.quantity].label}: no figure of it in the baseline")
        lines += [_line(requirement, figure, run, spec.spec.min_runs) for figure in figures]
    conditions = condition_lines(spec.spec.health, run.health, run.results)
    outcomes = {line.outcome for line in lines} | {line.outcome for line in conditions}
    decided: Decided = (
        "REJECT"
        if "fail" in outcomes
        else "ACCEPT"
        if lines and outcomes <= {"pass", "not applicable"}
        else "INCONCLUSIVE"
    )
    return Decision(
        decided=decided,
        spec_name=spec.spec.name,
        spec_path=str(spec.path),
        spec_digest=spec.digest,
        min_runs=spec.spec.min_runs,
        baseline_name=baseline.name,
        baseline_kind=baseline.kind,
        baseline_digest=baseline.digest,
        evidence_digest=evidence_digest,
        lines=lines,
        conditions=conditions,
        unread=unread,
    )


def reasons_inconclusive(decision: Decision) -> list[str]:
    """Why an inconclusive decision is so, each reason once with how many lines it holds."""
    found: dict[str, int] = {}
    for condition in decision.conditions:
        if condition.outcome in ("inconclusive", "not measured") and condition.why:
            found[f"{condition.label}: {condition.why}"] = 0
    for line in decision.lines:
        if line.outcome in ("inconclusive", "not measured") and line.why:
            reason = line.why.split(":")[0]
            found[reason] = found.get(reason, 0) + 1
    if not decision.lines:
        found["no requirement of the spec has a figure in the baseline"] = 0
    return [
        f"{reason} ({count} line{'s' if count != 1 else ''})" if count else reason for reason, count in found.items()
    ]
