"""`kit list`: the plan of a profile as this host (or a fingerprint's) would run it, each case with
why it cannot run here or how long it should take, as text or JSON. Kept light: a CPU profile's
listing reads the plan cache and imports no pydantic model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from kit.host.this_host import Host
from kit.plan.fit import PredictedFailure, gpu_memory_margin, predicted_failure, skip_reason
from kit.plan.plan_cache import case_view, plan_data

if TYPE_CHECKING:
    from kit.plan.estimate import Estimate


class Listing(NamedTuple):
    data: dict  # the plan as JSON, with what the host can run and the estimates
    summary: str  # one line: the profile, its cases, the host, what it cannot run, the total estimate
    table: str  # the cases as aligned text
    notes: str  # the first-run work, and what a run on this host cannot tell


def counted(skipped: dict[str, str], failing: dict[str, PredictedFailure], cases: int) -> dict[str, int]:
    """How many cases run, cannot run here, and are predicted to fail for each resource."""
    counts = {"runs": cases - len(skipped) - len(failing), "cannot run here": len(skipped)}
    for failure in failing.values():
        counts[failure.kind] = counts.get(failure.kind, 0) + 1
    return counts


def listing(profile: str | None, host: Host, own_host: bool = True) -> Listing:
    """`own_host`: the host is this one (its cache says what first-run work is done already),
    not a fingerprint's."""
    names = host.gpu_names
    plan = plan_data(profile or ("paper" if names else "smoke"), host.gpu_count or None, host.smallest_gpu_memory)
    cases: list[Any] = [case_view(case) for case in plan["cases"]]  # read as kit.plan.protocol.Case reads
    skipped = {case.id: reason for case in cases if (reason := skip_reason(case, host))}
    attempted = [case for case in cases if case.id not in skipped]
    if any(case.device == "cuda" for case in attempted):  # the memory model and estimate read a GPU case as its model
        from kit.plan.protocol import plan_for

        attempted = [case for case in plan_for(host, profile).cases if case.id not in skipped]
    failing = {case.id: failure for case in attempted if (failure := predicted_failure(case, host))}
    predicted = {}
    if attempted:
        from kit.plan.estimate import RUNS_ROOT, estimates

        reasons = {case_id: failure.text for case_id, failure in failing.items()}
        predicted = estimates(attempted, RUNS_ROOT, names, host.smallest_gpu_memory, reasons)
    from kit.cache import cache_dir
    from kit.plan.first_run import first_run_text, first_run_work
    from kit.plan.view import duration_text, plan_text

    going = [case for case in attempted if case.id not in failing]
    work = first_run_work(going, plan["device"], host.resources.docker_engine, cache_dir() if own_host else None)
    known = [e.seconds for e in predicted.values() if e.seconds is not None]
    unknown = len(predicted) - len(known)
    total = (
        "no estimate (no earlier run here)"
        if not known
        else f"estimated {duration_text(sum(known))}" + (f", {unknown} cases not estimated" if unknown else "")
    )
    total += first_run_text(work)
    counts = counted(skipped, failing, len(cases))
    tail = cannot_tell(cases, skipped, failing, predicted, host, plan["device"])
    resources = host.resources
    host_info = {
        "gpus": host.gpu_count,
        "resources": {
            "gpu_memory_bytes": host.gpu_memory_bytes,
            "gpu_memory_margin_bytes": {"one GPU": gpu_memory_margin(1), "several GPUs": gpu_memory_margin(2)},
            "memory_bytes": resources.memory_bytes,
            "disk_free_bytes": resources.disk_free_bytes,
            "packages": resources.packages,
            "cuda_compiler": resources.cuda_compiler,
            "docker_engine": resources.docker_engine,
        },
        "counts": counts,
        "skipped": skipped,
        "predicted_failures": {
            case_id: {"kind": failure.kind, "reason": failure.reason} for case_id, failure in failing.items()
        },
        "estimates": {case_id: e.model_dump() for case_id, e in predicted.items()},
        "first_run": [item._asdict() for item in work],
        "cannot_tell": tail,
    }
    said = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
    summary = (
        f"{plan['profile']}: {plan['description']} ({len(cases)} cases; "
        f"host: {host.gpu_count} GPU{'' if host.gpu_count == 1 else 's'}; {said}; {total})"
    )
    on_host = {case.id: "runs" for case in cases}
    on_host |= {case_id: f"skipped: {reason}" for case_id, reason in skipped.items()}
    on_host |= {case_id: failure.text for case_id, failure in failing.items()}
    table = plan_text(f"profile {plan['profile']}", cases, on_host=on_host, estimates=predicted)
    notes = ["first-run work, once per host:"]
    notes += [f"  {item.what}: {duration_text(item.seconds)} ({item.basis})" for item in work]
    notes += ["what a run on this host cannot tell, and what to run or add to learn it:"]
    notes += [f"  - {line}" for line in tail]
    return Listing({**plan, "host": host_info}, summary, table, "\n".join(notes))


def cannot_tell(
    cases: list[Any],
    skipped: dict[str, str],
    failing: dict[str, PredictedFailure],
    predicted: dict[str, Estimate],
    host: Host,
    device: str,
) -> list[str]:
    """What a run of this plan on this host leaves unmeasured or unjudged, each with what to do."""
    from kit.plan.view import duration_text

    lines = []
    if device == "cpu":
        lines.append("a CPU run checks the code paths: none of its figures compares with a GPU's or the paper's")
    wider = [case.gpus for case in cases if case.id in skipped and case.device == "cuda" and case.gpus > host.gpu_count]
    if wider:
        lines.append(
            f"{len(wider)} cases need more GPUs than this host's {host.gpu_count} (up to {max(wider)}): "
            f"collectives need 2; run them on a host of {max(wider)} GPUs"
        )
    fitted = [case for case in cases if getattr(case, "fitted_from", None) and case.id not in skipped]
    if fitted:
        lines.append(
            f"{len(fitted)} cases run fitted to this host's GPUs, not the paper's {fitted[0].fitted_from}: the claims "
            "about the paper's cases stay `not measured` (a host of 8 GPUs measures them)"
        )
    if failing:
        spared = sum(predicted[case_id].seconds or 0 for case_id in failing)
        lines.append(
            f"{len(failing)} cases are predicted to fail here (GPU or host memory, disk, software): "
            f"`kit run --skip-predicted-oom` does not attempt them ({duration_text(spared)} of starts spared); "
            "an attempt records the failure as the paper does"
        )
    reasons = [failure.reason for failure in failing.values() if failure.kind == "unavailable"]
    for need, remedy in (
        ("flash-attn", "add flash-attn (pip install flash-attn) to run"),
        ("docker", "add a docker engine and the NVIDIA container toolkit to run"),
        ("nvcc", "add the CUDA toolkit (nvcc, or CUDA_HOME) to run"),
    ):
        matching = [reason for reason in reasons if need in reason]
        if matching:
            lines.append(f"{remedy} its {len(matching)} cases")
    resources = host.resources
    unrecorded = [
        what
        for what, value in (
            ("host memory", resources.memory_bytes),
            ("free disk", resources.disk_free_bytes),
            ("installed packages", resources.packages),
            ("a CUDA compiler", resources.cuda_compiler),
            ("a docker engine", resources.docker_engine),
        )
        if value is None
    ]
    if unrecorded and device == "cuda":
        lines.append(
            f"not judged, as not recorded: {', '.join(unrecorded)} (`kit doctor --json` on the host records them)"
        )
    return lines
