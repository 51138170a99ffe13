"""`kit list`: the plan of a profile as this host (or a fingerprint's) would run it, each case with
why it cannot run here or how long it should take, as text or JSON. Kept light: a CPU profile's
listing reads the plan cache and imports no pydantic model."""

from __future__ import annotations

from typing import Any, NamedTuple

from kit.host.this_host import Host
from kit.plan.fit import skip_reason
from kit.plan.plan_cache import case_view, plan_data


class Listing(NamedTuple):
    data: dict  # the plan as JSON, with what the host can run and the estimates
    summary: str  # one line: the profile, its cases, the host, the total estimate
    table: str  # the cases as aligned text


def listing(profile: str | None, host: Host) -> Listing:
    names = host.gpu_names
    plan = plan_data(profile or ("paper" if names else "smoke"), host.gpu_count or None, host.smallest_gpu_memory)
    cases: list[Any] = [case_view(case) for case in plan["cases"]]  # read as kit.plan.protocol.Case reads
    skipped = {case.id: reason for case in cases if (reason := skip_reason(case, host))}
    runnable = [case for case in cases if case.id not in skipped]
    if any(case.device == "cuda" for case in runnable):  # the analytic estimate reads a GPU case as its model
        from kit.plan.protocol import plan_for

        runnable = [case for case in plan_for(host, profile).cases if case.id not in skipped]
    predicted = {}
    if runnable:
        from kit.plan.estimate import RUNS_ROOT, estimates

        predicted = estimates(runnable, RUNS_ROOT, names, host.smallest_gpu_memory)
    from kit.plan.view import duration_text, plan_text

    known = [e.seconds for e in predicted.values() if e.seconds is not None]
    unknown = len(predicted) - len(known)
    total = (
        "no estimate (no earlier run here)"
        if not known
        else f"estimated {duration_text(sum(known))}" + (f", {unknown} cases not estimated" if unknown else "")
    )
    host_info = {
        "gpus": host.gpu_count,
        "skipped": skipped,
        "estimates": {case_id: e.model_dump() for case_id, e in predicted.items()},
    }
    summary = (
        f"{plan['profile']}: {plan['description']} ({len(cases)} cases; host: {host.gpu_count} GPU{'' if host.gpu_count == 1 else 's'}"
        f"{', ' + str(len(skipped)) + ' cases cannot run here' if skipped else ''}; {total})"
    )
    table = plan_text(f"profile {plan['profile']}", cases, on_host=skipped or None, estimates=predicted)
    return Listing({**plan, "host": host_info}, summary, table)
