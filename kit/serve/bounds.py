"""The serving roofline beside what a run measured: of the burst, and of each point of the sweep,
on the GPUs the case ran on (kit.plan.predictions), or why there is none (a CPU, a GPU that
manifests/hardware.yaml does not list or gives no peak for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kit.plan.predictions import ConcurrencyBound, ServingBounds
from kit.plan.protocol import Case
from kit.rundir.serving import BurstAggregates, NoBound
from kit.theory.hardware import GpuSpec

B = TypeVar("B", ServingBounds, ConcurrencyBound)


def device_names(case: Case) -> list[str]:
    """The names of the GPUs the case's engine runs on; none for a CPU case."""
    if case.device != "cuda":
        return []
    from kit.host.this_host import gpu_names

    return gpu_names()[: case.gpus]


def _generated(totals: BurstAggregates) -> int | None:
    """Tokens per finished request, as generated: a request ended early by EOS counts what it made."""
    return round(totals.output_tokens / totals.completed) if totals.completed else None


def _roofline(case: Case, compute: Callable[[GpuSpec], B | None]) -> B | NoBound:
    """`compute(spec)` for the hardware entry of the case's GPU; or why there is none."""
    from kit.plan.predictions import device_spec

    spec = device_spec(case, device_names(case))
    if spec is None:
        what = "a CPU" if case.device != "cuda" else "a GPU manifests/hardware.yaml does not list"
        return NoBound(unavailable=f"no peak figures for {what}: no bound computed")
    bound = compute(spec)
    if bound is None:
        return NoBound(
            unavailable=f"manifests/hardware.yaml lacks the {case.params.dtype} peak or the memory bandwidth of {spec.model}"
        )
    return bound


def burst_bound_details(case: Case, totals: BurstAggregates) -> ServingBounds | NoBound:
    """The roofline of the burst (kit.plan.predictions.serving_bounds)."""
    from kit.plan.predictions import serving_bounds

    return _roofline(case, lambda spec: serving_bounds(case, spec, _generated(totals)))


def point_bound_details(case: Case, concurrency: int, totals: BurstAggregates) -> ConcurrencyBound | NoBound:
    """The roofline of a point of the sweep at `concurrency` (kit.plan.predictions.concurrency_bound)."""
    from kit.plan.predictions import concurrency_bound

    return _roofline(case, lambda spec: concurrency_bound(case, spec, concurrency, _generated(totals)))
