"""What an acceptance spec requires of a host's health and correctness before its speed counts: no
critical GPU health check failing (manifests/health.yaml, kit.host.health_checks), optionally no
warning either, the preflight's silent-data-corruption check passed (kit.measure.sdc), and every
serving case's output equal to transformers' (kit.serve.correctness). A fast figure from a sick or
silently wrong GPU must not get a server accepted, so each requirement is a line of the decision
like a quantity's: pass, fail, inconclusive (nothing could be read), not measured (the run holds
no such check), or not applicable (a host without NVIDIA GPUs has no GPU health to read)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from kit.host.health import HostHealth
from kit.measure.validity import output_checks
from kit.plan.protocol import Strict
from kit.rundir.schema import Result

ConditionOutcome = Literal["pass", "fail", "inconclusive", "not measured", "not applicable"]


class HealthRequirements(Strict):
    """Each true key is a line of the decision (the spec's `health:`; omitted, the defaults hold)."""

    gpus_healthy: bool = True  # no critical check of the health catalog failing
    no_warnings: bool = False  # no warning either (a throttled clock, a link below its width...)
    silent_data_corruption: bool = True  # the preflight's check ran and passed
    serving_output: bool = True  # every ok serve case's output checked and equal to transformers'


class ConditionLine(BaseModel):
    """One health or correctness requirement: what the run showed, and how it stands."""

    requirement: str  # the spec's key
    label: str
    required: str
    observed: str
    outcome: ConditionOutcome
    why: str | None = None


def _gpus_healthy(health: HostHealth | None) -> ConditionLine:
    line = ConditionLine(
        requirement="gpus_healthy",
        label="GPU health",
        required="no critical check of the health catalog failing",
        observed="not recorded",
        outcome="not measured",
        why="the run's fingerprint has no health section",
    )
    if health is None:
        return line
    observed = f"{len(health.checks)} checks of {health.catalog}"
    if health.not_applicable is not None:
        return line.model_copy(update={"observed": health.not_applicable, "outcome": "not applicable", "why": None})
    if health.failing:
        return line.model_copy(
            update={"observed": f"{observed}: {health.unhealthy_because}", "outcome": "fail", "why": None}
        )
    if health.checks and all(check.status == "unknown" for check in health.checks):
        return line.model_copy(
            update={"observed": observed, "outcome": "inconclusive", "why": "no health reading could be taken"}
        )
    return line.model_copy(update={"observed": f"{observed}: none critical failing", "outcome": "pass", "why": None})


def _no_warnings(health: HostHealth | None) -> ConditionLine:
    line = ConditionLine(
        requirement="no_warnings",
        label="GPU health warnings",
        required="no check of the health catalog warning",
        observed="not recorded",
        outcome="not measured",
        why="the run's fingerprint has no health section",
    )
    if health is None:
        return line
    if health.not_applicable is not None:
        return line.model_copy(update={"observed": health.not_applicable, "outcome": "not applicable", "why": None})
    if health.warnings:
        names = ", ".join(sorted({check.name for check in health.warnings}))
        return line.model_copy(
            update={"observed": f"{len(health.warnings)} warning(s): {names}", "outcome": "fail", "why": None}
        )
    return line.model_copy(update={"observed": "none", "outcome": "pass", "why": None})


def _silent_data_corruption(health: HostHealth | None) -> ConditionLine:
    line = ConditionLine(
        requirement="silent_data_corruption",
        label="Silent data corruption",
        required="the preflight's check passed on every device",
        observed="not checked",
        outcome="not measured",
        why="no preflight ran the check (kit run runs it unless --no-preflight)",
    )
    check = health.silent_data_corruption if health is not None else None
    if check is None:
        return line
    outcomes: dict[str, ConditionOutcome] = {"pass": "pass", "fail": "fail", "error": "inconclusive"}
    outcome = outcomes[check.status]
    why = "the check could not run to its end" if check.status == "error" else None
    return line.model_copy(update={"observed": f"{check.status}: {check.summary}", "outcome": outcome, "why": why})


def _serving_output(results: dict[str, Result]) -> ConditionLine:
    line = ConditionLine(
        requirement="serving_output",
        label="Serving output",
        required="each serving case's greedy output equals transformers' on the same weights",
        observed="no serving case finished",
        outcome="not measured",
        why="no serve case ran to its end",
    )
    served = {
        case_id: result for case_id, result in results.items() if result.stage == "serve" and result.status == "ok"
    }
    if not served:
        return line
    checks = {case_id: [check for _, check in output_checks(result)] for case_id, result in served.items()}
    wrong = sorted(case_id for case_id, found in checks.items() if any(check.status == "fail" for check in found))
    unchecked = sorted(
        case_id for case_id, found in checks.items() if not any(check.status == "pass" for check in found)
    )
    if wrong:
        return line.model_copy(update={"observed": f"wrong in {', '.join(wrong)}", "outcome": "fail", "why": None})
    if unchecked:
        return line.model_copy(
            update={
                "observed": f"{len(served) - len(unchecked)} of {len(served)} cases checked",
                "why": f"not checked: {', '.join(unchecked)}",
            }
        )
    return line.model_copy(
        update={"observed": f"equal in {len(served)} of {len(served)} cases", "outcome": "pass", "why": None}
    )


def condition_lines(
    required: HealthRequirements, health: HostHealth | None, results: dict[str, Result]
) -> list[ConditionLine]:
    """A line for each requirement the spec holds the run to."""
    lines = []
    if required.gpus_healthy:
        lines.append(_gpus_healthy(health))
    if required.no_warnings:
        lines.append(_no_warnings(health))
    if required.silent_data_corruption:
        lines.append(_silent_data_corruption(health))
    if required.serving_output:
        lines.append(_serving_output(results))
    return lines
