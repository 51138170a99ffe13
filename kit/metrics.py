"""Metric definitions, in one place: every consumer (executor, report) imports them from here.

Throughput follows the paper (arXiv:2311.03687, Sec. IV): tokens/s = micro-batch x sequence
length x GPUs / step time, summed over all GPUs, with the step time averaged over the measured
steps. A data-parallel step ends when its slowest rank ends, so the step time of a multi-process
run is the per-step maximum over ranks.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from kit.analysis import achieved_tflops, mfu, model_flops_per_token
from kit.breakdown import profile_case_metrics
from kit.comm import comm_case_metrics
from kit.hardware import HardwareTable, load_hardware, peak_tflops
from kit.predictions import model_notes
from kit.protocol import Case
from kit.results import Metric, RankSample, RunSample
from kit.serve.aggregate import serve_case_metrics

GIB = 1024**3


def step_times(ranks: Sequence[RankSample]) -> list[float]:
    """Per-step wall time of a run: the slowest rank of each step."""
    lengths = {len(rank.step_s) for rank in ranks}
    if len(lengths) != 1:
        raise ValueError(f"ranks measured different numbers of steps: {sorted(lengths)}")
    return [max(times) for times in zip(*(rank.step_s for rank in ranks))]


def tokens_per_second(tokens_per_step: int, times: Sequence[float]) -> float:
    """Tokens of one global step divided by the mean step time."""
    return tokens_per_step / statistics.fmean(times)


def global_tokens_per_step(ranks: Sequence[RankSample]) -> int:
    return sum(rank.tokens_per_step for rank in ranks)


def peak_memory_gib(rank: RankSample) -> float:
    """Device peak (max allocated) where there is a device allocator, else the host peak RSS."""
    memory = rank.peak_memory
    if memory is None:
        raise ValueError(f"rank {rank.rank} recorded no memory")
    if memory.device_allocated_bytes is not None:
        return memory.device_allocated_bytes / GIB
    return memory.host_rss_bytes / GIB


def summarize(values: Sequence[float], unit: str) -> Metric:
    """Mean and sample standard deviation (n-1) over independent runs; std is None for one run."""
    values = list(values)
    return Metric(
        mean=statistics.fmean(values),
        std=statistics.stdev(values) if len(values) > 1 else None,
        n=len(values),
        unit=unit,
        per_run=values,
    )


def train_run_figures(run: RunSample) -> dict[str, float]:
    """The figures of one training run, each traceable to that run's rank samples."""
    times = step_times(run.ranks)
    tokens = global_tokens_per_step(run.ranks)
    return {
        "tokens_per_s": tokens_per_second(tokens, times),
        "step_time_s": statistics.fmean(times),
        "peak_memory_gib": max(peak_memory_gib(rank) for rank in run.ranks),
    }


TRAIN_UNITS = {"tokens_per_s": "tokens/s", "step_time_s": "s", "peak_memory_gib": "GiB"}


def reserved_memory_gib(rank: RankSample) -> float | None:
    """The allocator's peak reserved memory (what it holds from the device, cached blocks included)."""
    memory = rank.peak_memory
    return None if memory is None or memory.device_reserved_bytes is None else memory.device_reserved_bytes / GIB


def device_used_memory_gib(rank: RankSample) -> float | None:
    """The device-level peak used memory NVML reported during the measured steps: the CUDA
    context, every allocator and other processes on that GPU included; what a buyer sizes by."""
    telemetry = rank.telemetry
    return None if telemetry is None or telemetry.peak_used_bytes is None else telemetry.peak_used_bytes / GIB


# Memory views beside the allocator's peak, each present only where every rank of every run has it.
OPTIONAL_MEMORY = {"peak_reserved_gib": reserved_memory_gib, "peak_device_used_gib": device_used_memory_gib}


