"""Claims judged on runs built in memory: the paper's platforms by the names NVML gives their GPUs,
a case's result with chosen means, and a measured run of them."""

from __future__ import annotations

from kit.reference.measured_run import MeasuredRun
from kit.reference.published import Claim, Reference
from kit.rundir.schema import Metric, Result

A800 = "NVIDIA A800-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"
RTX3090 = "NVIDIA GeForce RTX 3090"


def claim(reference: Reference, claim_id: str) -> Claim:
    return next(c for c in reference.claims if c.id == claim_id)


def metric(mean: float, unit: str = "tokens/s", std: float | None = None) -> Metric:
    return Metric(mean=mean, std=std, n=3, unit=unit, per_run=[mean] * 3)


def result(plan, case_id: str, status: str = "ok", **means: float) -> Result:
    case = next(c for c in plan.cases if c.id == case_id)
    units = {"tokens_per_s": "tokens/s", "peak_memory_gib": "GiB"}
    return Result(
        case_id=case_id,
        stage=case.stage,
        status=status,
        case=case,
        reason=None if status == "ok" else f"{status} in this test",
        metrics={name: metric(value, units.get(name, "s")) for name, value in means.items()},
        executor="local",
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:01:00+00:00",
    )


def run_on(
    gpu: str | None, results: list[Result], comparable: bool = True, interconnect=None, label: str = "run-a"
) -> MeasuredRun:
    return MeasuredRun(
        label=label,
        profile="paper" if comparable else "smoke",
        comparable_to_reference=comparable,
        gpu_names=(gpu,) if gpu else (),
        cpu_names=() if gpu else ("x86_64",),
        interconnect=interconnect,
        results={r.case_id: r for r in results},
    )
