"""The one harness that times every step-based workload, in every process of a run.

A workload states only how to build itself and run one step; this module owns seeding, warm-up,
timing (device-synchronised), peak memory, the capture of OOM and other failures, and the
writing of the process's sample. Entry point: `python -m kit.workloads --case C --out DIR`,
started once per process by the executor's launcher (kit.workloads.launch sets RANK and WORLD_SIZE).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kit.plan.protocol import Case, Soak, StepParams
from kit.plan.workload_modules import WORKLOADS
from kit.rundir.directory import atomic_write_model
from kit.rundir.schema import (
    DeviceTelemetry,
    PeakMemory,
    RankDetails,
    RankSample,
    SoakWindow,
    TrainDetails,
    utc_now,
)
from kit.workloads.probe import FRAMEWORKS

# Serving has no workload process: the engine runs as published and the kit's client drives it
# from the host (kit.serve.session).


EXIT_OK = 0
EXIT_FAILED = 1


class Unavailable(Exception):
    """The case cannot run on this host (e.g. FlashAttention without CUDA): a result, not a crash."""


class MeasureFailed(Exception):
    """A self-timing workload failed part-way (an engine died mid-burst): an `error` result that
    keeps what was measured before the failure as its details."""

    def __init__(self, reason: str, details: RankDetails | None):
        super().__init__(reason)
        self.details = details


class SetupFailed(Exception):
    """A step before the measurement failed (building an op, making a checkpoint): an `error`,
    never `oom`, even when what failed was a compiler short of memory, since no measured
    process ran out of it."""


class StepWorkload(Protocol):
    """One process's steps of a training workload, built once per run."""

    tokens_per_step: int  # tokens this process consumes per step
    details: TrainDetails

    def step(self) -> None: ...

    def release(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SteppedWorkload:
    """A workload whose steps the harness times: how one process builds its steps."""

    build: Callable[[Case], StepWorkload]


@dataclass(frozen=True)
class SelfTimedWorkload:
    """A workload that times itself (a sweep over message sizes, a profiled step, the host's
    calibration): the typed details of its sample and NVML's telemetry over what it timed. Bulky raw
    data (traces) goes into files in the run's folder."""

    measure: Callable[[Case, Device, Path], tuple[RankDetails, DeviceTelemetry | None]]


# What each workload module names its workload (`WORKLOAD = SteppedWorkload(build)`), for the
# harness to import by the case's workload kind (kit.plan.workload_modules).
Workload = SteppedWorkload | SelfTimedWorkload


def workload_of(case: Case) -> Workload:
    return importlib.import_module(WORKLOADS[case.workload]).WORKLOAD


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA OOM (torch.OutOfMemoryError is a RuntimeError), host MemoryError, and torch's CPU
    allocator refusing (a RuntimeError: "DefaultCPUAllocator: can't allocate memory ... Error
    code 12 (Cannot allocate memory)", as a process under a memory limit gets it)."""
    if isinstance(exc, MemoryError):
        return True
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(
        words in text
        for words in ("outofmemoryerror", "out of memory", "can't allocate memory", "cannot allocate memory")
    )


def framework_versions() -> dict[str, str]:
    found = {"python": sys.version.split()[0]}
    for name in ("torch", "accelerate", *FRAMEWORKS):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def timed_steps(step: Callable[[], None], count: int, synchronize: Callable[[], None]) -> list[float]:
    """Wall time of each step, with the device drained before and after (no async leakage)."""
    times = []
    for _ in range(count):
        synchronize()
        start = time.perf_counter()
        step()
        synchronize()
        times.append(time.perf_counter() - start)
    return times


def rank_zero_says(value):
    """Rank 0's value on every rank, where a process group is up (torch.distributed): a decision
    each rank would take on its own clock, taken once, so that no rank steps into a collective the
    others have left."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def soak_windows(
    workload: StepWorkload, synchronize: Callable[[], None], sampler, soak: Soak, step_s: float
) -> tuple[list[float], list[SoakWindow]]:
    """Measured steps in windows of about `soak.window_s` (as many steps as fill one at `step_s`
    a step) until `soak.seconds` have passed, each window with its own NVML reading (sampler.lap);
    every rank runs the windows rank 0 decides."""
    per_window = rank_zero_says(max(1, round(soak.window_s / max(step_s, 1e-6))))
    started, steps, windows = time.monotonic(), [], []
    while True:
        begun = time.monotonic() - started
        times = timed_steps(workload.step, per_window, synchronize)
        steps += times
        windows.append(
            SoakWindow(
                started_s=begun,
                seconds=sum(times),
                tokens=workload.tokens_per_step * len(times),
                step_s=times,
                telemetry=sampler.lap(),
            )
        )
        if not rank_zero_says(time.monotonic() - started < soak.seconds):
            return steps, windows


def host_peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class Device:
    """What the harness needs of the device: its name, a sync, and its peak memory."""

    def __init__(self, kind: str):
        import torch

        self.kind = kind
        if kind == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("the case needs CUDA, but torch sees no GPU")
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            self.name = torch.cuda.get_device_name()
            self.uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
            self.synchronize: Callable[[], None] = torch.cuda.synchronize
        else:
            import platform

            self.name = platform.processor() or platform.machine()
            self.synchronize = lambda: None

    def telemetry_sampler(self):
        """NVML sampling of this process's GPU (kit.measure.telemetry); a CPU case records why there is none."""
        from kit.measure.telemetry import NoDevice, NvmlSampler

        return NvmlSampler(self.uuid) if self.kind == "cuda" else NoDevice()

    def peak_memory(self) -> PeakMemory:
        if self.kind == "cuda":
            import torch

            return PeakMemory(
                device_allocated_bytes=torch.cuda.max_memory_allocated(),
                device_reserved_bytes=torch.cuda.max_memory_reserved(),
                host_rss_bytes=host_peak_rss_bytes(),
            )
        return PeakMemory(host_rss_bytes=host_peak_rss_bytes())


def seed_everything(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def process_age_s() -> float | None:
    """Seconds since this process was started (Linux /proc), or None where it cannot be read."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def run_process(case: Case, out_dir: Path, first: bool = True) -> tuple[RankSample, StepWorkload | None]:
    """Build the workload, run warm-up and measured steps, and describe what happened. The
    process's start is the first run's (later runs of a shared launch start where one ended)."""
    entered = time.perf_counter()
    phases = {"start": age} if first and (age := process_age_s()) is not None else {}
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    started = utc_now()
    base = {"rank": rank, "world_size": world_size, "device": case.device, "started_at": started}
    device = None
    built = None
    partial = None
    try:
        device = Device(case.device)
        seed_everything(case.params.seed)
        workload = workload_of(case)
        if isinstance(workload, SelfTimedWorkload):
            details, telemetry = workload.measure(case, device, out_dir)  # the workload samples what it times
            sample = RankSample(
                **base,
                status="ok",
                device_name=device.name,
                peak_memory=device.peak_memory(),
                telemetry=telemetry,
                details=details,
                versions=framework_versions(),
                finished_at=utc_now(),
            )
            return sample, None
        built = workload.build(case)
        phases["build"] = time.perf_counter() - entered
        params = case.params_as(StepParams)  # a stepped workload runs a case of steps
        warmup = timed_steps(built.step, params.warmup_steps, device.synchronize)
        soak = case.soak
        windows: list[SoakWindow] = []
        if soak is not None and not warmup:  # a soak's windows are sized by a step's time
            warmup = timed_steps(built.step, 1, device.synchronize)
        sampler = device.telemetry_sampler()
        sampler.start()
        try:
            if soak is not None:
                measured, windows = soak_windows(built, device.synchronize, sampler, soak, warmup[-1])
            else:
                measured = timed_steps(built.step, params.measured_steps, device.synchronize)
        finally:
            telemetry = sampler.stop()
        sample = RankSample(
            **base,
            status="ok",
            device_name=device.name,
            warmup_step_s=warmup,
            step_s=measured,
            phases_s={**phases, "warmup": sum(warmup), "measured": sum(measured)},
            tokens_per_step=built.tokens_per_step,
            peak_memory=device.peak_memory(),
            telemetry=telemetry,
            windows=windows,
            details=built.details,
            versions=framework_versions(),
            finished_at=utc_now(),
        )
        return sample, built
    except Unavailable as exc:
        status, reason = "unavailable", str(exc)
    except MeasureFailed as exc:
        status, reason, partial = "error", str(exc)[:2000], exc.details
    except SetupFailed as exc:
        traceback.print_exc()
        status, reason = "error", f"setup failed: {exc}"[:2000]
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a recorded result
        traceback.print_exc()
        status = "oom" if is_out_of_memory(exc) else "error"
        reason = f"{type(exc).__name__}: {exc}".strip()[:2000]
    sample = RankSample(
        **base,
        status=status,
        reason=reason,
        device_name=device.name if device else "unknown",
        peak_memory=device.peak_memory() if device else None,
        details=partial if partial is not None else built.details if built is not None else None,
        versions=framework_versions(),
        finished_at=utc_now(),
    )
    return sample, None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kit.workloads")
    parser.add_argument("--case", type=Path, required=True, help="case.json written by the executor")
    parser.add_argument(
        "--out",
        type=Path,
        required=True,
        action="append",
        help="folder for a run's rank samples; given once per run this process does, in order",
    )
    args = parser.parse_args(argv)
    case = Case.model_validate_json(args.case.read_text(encoding="utf-8"))
    for position, out_dir in enumerate(args.out):
        sample, workload = run_process(case, out_dir, first=position == 0)
        atomic_write_model(out_dir / f"rank-{sample.rank}.json", sample)
        print(
            f"rank {sample.rank}, run {out_dir.name}: {sample.status}"
            + (f" ({sample.reason})" if sample.reason else ""),
            flush=True,
        )
        if sample.status != "ok":
            break  # a run that failed ends the launch, as it ends the case
        if workload is not None:
            # measure-style workloads close their process group themselves; a step workload
            # lets go of its run's engine and, after the last run, of the process group.
            workload.close() if position == len(args.out) - 1 else workload.release()
    # A failed rank exits non-zero so that the launcher tears down ranks waiting on it.
    sys.exit(EXIT_OK if sample.status in ("ok", "unavailable") else EXIT_FAILED)
