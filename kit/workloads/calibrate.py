"""What this host's devices achieve, measured in preflight: matmuls of the plan's linear shapes, a
large copy in device memory, pinned copies host -> device and device -> host (GPU), and one
all-reduce across the GPUs. kit/measure/calibration.py plans the case and turns the raw times kept here
into the figures the fingerprint records.

Every measurement is timed alike: one untimed call (allocation, kernel choice), one timed call
that sets how many iterations fill a repeat, then `repeats` repeats of those iterations with the
device drained before and after each; each repeat's time per iteration is kept. Every rank
measures its own GPU at the same time as the others, as a multi-GPU case uses them. On a CPU
each is made with the process's threads and with one (thread_counts).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

from kit.plan.protocol import CalibrateParams, Case
from kit.rundir.schema import (
    AllReduceTiming,
    CalibrationDetails,
    CopyTiming,
    DeviceTelemetry,
    MatmulTiming,
    Timed,
)
from kit.workloads.harness import Device, SelfTimedWorkload

MAX_ITERATIONS = 100_000  # a call too fast to time once still fills its repeat in a bounded loop


def iterations_for(call: Callable[[], object], synchronize: Callable[[], None], seconds: float) -> int:
    """How many calls fill `seconds`, from one untimed and one timed call."""
    call()
    synchronize()
    start = time.perf_counter()
    call()
    synchronize()
    once = time.perf_counter() - start
    return max(1, min(MAX_ITERATIONS, math.ceil(seconds / max(once, 1e-9))))


def repeat_times(
    call: Callable[[], object], synchronize: Callable[[], None], iterations: int, repeats: int
) -> list[float]:
    """Each repeat's seconds per call, the device drained before and after the repeat."""
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            call()
        synchronize()
        times.append((time.perf_counter() - start) / iterations)
    return times


def timed(call: Callable[[], object], synchronize: Callable[[], None], seconds: float, repeats: int) -> Timed:
    iterations = iterations_for(call, synchronize, seconds)
    return Timed(iterations=iterations, repeat_s=repeat_times(call, synchronize, iterations, repeats))


def thread_counts(device: Device) -> list[int]:
    """The intra-op threads each CPU measurement is made with: the process's share of the cores
    and one; on a shared CPU, threads that wait on each other's cores can be slower than one
    (the best is kept). A GPU's measurements run as they are."""
    import torch

    return list(dict.fromkeys((torch.get_num_threads(), 1))) if device.kind == "cpu" else [torch.get_num_threads()]


def each_thread_count(measure: Callable[[], Timed], device: Device) -> list[tuple[int, Timed]]:
    import torch

    given, found = torch.get_num_threads(), []
    try:
        for threads in thread_counts(device):
            torch.set_num_threads(threads)
            found.append((threads, measure()))
    finally:
        torch.set_num_threads(given)
    return found


def _matmuls(case: Case, device: Device, where) -> list[MatmulTiming]:
    import torch

    params = case.params_as(CalibrateParams)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[params.dtype]
    found = []
    for m, k, n in params.matmul_shapes:
        a = torch.randn(m, k, dtype=dtype, device=where)
        b = torch.randn(k, n, dtype=dtype, device=where)
        out = torch.empty(m, n, dtype=dtype, device=where)

        def timed_matmul(a=a, b=b, out=out) -> Timed:  # this shape's tensors, bound here
            return timed(
                lambda: torch.matmul(a, b, out=out), device.synchronize, params.seconds_per_repeat, params.repeats
            )

        for threads, times in each_thread_count(timed_matmul, device):
            found.append(MatmulTiming(m=m, k=k, n=n, dtype=params.dtype, threads=threads, **dict(times)))
    return found


def _copies(case: Case, device: Device, where) -> dict[str, list[CopyTiming] | CopyTiming]:
    """A copy within device memory (read and written once each), and on a GPU pinned host memory
    to the device and back."""
    import torch

    params = case.params_as(CalibrateParams)
    source = torch.ones(params.copy_bytes, dtype=torch.uint8, device=where)
    target = torch.empty_like(source)
    found: dict[str, list[CopyTiming] | CopyTiming] = {
        "copies": [
            CopyTiming(bytes=params.copy_bytes, threads=threads, **dict(times))
            for threads, times in each_thread_count(
                lambda: timed(
                    lambda: target.copy_(source), device.synchronize, params.seconds_per_repeat, params.repeats
                ),
                device,
            )
        ]
    }
    if device.kind == "cuda" and params.transfer_bytes:
        host = torch.ones(params.transfer_bytes, dtype=torch.uint8, pin_memory=True)
        on_device = torch.empty(params.transfer_bytes, dtype=torch.uint8, device=where)
        for name, call in (
            ("host_to_device", lambda: on_device.copy_(host, non_blocking=True)),
            ("device_to_host", lambda: host.copy_(on_device, non_blocking=True)),
        ):
            found[name] = CopyTiming(
                bytes=params.transfer_bytes,
                pinned=True,
                **dict(timed(call, device.synchronize, params.seconds_per_repeat, params.repeats)),
            )
    return found


def _all_reduce(case: Case, device: Device, where) -> AllReduceTiming:
    """One all-reduce size across every rank's GPU (NCCL); a repeat lasts as long as its slowest
    rank, and every rank runs as many iterations as the slowest rank needs."""
    import torch
    import torch.distributed as dist

    params = case.params_as(CalibrateParams)
    assert params.all_reduce_bytes, "measure() runs the all-reduce only where the case sets its size"
    dist.init_process_group("nccl")
    try:
        tensor = torch.ones(params.all_reduce_bytes // 4, dtype=torch.float32, device=where)
        count = torch.tensor(
            [iterations_for(lambda: dist.all_reduce(tensor), device.synchronize, params.seconds_per_repeat)],
            device=where,
        )
        dist.all_reduce(count, op=dist.ReduceOp.MAX)  # every rank calls the collective as often as the others
        dist.barrier()
        times = repeat_times(lambda: dist.all_reduce(tensor), device.synchronize, int(count.item()), params.repeats)
        slowest = torch.tensor(times, dtype=torch.float64, device=where)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return AllReduceTiming(
            bytes=tensor.numel() * 4,
            dtype="float32",
            ranks=dist.get_world_size(),
            iterations=int(count.item()),
            repeat_s=slowest.tolist(),
        )
    finally:
        dist.destroy_process_group()


def measure(case: Case, device: Device, out_dir: Path) -> tuple[CalibrationDetails, DeviceTelemetry]:
    """The raw times of every measurement, and NVML's view of the device while they ran."""
    import torch

    where = torch.device("cuda", torch.cuda.current_device()) if device.kind == "cuda" else torch.device("cpu")
    sampler = device.telemetry_sampler()
    sampler.start()
    try:
        details = CalibrationDetails(matmul=_matmuls(case, device, where), **_copies(case, device, where))
        if (
            device.kind == "cuda"
            and case.params_as(CalibrateParams).all_reduce_bytes
            and int(os.environ.get("WORLD_SIZE", "1")) > 1
        ):
            details.all_reduce = _all_reduce(case, device, where)
    finally:
        telemetry = sampler.stop()
    return details, telemetry


WORKLOAD = SelfTimedWorkload(measure)