def train_metrics(runs: Sequence[RunSample]) -> dict[str, Metric]:
    per_run = [train_run_figures(run) for run in runs]
    found = {name: summarize([figures[name] for figures in per_run], unit) for name, unit in TRAIN_UNITS.items()}
    for name, read in OPTIONAL_MEMORY.items():
        values = [[read(rank) for rank in run.ranks] for run in runs]
        if values and all(per_rank and None not in per_rank for per_rank in values):
            found[name] = summarize([max(per_rank) for per_rank in values], "GiB")
    return found


def full_training(case: Case) -> bool:
    """Model FLOPs (forward + 2x forward backward) hold only when every weight gets a gradient;
    frozen 4-bit weights (Q) and LoRA bases skip the weight-gradient matmuls."""
    params = case.params
    return params.quantization == "none" and params.peft == "none"


def train_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Throughput, step time and memory of every training case; achieved TFLOPS where the FLOPs
    model applies; MFU where the device's peak is known too. Each omission says why."""
    found: dict[str, Metric | None] = dict(train_metrics(runs))
    # The analytical model beside the measurement: predicted memory, the step's lower bound, flags.
    notes: list[str] = model_notes(
        case, [rank.device_name for run in runs for rank in run.ranks],
        found["step_time_s"].per_run, found["peak_memory_gib"].per_run, hardware,
    )  # fmt: skip
    if not full_training(case):
        notes.append("achieved TFLOPS and MFU: not computed, the FLOPs model covers full training only")
        return found, notes
    flops = model_flops_per_token(case.shape, case.params.seq_len)
    tflops = [achieved_tflops(flops, value) for value in found["tokens_per_s"].per_run]
    found["achieved_tflops"] = summarize(tflops, "TFLOP/s")
    device_names = sorted({rank.device_name for run in runs for rank in run.ranks})
    if case.device != "cuda":
        notes.append("MFU: not computed, no peak FLOPS is known for a CPU")
        return found, notes
    hardware = hardware or load_hardware()
    spec = hardware.lookup(device_names[0]) if len(device_names) == 1 else None
    peak = peak_tflops(spec, case.params.dtype) if spec and case.params.dtype in ("bf16", "fp16") else None
    if peak is None:
        notes.append(f"MFU: not computed, no {case.params.dtype} peak in hardware.yaml for {', '.join(device_names)}")
        return found, notes
    found["mfu"] = summarize([mfu(value, peak, case.gpus) for value in tflops], "fraction")
    if max(found["mfu"].per_run) > 1:
        notes.append("MFU above 100 %: impossible, so the measurement or the device's peak is wrong")
    return found, notes


def training_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """A training case's figures; a max-batch case's are those of its largest trial that ran."""
    if case.params.max_batch_search is not None:
        from kit.maxbatch import maxbatch_case_metrics

        return maxbatch_case_metrics(case, runs, lambda trial, best: train_case_metrics(trial, best, hardware))
    return train_case_metrics(case, runs, hardware)


# Workload kind -> how its case metrics are computed from the runs; a kind without an entry
# records its samples and no metrics.
# Comm: busbw and time as nccl-tests defines them, kit/comm.py.
# Profile: phase, part and idle figures of one dissected step, kit/breakdown.py.
CASE_METRICS = {"train": training_case_metrics, "comm": comm_case_metrics, "profile": profile_case_metrics,
                "serve": serve_case_metrics}  # fmt: skip



def case_metrics(case: Case, runs: Sequence[RunSample]) -> tuple[dict[str, Metric | None], list[str]]:
    """Everything a case's result.json carries: its workload's figures (CASE_METRICS) and,
    beside them, joules per token and mean power per GPU (kit/energy.py) or why they are absent."""
    from kit.energy import energy_case_metrics

    found, notes = CASE_METRICS[case.workload](case, runs)
    energy, energy_notes = energy_case_metrics(case, runs)
    return {**found, **energy}, [*notes, *energy_notes]


# The one figure per workload kind that a run summary shows first.
HEADLINE_METRIC = {
    "train": "tokens_per_s",
    "profile": "tokens_per_s",
    "comm": "bus_bandwidth_gb_s",
    "serve": "output_throughput",
}
