"""The training stages, pre-training and fine-tuning (the paper's Sec. IV tables): every case's
throughput, step time and memory from its rank samples, the FLOPs it achieved where the FLOPs model
applies, and the paper's table layout of configurations x models.

Throughput follows the paper (arXiv:2311.03687, Sec. IV): tokens/s = micro-batch x sequence
length x GPUs / step time, summed over all GPUs, with the step time averaged over the measured
steps (kit.measure.metrics).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kit.measure.metrics import (
    device_used_memory_gib,
    global_tokens_per_step,
    peak_memory_gib,
    reserved_memory_gib,
    step_times,
    summarize,
    tokens_per_second,
)
from kit.measure.unit import StageUnit
from kit.plan.predictions import model_notes
from kit.plan.protocol import Case, TrainParams
from kit.rundir.schema import Metric, RunSample
from kit.theory.analytic import achieved_tflops, mfu, model_flops_per_token
from kit.theory.hardware import HardwareTable, load_hardware, peak_tflops

if TYPE_CHECKING:
    pass


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


# Memory views beside the allocator's peak, each present only where every rank of every run has it.
OPTIONAL_MEMORY = {"peak_reserved_gib": reserved_memory_gib, "peak_device_used_gib": device_used_memory_gib}


def train_metrics(runs: Sequence[RunSample]) -> dict[str, Metric]:
    per_run = [train_run_figures(run) for run in runs]
    found = {name: summarize([figures[name] for figures in per_run], unit) for name, unit in TRAIN_UNITS.items()}
    for name, read in OPTIONAL_MEMORY.items():
        known = [[value for rank in run.ranks if (value := read(rank)) is not None] for run in runs]
        if known and all(per_rank and len(per_rank) == len(run.ranks) for per_rank, run in zip(known, runs)):
            found[name] = summarize([max(per_rank) for per_rank in known], "GiB")
    return found


def full_training(case: Case) -> bool:
    """Model FLOPs (forward + 2x forward backward) hold only when every weight gets a gradient;
    frozen 4-bit weights (Q) and LoRA bases skip the weight-gradient matmuls."""
    params = case.params_as(TrainParams)
    return params.quantization == "none" and params.peft == "none"


def train_case_metrics(
    case: Case, runs: Sequence[RunSample], hardware: HardwareTable | None = None
) -> tuple[dict[str, Metric | None], list[str]]:
    """Throughput, step time and memory of every training case; achieved TFLOPS where the FLOPs
    model applies; MFU where the device's peak is known too. Each omission says why."""
    measured = train_metrics(runs)
    found: dict[str, Metric | None] = dict(measured)
    # The analytical model beside the measurement: predicted memory, the step's lower bound, flags.
    notes: list[str] = model_notes(
        case,
        [rank.device_name for run in runs for rank in run.ranks],
        measured["step_time_s"].per_run,
        measured["peak_memory_gib"].per_run,
        hardware,
    )
    if not full_training(case):
        notes.append("achieved TFLOPS and MFU: not computed, the FLOPs model covers full training only")
        return found, notes
    flops = model_flops_per_token(case.model_shape, case.params_as(TrainParams).seq_len)
    tflops = [achieved_tflops(flops, value) for value in measured["tokens_per_s"].per_run]
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
    utilisation = summarize([mfu(value, peak, case.gpus) for value in tflops], "fraction")
    found["mfu"] = utilisation
    if max(utilisation.per_run) > 1:
        notes.append("MFU above 100 %: impossible, so the measurement or the device's peak is wrong")
    return found, notes


PRETRAIN = StageUnit(
    name="pretrain",
    title="Pre-training",
    case_metrics=train_case_metrics,
    headline="tokens_per_s",
)
FINETUNE = StageUnit(
    name="finetune",
    title="Fine-tuning",
    case_metrics=train_case_metrics,
    headline="tokens_per_s",
)
