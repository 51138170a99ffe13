"""What an acceptance spec requires of a host's health and correctness before its speed counts: no
critical GPU health check failing (manifests/health.yaml, kit.host.health_checks), optionally no
warning either, the preflight's silent-data-corruption check passed (kit.measure.sdc), and every
serving case's output equal to transformers' (kit.serve.correctness). A fast figure from a sick or
silently wrong GPU must not get a server accepted, so each requirement is a line of the decision
like a quantity's: pass, fail, inconclusive (nothing could be read), not measured (the run holds
no such check), or not applicable (a host without NVIDIA GPUs has no GPU health to read)."""

from __future__ import annotations

from typing import Literal, NamedTuple

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


class Requirement(NamedTuple):
    label: str
    required: str
    unread: str  # why a run that holds no such check is not measured


REQUIREMENTS = {
    "gpus_healthy": Requirement(
        "GPU health", "no critical check of the health catalog failing", "the run's fingerprint has no health section"
    ),
    "no_warnings": Requirement(
        "GPU health warnings", "no check of the health catalog warning", "the run's fingerprint has no health section"
    ),
    "silent_data_corruption": Requirement(
        "Silent data corruption",
        "the preflight's check passed on every device",
        "no preflight ran the check (kit run runs it unless --no-preflight)",
    ),
    "serving_output": Requirement(
        "Serving output",
        "each serving case's greedy output equals transformers' on the same weights",
        "no serve case ran to its end",
    ),
}


def _line(key: str, observed: str, outcome: ConditionOutcome, why: str | None = None) -> ConditionLine:
    found = REQUIREMENTS[key]
    return ConditionLine(
        requirement=key, label=found.label, required=found.required, observed=observed, outcome=outcome, why=why
    )


def _unread(key: str) -> ConditionLine:
    return _line(key, "not recorded", "not measured", REQUIREMENTS[key].unread)


def _gpus_healthy(health: HostHealth | None) -> ConditionLine:
    if health is None:
        return _unread("gpus_healthy")
    observed = f"{len(health.checks)} checks of {health.catalog}"
    if health.not_applicable is not None:
        return _line("gpus_healthy", health.not_applicable, "not applicable")
    if health.failing:
        return _line("gpus_healthy", f"{observed}: {health.unhealthy_because}", "fail")
    if health.checks and all(check.status == "unknown" for check in health.checks):
        return _line("gpus_healthy", observed, "inconclusive", "no health reading could be taken")
    return _line("gpus_healthy", f"{observed}: none critical failing", "pass")


def _no_warnings(health: HostHealth | None) -> ConditionLine:
    if health is None:
        return _unread("no_warnings")
    if health.not_applicable is not None:
        return _line("no_warnings", health.not_applicable, "not applicable")
    if health.warnings:
        names = ", ".join(sorted({check.name for check in health.warnings}))
        return _line("no_warnings", f"{len(health.warnings)} warning(s): {names}", "fail")
    return _line("no_warnings", "none", "pass")


def _silent_data_corruption(health: HostHealth | None) -> ConditionLine:
    check = health.silent_data_corruption if health is not None else None
    if check is None:
        return _unread("silent_data_corruption")
    observed = f"{check.status}: {check.summary}"
    if check.status == "error":
        return _line("silent_data_corruption", observed, "inconclusive", "the check could not run to its end")
    return _line("silent_data_corruption", observed, "pass" if check.status == "pass" else "fail")


def _serving_output(results: dict[str, Result]) -> ConditionLine:
    served = {
        case_id: result for case_id, result in results.items() if result.stage == "serve" and result.status == "ok"
    }
    if not served:
        return _unread("serving_output")
    checks = {case_id: [check for _, check in output_checks(result)] for case_id, result in served.items()}
    wrong = sorted(case_id for case_id, found in checks.items() if any(check.status == "fail" for check in found))
    unchecked = sorted(
        case_id for case_id, found in checks.items() if not any(check.status == "pass" for check in found)
    )
    if wrong:
        return _line("serving_output", f"wrong in {', '.join(wrong)}", "fail")
    if unchecked:
        observed = f"{len(served) - len(unchecked)} of {len(served)} cases checked"
        return _line("serving_output", observed, "not measured", f"not checked: {', '.join(unchecked)}")
    return _line("serving_output", f"equal in {len(served)} of {len(served)} cases", "pass")


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
