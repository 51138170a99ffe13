"""Synthetic run directories of realistic size and shape, for testing the report at scale.

`write_paper_size_run` writes what `kit run --all` on a server with 8 x NVIDIA A800-SXM4-80GB
would leave behind for every case of the real `paper` plan: run.json (with the host checks of
its fingerprint), fingerprint.json and fingerprint-after.json, and for each case case.json,
log.txt, one rank sample per process of each run (runs/<k>/rank-<r>.json, holding the details
each workload writes: DeepSpeed settings, nccl-tests sweeps, module breakdowns, served bursts),
the raw files beside them (nccl-tests output, profiler traces, requests.jsonl), and result.json
from `kit.execute.case_run.result_of`, so every metric comes from its stage's unit (kit/measure/) with its real
name and unit. Then SHA256SUMS. `write_run` does the same for any plan (the smoke plan on CPU).

THE NUMBERS ARE SYNTHETIC. A seeded generator draws them around a crude performance model so
that they are plausible in size and never physically impossible, but no machine measured them.
They exist to render reports of realistic size and variety (OOM where kit.plan.predictions says a
case cannot fit, errors, unavailable engines); they are not evidence about any hardware.
Given the same plan and seed, the bytes written are the same.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import random
import shutil
import struct
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kit.comm.collectives import COLLECTIVES, bus_bandwidth_factor, message_sizes
from kit.comm.nccl_tests_output import parse_nccl_tests
from kit.comm.sweep import TopologyFacts
from kit.execute import nccl_tests, processes
from kit.execute.case_run import result_of
from kit.execute.samples import killed_for_host_memory, run_sample
from kit.files.atomic import atomic_write_text
from kit.host.environment import evaluate, load_expectations
from kit.host.fingerprint import (
    ContainerRuntime,
    CpuInfo,
    Fingerprint,
    Gpu,
    GpuInventory,
    HostInfo,
    ImageProbe,
    KitInfo,
    NetworkInfo,
    Topology,
    TopologyClass,
)
from kit.host.health import HostHealth, XidLog
from kit.host.health_checks import judged
from kit.host.nvidia_smi_query import parse_query
from kit.images import load_lock
from kit.measure import effective, maxbatch
from kit.measure.breakdown import (
    CALL_PREFIX,
    CALLS_KEY,
    MODULE_PREFIX,
    PHASE_RANGES,
    summarize_steps,
    timeline,
)
from kit.measure.sdc import sdc_case, silent_data_corruption
from kit.measure.telemetry import SAMPLE_INTERVAL_S, NoDevice
from kit.plan.predictions import (
    concurrency_bound,
    device_memory_bytes,
    predicted_oom,
    predicted_training_memory,
    serving_bounds,
)
from kit.plan.protocol import Case, Plan, build_plan, load_protocol
from kit.rundir.directory import RunDir, atomic_write_model
from kit.rundir.schema import (
    ContainerRun,
    DeviceTelemetry,
    EffectiveOption,
    PeakMemory,
    RankSample,
    RunInfo,
    RunSample,
    SdcDetails,
)
from kit.rundir.serving import (
    ClientLoad,
    RequestRecord,
    aggregate,
    saturation,
    sweep_point_folder,
)
from kit.serve.correctness import TOKENS_COMPARED
from kit.serve.engines import ENGINES
from kit.theory.analytic import model_flops_per_token, parameter_count
from kit.theory.hardware import load_hardware, peak_tflops
from kit.workloads.step_timeline import METHOD, PROFILERS, RECOMPUTE_METHOD, TIMERS
from kit.workloads.train import DTYPES
from kit.workloads.zero_config import deepspeed_config

A800 = "NVIDIA A800-SXM4-80GB"
CPU_DEVICE = "x86_64"
GIB = 2**30
HOSTNAME = "synthetic-a800-node"  # says on every report's cover that no real host measured it
# as a kit installed from an archive records itself: no git beside it, so no commit
KIT = KitInfo(
    version="0.1.0",
    workload_sources_sha256="5e" * 32,
    source_sha256="5f" * 32,
    unreadable={"git_commit": "not a source checkout (no .git in /opt/kit)"},
)
STARTED = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)

# Cases that fail, and how. Every kind of failure a real paper run records: a collective that
# times out in the second run, a container the kernel OOM-kills before any rank writes its
# sample, nccl-tests reporting wrong elements.
ERROR_CASES = {
    "finetune.llama2-13b.ql+z3+o.g8": "nccl-timeout",
    "pretrain.llama2-7b.z3+o+r+f.g8": "host-oom-kill",
    "comm.alltoall.g8": "wrong-elements",
}
# An overloaded engine that answers some requests with HTTP 503 (12 of the burst's 1000, 1.2 % of
# the sweep's from concurrency 256 on): errors are data, the case is ok and says how many failed.
FAILING_REQUESTS = "serve.llama2-70b.tgi.g8"
# The engine whose image is not on the host: its cases run locally, where it is not installed.
UNAVAILABLE_ENGINES = ("lightllm",)
# How much faster than drawn a case `write_run` is asked to put past its bound runs: the 70B vLLM
# burst at 2.6 x lies past its roofline on 8 A800s, a figure no run can reach (kit.measure.validity).
PAST_BOUND_SPEEDUP = 2.6

# The crude performance model: model-FLOPs utilisation of a plain data-parallel step per model,
# each method's factor on it, and data-parallel efficiency per process count.
BASE_MFU = {"llama2-7b": 0.42, "llama2-13b": 0.40, "llama2-70b": 0.36}
METHOD_FACTOR = {"naive": 1.0, "z2": 0.96, "z3": 0.84, "o": 0.38, "q": 0.55, "r": 0.77, "f": 1.12, "l": 1.5, "ql": 0.8}
PARALLEL_EFFICIENCY = {1: 1.0, 2: 0.97, 4: 0.93, 8: 0.88}
CPU_FLOPS = 6e10  # the smoke profile's tiny Llama on a few cores
# A decode step of the whole burst: 70B's below its roofline on 8 A800s (kit.plan.predictions.serving_bounds,
# 6014 tokens/s: compute-bound at 1000 requests), as every synthetic figure is.
DECODE_STEP_S = {"llama2-7b": 0.021, "llama2-13b": 0.029, "llama2-70b": 0.16}
ENGINE_FACTOR = {"vllm": 1.0, "tgi": 1.18, "lightllm": 1.07}
SYNTHETIC_POWER_W = 330.0  # a GPU's draw under load, below the A800 SXM4's 400 W board power
COMM_PEAK_BUSBW = {
    "all_reduce": 152.0,
    "all_gather": 141.0,
    "reduce_scatter": 143.0,
    "reduce": 118.0,
    "broadcast": 121.0,
    "alltoall": 96.0,
}
COMM_LATENCY_US = {
    "all_reduce": 24.0,
    "all_gather": 16.0,
    "reduce_scatter": 17.0,
    "reduce": 21.0,
    "broadcast": 19.0,
    "alltoall": 31.0,
}


class Clock:
    """Deterministic wall clock of the synthetic run."""

    def __init__(self, start: datetime = STARTED):
        self.now = start

    def stamp(self) -> str:
        return self.now.isoformat(timespec="seconds")

    def advance(self, seconds: float) -> str:
        self.now += timedelta(seconds=seconds)
        return self.stamp()


class Host:
    """What every sample of one run shares: the device, the images and the clock."""

    def __init__(self, plan: Plan, gpu_name: str, seed: int, speed: float, output_checked: bool = False):
        self.cuda = plan.device == "cuda"
        self.device_name = gpu_name if self.cuda else CPU_DEVICE
        self.spec = load_hardware().lookup(gpu_name) if self.cuda else None
        self.lock = load_lock()
        self.seed, self.speed = seed, speed
        self.clock = Clock()
        self.memory_bytes = (2048 if self.cuda else 8) * GIB  # as its fingerprint says
        self.output_checked = output_checked  # each serving run's output checked (write_run's `checked`)

    def slower(self, factor: float) -> Host:
        """This host, its throughputs scaled by `factor` (the same clock and images)."""
        slower = copy.copy(self)
        slower.speed = self.speed * factor
        return slower

    def rng(self, case: Case) -> random.Random:
        return random.Random(f"{self.seed}:{case.id}")

    def versions(self, case: Case) -> dict[str, str]:
        locked = self.lock.images.get(case.image)
        return {"python": "3.11.7", **(dict(locked.versions) if locked else {})}

    def container(self, case: Case, index: int, exit_code: int, oom_killed: bool = False) -> ContainerRun | None:
        locked = self.lock.images.get(case.image)
        if not self.cuda or locked is None:
            return None
        repo = locked.reference.rsplit(":", 1)[0]
        return ContainerRun(
            image=locked.reference,
            image_digest="sha256:" + hashlib.sha256(locked.reference.encode()).hexdigest(),
            repo_digests=[f"{repo}@{locked.digest}"] if locked.digest else [],
            container_id=hashlib.sha256(f"{case.id}:{index}".encode()).hexdigest(),
            exit_code=exit_code,
            oom_killed=oom_killed,
            ulimits={"memlock": -1, "stack": 67108864},
        )

    def telemetry(self, gpus: int, seconds: float) -> DeviceTelemetry:
        """NVML over a measured interval of `gpus` GPUs, as kit.measure.telemetry summarises it: a steady
        draw (no random draw, so every other number is what it was without telemetry); a CPU
        case's sample says why it has none."""
        if not self.cuda:
            return NoDevice().stop()
        return DeviceTelemetry(
            source="nvml",
            energy_j=gpus * SYNTHETIC_POWER_W * seconds,
            mean_power_w=SYNTHETIC_POWER_W,
            samples=max(1, int(seconds / SAMPLE_INTERVAL_S)),
        )

    def rank(self, case: Case, rank: int, **fields) -> RankSample:
        started = self.clock.stamp()
        return RankSample(
            rank=rank,
            device=case.device,
            started_at=started,
            finished_at=self.clock.stamp(),
            **{
                "world_size": case.gpus,
                "device_name": self.device_name,
                "status": "ok",
                "versions": self.versions(case),
                **fields,
            },
        )


def write_ranks(folder: Path, index: int, ranks: list[RankSample]) -> Path:
    out = folder / "runs" / str(index)
    out.mkdir(parents=True, exist_ok=True)
    for sample in ranks:
        atomic_write_model(out / f"rank-{sample.rank}.json", sample)
    return out


def finish_run(
    host: Host, case: Case, index: int, ranks: list[RankSample], wall_s: float, exit_code: int, oom_killed: bool = False
) -> RunSample:
    """The RunSample the executor makes of what the run left behind (kit.execute.samples)."""
    host.clock.advance(wall_s)
    sample = run_sample(
        index=index,
        ranks=ranks,
        expected_ranks=processes(case),
        exit_code=exit_code,
        wall_s=wall_s,
        timed_out=False,
        timeout_s=case.params.timeout_s,
    )
    if oom_killed:
        sample = killed_for_host_memory(sample, host.memory_bytes)
    return sample.model_copy(update={"container": host.container(case, index, exit_code, oom_killed)})


# --- Training (pretrain, finetune, scaling) -----------------------------------------------------


def _method_factor(case: Case) -> float:
    factor = 1.0
    for token in case.method.split("+"):
        factor *= METHOD_FACTOR.get(token, 1.0)
    return factor


def train_step_s(case: Case, host: Host) -> float:
    """Mean time of one global step under the crude model (every process runs one micro-batch)."""
    params = case.params
    flops = model_flops_per_token(case.shape, params.seq_len)
    if host.cuda:
        per_process = BASE_MFU.get(case.model, 0.38) * peak_tflops(host.spec, params.dtype) * 1e12
    else:
        per_process = 0.3 * CPU_FLOPS
    per_process *= _method_factor(case) * PARALLEL_EFFICIENCY.get(case.gpus, 0.85) * host.speed
    return params.micro_batch * params.seq_len * flops / per_process


def train_peak_bytes(case: Case, host: Host, rng: random.Random) -> PeakMemory:
    prediction = predicted_training_memory(case).memory
    params = case.params
    total = parameter_count(case.shape)
    if not host.cuda:
        return PeakMemory(host_rss_bytes=int((0.35 * GIB + 18 * total) * rng.uniform(0.97, 1.03)))
    if prediction is not None:
        allocated = max(prediction.weights * 1.05, prediction.total * rng.uniform(0.86, 0.95))
        offloaded = prediction.offloaded_to_host
    else:  # 4-bit pre-training: packed weights, 8-bit states of the rest, activations
        allocated = total * 0.6 + 6 * GIB
        offloaded = 0.0
    allocated = min(allocated, 0.97 * device_memory_bytes(host.spec))
    return PeakMemory(
        device_allocated_bytes=int(allocated),
        device_reserved_bytes=int(allocated * 1.06),
        host_rss_bytes=int(11 * GIB + offloaded * (1.0 if params.zero_stage == 3 else 1.0 / case.gpus)),
    )


def train_details(case: Case, rank: int) -> dict:
    params = case.params
    client = params.optimizer_impl == "torch" or (params.quantization != "none" and params.peft == "none")
    if params.quantization != "none" and params.peft == "none":
        optimizer = "AdamW8bit"
    else:
        optimizer = "DeepSpeedCPUAdam" if params.offload else "FusedAdam"
    full = params.quantization == "none" and params.peft == "none"
    checkpoint = hashlib.sha256(f"{case.model}:{params.seed}".encode()).hexdigest()
    return {
        "world_size": case.gpus,
        "zero_stage": params.zero_stage,
        "weights": "random initialisation"
        if full
        else f"synthetic checkpoint {case.model}-seed{params.seed} (sha256 {checkpoint})",
        "optimizer": optimizer,
        "deepspeed_config": deepspeed_config(params, client_optimizer=client),
        "local_rank": rank,
        "effective": options_in_effect(case),
    }


def options_in_effect(case: Case) -> dict:
    """What kit/workloads/observe.py reports of an engine that does what the method names."""
    params, layers = case.params, case.shape.num_layers
    judged = {
        "zero_stage": effective.zero_stage(params.zero_stage, params.zero_stage),
        "attention": effective.attention(
            params.attention, params.attention, layers, layers * (2 if params.recompute else 1)
        ),
        "offload": effective.offload(
            params.zero_stage == 3,
            True,
            ["cpu"] * 2,
            params.zero_stage == 3,
            ["cpu"] * layers if params.zero_stage == 3 else [],
            "DeepSpeedZeroOptimizer_Stage3" if params.zero_stage == 3 else "DeepSpeedZeroOptimizer",
        ),
        "recompute": effective.recompute(layers, layers, layers, layers),
        "quantization": effective.quantization(
            effective.expected_quantized_modules(case),
            DTYPES[params.dtype],
            [("nf4", True, DTYPES[params.dtype])] * effective.expected_quantized_modules(case),
        ),
        "lora": effective.lora(
            effective.expected_lora_parameters(case), effective.expected_lora_parameters(case), params.lora_rank
        ),
        "framework": EffectiveOption(  # as kit/workloads/megatron_train.py reports megatron-core's engine
            requested=f"Megatron-LM engine, tensor parallel {params.tensor_parallel}, distributed optimizer",
            observed=f"DistributedDataParallel over GPTModel, tensor parallel {params.tensor_parallel}, data parallel "
            f"{case.gpus // params.tensor_parallel}, ChainedOptimizer of DistributedOptimizer",
            in_effect=True,
            evidence="parallel_state, the model's and optimizer's classes, config.finalize_model_grads_func",
        ),
    }
    return {name: judged[name].model_dump() for name in effective.options_of(params)}


def oom_reason(rank: int, rng: random.Random) -> str:
    return (
        f"OutOfMemoryError: CUDA out of memory. Tried to allocate {rng.uniform(0.5, 4):.2f} GiB. GPU {rank} has a "
        f"total capacity of 79.15 GiB of which {rng.randint(180, 900)} MiB is free. Including non-PyTorch memory, "
        f"this process has {rng.uniform(77.5, 78.6):.2f} GiB memory in use."
    )


def train_runs(case: Case, folder: Path, host: Host, rng: random.Random) -> list[RunSample]:
    params = case.params
    failure = ERROR_CASES.get(case.id)
    if host.cuda and predicted_oom(case, host.spec):
        ranks = [
            host.rank(
                case,
                r,
                status="oom",
                reason=oom_reason(r, rng),
                details=train_details(case, r),
                peak_memory=PeakMemory(
                    device_allocated_bytes=int(77.8 * GIB),
                    device_reserved_bytes=int(78.9 * GIB),
                    host_rss_bytes=int(11 * GIB),
                ),
            )
            for r in range(case.gpus)
        ]
        write_ranks(folder, 1, ranks)
        return [finish_run(host, case, 1, ranks, rng.uniform(60, 240), exit_code=1)]
    if failure == "host-oom-kill":  # the kernel killed the container: no process wrote a sample
        (folder / "runs" / "1").mkdir(parents=True, exist_ok=True)
        return [finish_run(host, case, 1, [], rng.uniform(300, 900), exit_code=137, oom_killed=True)]
    if not host.cuda and params.attention == "flash_attention_2":
        reason = "FlashAttention-2 needs a CUDA GPU; this case runs on CPU (SDPA is not substituted)"
        ranks = [
            host.rank(case, r, status="unavailable", reason=reason, peak_memory=PeakMemory(host_rss_bytes=300 * 2**20))
            for r in range(case.gpus)
        ]
        write_ranks(folder, 1, ranks)
        return [finish_run(host, case, 1, ranks, 4.0, exit_code=0)]
    step = train_step_s(case, host)
    runs = []
    for index in range(1, params.runs + 1):
        run_factor = rng.gauss(1.0, 0.012)
        if failure == "nccl-timeout" and index == 2:
            reason = (
                "RuntimeError: NCCL communicator was aborted on rank 5. Original reason for failure was: [Rank 5] "
                "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2418, OpType=ALLREDUCE, "
                "NumelIn=131072000, NumelOut=131072000, Timeout(ms)=1800000) ran for 1800093 milliseconds before "
                "timing out."
            )
            ranks = [
                host.rank(
                    case,
                    r,
                    status="error" if r == 5 else "ok",
                    reason=reason if r == 5 else None,
                    details=train_details(case, r),
                )
                for r in range(case.gpus)
            ]
            write_ranks(folder, index, ranks)
            runs.append(finish_run(host, case, index, ranks, 1900.0, exit_code=1))
            break
        memory = train_peak_bytes(case, host, rng)
        ranks = []
        for r in range(case.gpus):
            warmup = [
                step * run_factor * (6.0 if i == 0 else rng.uniform(1.0, 1.05)) for i in range(params.warmup_steps)
            ]
            measured = [step * run_factor * (1 + abs(rng.gauss(0.0, 0.01))) for _ in range(params.measured_steps)]
            rank_memory = memory.model_copy(
                update={
                    "device_allocated_bytes": None
                    if memory.device_allocated_bytes is None
                    else int(memory.device_allocated_bytes * rng.uniform(0.995, 1.0)),
                }
            )
            ranks.append(
                host.rank(
                    case,
                    r,
                    warmup_step_s=warmup,
                    step_s=measured,
                    tokens_per_step=params.micro_batch * params.seq_len,
                    peak_memory=rank_memory,
                    telemetry=host.telemetry(1, sum(measured)),
                    details=train_details(case, r),
                )
            )
        write_ranks(folder, index, ranks)
        wall = 40 + step * (params.warmup_steps + params.measured_steps)
        runs.append(finish_run(host, case, index, ranks, wall, exit_code=0))
    return runs


# --- Communication ------------------------------------------------------------------------------


def nccl_tests_output(case: Case, host: Host, rng: random.Random, wrong_from: int | None) -> str:
    """The text an nccl-tests `*_perf` binary prints for the case's sweep."""
    params, name = case.params, case.params.collective
    collective = COLLECTIVES[name]
    element = {"float32": 4, "float16": 2, "bfloat16": 2}[params.dtype]
    factor = bus_bandwidth_factor(name, case.gpus)
    redop = "sum" if name in ("all_reduce", "reduce_scatter", "reduce") else "none"
    root = 0 if name in ("reduce", "broadcast") else -1
    lines = [
        f"# nThread 1 nGpus {case.gpus} minBytes {params.min_bytes} maxBytes {params.max_bytes} step: "
        f"{params.step_factor}(factor) warmup iters: {params.warmup_iters} iters: {params.iters} agg iters: 1 "
        "validation: 1 graph: 0",
        "#",
        "# Using devices",
        *(
            f"#  Rank {r:2d} Group  0 Pid  41{r:03d} on {HOSTNAME} device  {r} [0x{16 * r + 7:02x}] {host.device_name}"
            for r in range(case.gpus)
        ),
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        "#       size         count      type   redop    root " + "    time   algbw   busbw #wrong" * 2,
        "#        (B)    (elements)                              " + " (us)  (GB/s)  (GB/s)       " * 2,
    ]
    total_busbw = 0.0
    sizes = message_sizes(params.min_bytes, params.max_bytes, params.step_factor)
    for size in sizes:
        count = size // element // (case.gpus if collective.split_over_ranks else 1)
        cells = []
        for _ in ("out-of-place", "in-place"):
            algbw_peak = COMM_PEAK_BUSBW[name] / factor * host.speed
            time_us = (COMM_LATENCY_US[name] + size / (algbw_peak * 1e3)) * rng.uniform(0.98, 1.04)
            algbw = size / time_us / 1e3
            wrong = rng.randint(1000, 90000) if wrong_from is not None and size >= wrong_from else 0
            cells.append(f"{time_us:8.2f} {algbw:7.2f} {algbw * factor:7.2f} {wrong:6d}")
            total_busbw += algbw * factor
        lines.append(
            f"{size:12d} {count:13d} {nccl_tests.DTYPES[params.dtype]:>9} {redop:>7} {root:7d} {'  '.join(cells)}"
        )
    failed = wrong_from is not None
    lines += [
        f"# Out of bounds values : {3 if failed else 0} {'FAILED' if failed else 'OK'}",
        f"# Avg bus bandwidth    : {total_busbw / (2 * len(sizes)):.4f} ",
        "#",
    ]
    return "\n".join(lines) + "\n"


def comm_runs(case: Case, folder: Path, host: Host, rng: random.Random) -> list[RunSample]:
    """The nccl-tests binary drives all GPUs as the run's one process; the host side reads its
    output into the run's sample (kit.execute.nccl_tests)."""
    params = case.params
    if params.backend != "nccl-tests":
        raise NotImplementedError(f"{case.id}: only nccl-tests sweeps are written here, not {params.backend} ones")
    command = nccl_tests.command(case, nccl_tests.binary_name(case))
    topology = TopologyFacts(
        interconnect="nvlink-all-pairs",
        gpu_count=8,
        label="8 GPUs, all pairs NVLink (NV8)",
        pcie_generation=4,
        pcie_lanes=16,
    )
    runs = []
    for index in range(1, params.runs + 1):
        out = folder / "runs" / str(index)
        out.mkdir(parents=True, exist_ok=True)
        wrong_from = 64 * 2**20 if ERROR_CASES.get(case.id) == "wrong-elements" else None
        text = nccl_tests_output(case, host, rng, wrong_from)
        exit_code = 1 if parse_nccl_tests(text).failure else 0
        raw_name = nccl_tests.keep_output(out, command[0], text, "")
        started = host.clock.stamp()
        lead = nccl_tests.rank_sample(
            case, command, text, "", exit_code, raw_name, started, host.clock.stamp(), topology
        )
        lead = lead.model_copy(update={"versions": host.versions(case)})
        write_ranks(folder, index, [lead])
        runs.append(finish_run(host, case, index, [lead], rng.uniform(70, 110), exit_code=exit_code))
    return runs


# --- Module breakdown (profile) -----------------------------------------------------------------

# Share of the forward pass each part takes (the matmuls dominate); backward is twice forward.
PART_SHARE = {
    "Embedding": 0.004,
    "RMSNorm": 0.03,
    "q_proj": 0.09,
    "k_proj": 0.09,
    "v_proj": 0.09,
    "RoPE": 0.03,
    "Attention": 0.1,
    "o_proj": 0.09,
    "gate_proj": 0.13,
    "up_proj": 0.13,
    "SiLU": 0.02,
    "down_proj": 0.13,
    "LM head": 0.04,
    "Loss": 0.01,
}
OUTSIDE_LAYERS = ("Embedding", "LM head", "Loss")
OTHER_SHARE = 0.03  # device time in no part (residual adds, the SwiGLU product)
BLOCK_OF = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "RoPE": "self_attn",
    "Attention": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "SiLU": "mlp",
    "down_proj": "mlp",
}


class SyntheticTrace:
    """A profiler trace in the layout the profile workload records (kit.measure.breakdown reads it):
    phase ranges and module ranges on the step's thread, autograd nodes on the engine's thread,
    each kernel launched inside them with its correlation id, the module calls' sequence numbers
    as metadata. Each kernel starts once launched and the device is queued up; the host leaves a
    gap after each, so the device sits idle for (1 - busy_share) of the time."""

    def __init__(self, busy_share: float):
        self.events: list[dict] = []
        self.calls: list[list] = []
        self.host = 1_000_000.0  # us
        self.correlation = 0
        self.sequence = 0
        self.busy_share = busy_share
        self.made: dict[str, int] = {}  # part -> the sequence number of its forward call in this step

    def span(self, cat: str, name: str, start: float, end: float, tid, **args) -> None:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": start, "dur": end - start, "args": args}
        )

    def kernel(self, name: str, us: float, tid="main") -> None:
        self.correlation += 1
        self.span("cuda_runtime", "cudaLaunchKernel", self.host, self.host + 4, tid, correlation=self.correlation)
        self.span("kernel", name, self.host + 5, self.host + 5 + us, 7, correlation=self.correlation)
        self.host += 5 + us + us * (1 - self.busy_share) / self.busy_share

    def open(self) -> tuple[float, int]:
        """A range opened now: its start and the first sequence number within it."""
        opened = self.host, self.sequence
        self.host += 1
        return opened

    def close(self, name: str, opened: tuple[float, int], tid="main") -> None:
        start, first = opened
        self.host += 1
        self.span("user_annotation", name, start, self.host, tid)
        self.host += 1
        if tid == "main" and name.startswith((MODULE_PREFIX, CALL_PREFIX)):
            self.calls.append([name, "main", first, self.sequence])

    def part_forward(self, part: str, us: float) -> None:
        opened = self.open()
        self.made[part] = self.sequence
        self.sequence += 1
        self.kernel(f"{part}_fwd", us)
        self.close(_part_range(part), opened)

    def recompute(self, part: str, us: float) -> None:
        """A checkpointed layer's part re-run inside the backward node that needs it."""
        node, outer = self.host, self.open()
        inner = self.open()
        self.kernel(f"{part}_recompute", us, tid="autograd")
        self.close(_part_range(part), inner, "autograd")
        self.close("kit::recompute", outer, "autograd")
        self.span(
            "cpu_op",
            "MulBackward0",
            node,
            self.host,
            "autograd",
            **{"Sequence number": self.made[part], "Fwd thread id": 1},
        )
        self.host += 1

    def node(self, name: str, sequence: int, us: float) -> None:
        start = self.host
        self.kernel(f"{name}_kernel", us, tid="autograd")
        self.span("cpu_op", name, start, self.host, "autograd", **{"Sequence number": sequence, "Fwd thread id": 1})
        self.host += 1


def _part_range(part: str) -> str:
    if part in ("RoPE", "Attention", "Loss"):
        return CALL_PREFIX + part
    module = {
        "Embedding": "model.embed_tokens",
        "RMSNorm": "model.norm",
        "LM head": "lm_head",
        "SiLU": "model.layers.0.mlp.act_fn",
    }
    name = module.get(part) or f"model.layers.0.{BLOCK_OF[part]}.{part}"
    return MODULE_PREFIX + name


def chrome_trace(
    walls: dict[str, float], recompute_ms: float, busy_share: float, steps: int, rng: random.Random
) -> dict:
    """`steps` steps of the given phase times (ms): parts in their ranges in proportion to
    PART_SHARE, a little device time in no part, backward as nodes of the forward's calls."""
    trace = SyntheticTrace(busy_share)
    scale = sum(PART_SHARE.values())
    device = {phase: 1e3 * ms * busy_share for phase, ms in walls.items()}  # us of device time per phase
    plain_backward = device["backward"] - 1e3 * recompute_ms * busy_share
    for _ in range(steps):
        jitter = rng.uniform(0.99, 1.02)
        forward_us = {
            part: device["forward"] * (1 - OTHER_SHARE) * share / scale * jitter for part, share in PART_SHARE.items()
        }
        phase = trace.open()
        trace.part_forward("Embedding", forward_us["Embedding"])
        layer = trace.open()
        trace.part_forward("RMSNorm", forward_us["RMSNorm"])
        for block in ("self_attn", "mlp"):
            opened = trace.open()
            for part in (part for part, owner in BLOCK_OF.items() if owner == block):
                trace.part_forward(part, forward_us[part])
            trace.close(MODULE_PREFIX + f"model.layers.0.{block}", opened)
        trace.close(MODULE_PREFIX + "model.layers.0", layer)
        trace.kernel("residual_add", device["forward"] * OTHER_SHARE * jitter)
        trace.part_forward("LM head", forward_us["LM head"])
        trace.part_forward("Loss", forward_us["Loss"])
        trace.close(PHASE_RANGES["forward"], phase)

        phase = trace.open()
        for part, share in reversed(PART_SHARE.items()):
            if recompute_ms and part not in OUTSIDE_LAYERS:
                trace.recompute(part, 1e3 * recompute_ms * busy_share * share / scale * jitter)
            trace.node(
                f"{part}Backward0", trace.made[part], plain_backward * (1 - OTHER_SHARE) * share / scale * jitter
            )
        trace.kernel("accumulate_grad", plain_backward * OTHER_SHARE * jitter, tid="autograd")
        trace.close(PHASE_RANGES["backward"], phase)

        phase = trace.open()
        for name in ("multi_tensor_apply_kernel", "fused_adamw"):
            trace.kernel(name, device["optimizer"] / 2 * jitter)
        trace.close(PHASE_RANGES["optimizer"], phase)
        trace.host += 50
    return {"traceEvents": trace.events, CALLS_KEY: trace.calls}


def profile_runs(case: Case, folder: Path, host: Host, rng: random.Random) -> list[RunSample]:
    params = case.params
    tokens = params.micro_batch * params.seq_len
    flops = model_flops_per_token(case.shape, params.seq_len) * tokens
    peak = peak_tflops(host.spec, params.dtype) * 1e12 if host.cuda else CPU_FLOPS
    compute_ms = 1e3 * flops / (0.45 * peak * host.speed) * (0.9 if params.attention == "flash_attention_2" else 1.0)
    forward_ms, backward_ms = compute_ms / 3, 2 * compute_ms / 3
    recompute_ms = forward_ms * 0.96 if params.recompute else 0.0
    optimizer_ms = 1e3 * 16 * parameter_count(case.shape) / (1.6e12 if host.cuda else 2e10)
    runs = []
    for index in range(1, params.runs + 1):
        walls = {"forward": forward_ms, "backward": backward_ms + recompute_ms, "optimizer": optimizer_ms}
        plain = [
            {name: value * rng.uniform(0.99, 1.02) for name, value in walls.items()}
            for _ in range(params.measured_steps)
        ]
        out = folder / "runs" / str(index)
        out.mkdir(parents=True, exist_ok=True)
        trace = chrome_trace(walls, recompute_ms, 0.93 if host.cuda else 0.88, params.measured_steps, rng)
        trace_name = "profile-trace-rank0.json.gz"
        with (out / trace_name).open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:
            handle.write(json.dumps(trace).encode())
        breakdown = summarize_steps(
            timeline(trace, case.device),
            plain,
            device=case.device,
            timer=TIMERS[case.device],
            profiler=PROFILERS["scoped" if host.cuda else "full"],
            micro_batch=params.micro_batch,
            seq_len=params.seq_len,
            attention=params.attention,
            recompute=params.recompute,
            optimizer="torch.optim.AdamW (fused, lr 1e-05, weight decay 0, bf16 states, no master copy), "
            "gradient clipping 1.0",
            measured_steps=params.measured_steps,
            trace_file=trace_name,
            method=list(METHOD)
            + ([RECOMPUTE_METHOD] if params.recompute else [])
            + [
                f"model: random initialisation, {parameter_count(case.shape)} parameters, {params.dtype}, "
                f"attention {params.attention}"
            ],
        )
        step_per_step = breakdown.step_ms_per_step
        prediction = predicted_training_memory(case).memory
        memory = (
            PeakMemory(
                device_allocated_bytes=int(prediction.total * rng.uniform(0.9, 0.96)),
                device_reserved_bytes=int(prediction.total),
                host_rss_bytes=int(9 * GIB),
            )
            if host.cuda and prediction
            else PeakMemory(host_rss_bytes=int(0.6 * GIB))
        )
        ranks = [
            host.rank(
                case,
                0,
                details=breakdown.model_dump(mode="json"),
                peak_memory=memory,
                telemetry=host.telemetry(1, sum(step_per_step) / 1e3),
            )
        ]
        write_ranks(folder, index, ranks)
        runs.append(finish_run(host, case, index, ranks, rng.uniform(120, 300), exit_code=0))
    return runs


# --- Serving ------------------------------------------------------------------------------------


def burst_records(case: Case, host: Host, rng: random.Random, failed_from: int | None) -> list[RequestRecord]:
    """One burst: every prompt sent at t ~ 0, prefills queued, decode steps shared by the batch.
    As on a real engine that runs ahead of its reader, some stream chunks carry two tokens
    (vLLM lists each chunk's token ids): fewer token events than tokens, one gap per event after
    the first."""
    params = case.params
    step = DECODE_STEP_S.get(case.model, 0.02) * ENGINE_FACTOR.get(params.engine, 1.0) / host.speed
    prefill = step * 0.8
    records = []
    for index in range(params.prompts):
        sent = index * 2.0e-5
        queue = (index // 64) * prefill * 6
        ttft = prefill + queue + rng.uniform(0, prefill)
        if failed_from is not None and index >= failed_from:
            records.append(
                RequestRecord(
                    index=index,
                    input_tokens=params.input_tokens,
                    sent_at=sent,
                    ended_at=sent + ttft,
                    status=503,
                    error="HTTP 503: Model is overloaded",
                )
            )
            continue
        tokens = params.max_output_tokens
        doubled = rng.randint(0, tokens // 16)  # chunks that carried two tokens
        itl = [step * rng.uniform(0.9, 1.25) * (2 if k < doubled else 1) for k in range(tokens - doubled - 1)]
        latency = ttft + sum(itl)
        records.append(
            RequestRecord(
                index=index,
                input_tokens=params.input_tokens,
                server_prompt_tokens=params.input_tokens if params.engine == "vllm" else None,
                sent_at=sent,
                ended_at=sent + latency,
                ttft=ttft,
                itl=itl,
                latency=latency,
                output_tokens=tokens,
                output_tokens_source="server",
                token_events=tokens - doubled,
                streamed_tokens=tokens,
                status=200,
            )
        )
    return records


SWEEP_CHUNK_TOKENS = 8  # a busy engine's stream runs ahead of its reader: eight tokens a chunk, as vLLM lists them
SWEEP_FAILED_SHARE = 0.012  # the overloaded engine's share of 503s, at concurrency 256 and above


def sweep_point_records(
    case: Case, host: Host, rng: random.Random, concurrency: int, failing: bool
) -> list[RequestRecord]:
    """A point of the sweep: each of its slots sends its requests back to back (the next one
    when the last ended) until the planned count, none after max_point_s. A decode step grows
    with the batch, a first token waits for the prefills queued ahead of it."""
    params, sweep = case.params, case.params.sweep
    burst_step = DECODE_STEP_S.get(case.model, 0.02) * ENGINE_FACTOR.get(params.engine, 1.0) / host.speed
    step = burst_step * (0.3 + 0.7 * concurrency / params.prompts)
    prefill = burst_step * 0.8
    tokens, events = params.max_output_tokens, params.max_output_tokens // SWEEP_CHUNK_TOKENS
    free_at = [0.0] * concurrency
    records = []
    for index in range(sweep.requests_at(concurrency)):
        slot = min(range(concurrency), key=free_at.__getitem__)
        sent = free_at[slot] + 1.0e-4
        if sweep.max_point_s is not None and sent > sweep.max_point_s:
            break
        ttft = prefill * (1 + concurrency / 16) * rng.uniform(1.0, 1.5)
        if failing and rng.random() < SWEEP_FAILED_SHARE:
            free_at[slot] = sent + ttft
            records.append(
                RequestRecord(
                    index=index,
                    input_tokens=params.input_tokens,
                    sent_at=sent,
                    ended_at=free_at[slot],
                    status=503,
                    error="HTTP 503: Model is overloaded",
                )
            )
            continue
        itl = [SWEEP_CHUNK_TOKENS * step * rng.uniform(0.9, 1.2) for _ in range(events - 1)]
        latency = ttft + sum(itl)
        free_at[slot] = sent + latency
        records.append(
            RequestRecord(
                index=index,
                input_tokens=params.input_tokens,
                server_prompt_tokens=params.input_tokens if params.engine == "vllm" else None,
                sent_at=sent,
                ended_at=sent + latency,
                ttft=ttft,
                itl=itl,
                latency=latency,
                output_tokens=tokens,
                output_tokens_source="server",
                token_events=events,
                streamed_tokens=tokens,
                status=200,
            )
        )
    return records


def sweep_details(case: Case, out: Path, host: Host, rng: random.Random) -> dict:
    """The sweep after the burst, as kit.serve.sweep writes it: each point's rows in its folder,
    its aggregates, the client's load and its roofline in the run's sample."""
    params, points, everything = case.params, [], []
    levels = params.sweep.levels(params.prompts)
    for concurrency in levels:
        failing = case.id == FAILING_REQUESTS and concurrency >= 256
        records = sweep_point_records(case, host, rng, concurrency, failing)
        folder = out / sweep_point_folder(concurrency)
        folder.mkdir(parents=True)
        atomic_write_text(folder / "requests.jsonl", "".join(record.model_dump_json() + "\n" for record in records))
        duration = max(r.ended_at for r in records)
        totals = aggregate(records, duration)
        load = ClientLoad(
            cpu_s=0.12 * duration,
            wall_s=duration,
            events=sum(r.token_events for r in records),
            dispatch_s=duration * 0.9,
            loop_lag_p99_s=0.0012,
            loop_lag_max_s=0.006,
        )
        bound = concurrency_bound(case, host.spec, concurrency, params.max_output_tokens)
        points.append(
            {
                "concurrency": concurrency,
                "planned": params.sweep.requests_at(concurrency),
                "sent": len(records),
                "files": {"requests": f"{sweep_point_folder(concurrency)}/requests.jsonl"},
                "aggregates": totals.model_dump(),
                "client": {**load.model_dump(), "cpu_share": load.cpu_share, "cpu_us_per_event": load.cpu_us_per_event},
                "saturation": saturation(load, totals.tpot_s.median, duration, all_at_once=False).model_dump(),
                "bounds": bound.model_dump(mode="json"),
                "cut_short": False,
            }
        )
        everything += records
    tokens = sum(r.streamed_tokens for r in everything)
    return {
        "levels": levels,
        "planned": {str(n): params.sweep.requests_at(n) for n in levels},
        "max_point_s": params.sweep.max_point_s,
        "points": points,
        "not_measured": None,
        "tokens": {
            "client_counted": tokens,
            "token_events": sum(r.token_events for r in everything),
            "engine_reported_per_request": tokens,
            "server_counters": {
                "generated_tokens": tokens,
                "finished_requests": sum(r.ok for r in everything),
                "source": "vllm:generation_tokens_total, vllm:request_success_total",
                "unavailable": None,
            },
            "equal": True,
        },
        "server_count_mismatches": [],
    }


def engine_launch(case: Case, host: Host, index: int) -> dict:
    """What kit.execute.docker's engine placement records of the container it started, for the
    case's published image: its real command line (kit.serve.engines) and the image's facts."""
    engine = ENGINES[case.params.engine]
    container = host.container(case, index, exit_code=0)
    inside = f"/models/{case.model}-seed{case.params.seed}"
    environment = {**engine.environment(case), **case.params.env}
    return {
        "name": engine.name,
        "label": engine.label,
        "placement": "docker",
        "image": container.image,
        "image_digest": container.image_digest,
        "repo_digests": container.repo_digests,
        "entrypoint": list(engine.entrypoint),
        "user": "root (the image sets none)",
        "command": [*engine.command, *engine.arguments(case, inside, "0.0.0.0", engine.container_port)],
        "environment": environment,
        "container_id": container.container_id,
        "port": {"container": engine.container_port, "host": f"127.0.0.1:{40000 + index}"},
        "version": host.versions(case).get(engine.name),
        "confinement": {"CapDrop": ["ALL"], "SecurityOpt": ["no-new-privileges"], "NetworkMode": "bridge"},
    }


def serving_gpus(case: Case, host: Host) -> str:
    """The driver names every GPU the engine was given (kit.serve.bounds.device_names)."""
    return ", ".join([host.device_name] * case.gpus)


def serve_runs(case: Case, folder: Path, host: Host, rng: random.Random) -> list[RunSample]:
    """One driver process per run (the engine brings its own): one rank sample, world size 1, as
    kit.serve.session.run_driver writes it."""
    params = case.params
    if params.engine in UNAVAILABLE_ENGINES:
        locked = host.lock.images[case.image]
        hint = "pull" if locked.build is None else "build"
        reason = f"image {locked.reference} ({case.image}) is not present locally: kit images {hint} {case.image}"
        ranks = [
            host.rank(case, 0, world_size=1, device_name=serving_gpus(case, host), status="unavailable", reason=reason)
        ]
        write_ranks(folder, 1, ranks)
        return [finish_run(host, case, 1, ranks, 0.2, exit_code=1).model_copy(update={"container": None})]
    runs = []
    for index in range(1, params.runs + 1):
        out = folder / "runs" / str(index)
        out.mkdir(parents=True, exist_ok=True)
        failed_from = params.prompts - 12 if case.id == FAILING_REQUESTS else None
        records = burst_records(case, host, rng, failed_from)
        atomic_write_text(out / "requests.jsonl", "".join(record.model_dump_json() + "\n" for record in records))
        duration = max(r.ended_at for r in records)
        totals = aggregate(records, duration)
        load = ClientLoad(
            cpu_s=0.21 * duration,
            wall_s=duration,
            events=sum(r.token_events for r in records),
            dispatch_s=0.031,
            loop_lag_p99_s=0.0016,
            loop_lag_max_s=0.0094,
        )
        engine = {
            **engine_launch(case, host, index),
            "ready_s": rng.uniform(60, 240),
            "stop": {"stopped_by": "SIGTERM", "exit_code": 0},
        }
        atomic_write_text(out / "engine.json", json.dumps(engine, indent=2) + "\n")
        atomic_write_text(out / "engine.log", f"INFO: serving {case.model} on {case.gpus} GPUs\nINFO: ready\n")
        checkpoint = hashlib.sha256(f"{case.model}:{params.seed}".encode()).hexdigest()
        client_tokens = sum(r.streamed_tokens for r in records)
        details = {
            "engine": engine,
            "model": {
                "kind": "config and tokenizer; the engine makes random weights",
                "path": f"/cache/kit/weightless/{case.model}-seed{params.seed}",
                "sha256": checkpoint,
                "files": {"config.json": checkpoint},
            },
            "prompts": {
                "count": params.prompts,
                "input_tokens": params.input_tokens,
                "counted_by": "served tokenizer",
                "server_count_mismatches": [],
            },
            "ignore_eos": params.ignore_eos,
            "ignore_eos_note": None,
            "files": {"requests": "requests.jsonl", "engine_log": "engine.log", "engine": "engine.json"},
            "warmup": {
                "requests": params.warmup_requests,
                "duration_s": 4 * DECODE_STEP_S.get(case.model, 0.02) * 256,
                "errors": [],
            },
            "aggregates": totals.model_dump(),
            "client": {**load.model_dump(), "cpu_share": load.cpu_share, "cpu_us_per_event": load.cpu_us_per_event},
            "saturation": saturation(load, totals.tpot_s.median if totals.tpot_s else None, duration).model_dump(),
            "tokens": {
                "client_counted": client_tokens,
                "token_events": load.events,
                "engine_reported_per_request": sum(r.output_tokens for r in records if r.ok),
                "server_counters": {
                    "generated_tokens": client_tokens,
                    "finished_requests": totals.completed,
                    "source": "vllm:generation_tokens_total, vllm:request_success_total",
                },
                "equal": True,
            },
            "bounds": serving_bounds(case, host.spec, params.max_output_tokens).model_dump(mode="json"),
            "short_outputs": 0,
        }
        if host.output_checked:  # as kit.serve.correctness records a check that passed
            tokens = min(TOKENS_COMPARED[params.dtype], params.max_output_tokens)
            details["correctness"] = {
                "status": "pass",
                "prompts": 3,
                "tokens_compared": tokens,
                "agreed": 3,
                "reference": "transformers 5.23.0, fp32, CPU, greedy",
                "tolerance": f"the first {tokens} greedy tokens equal (engine at {params.dtype}, reference at fp32)",
            }
        if params.sweep is not None:
            details["sweep"] = sweep_details(case, out, host, rng)
        lead = host.rank(case, 0, world_size=1, device_name=serving_gpus(case, host), details=details)
        lead.telemetry = host.telemetry(case.gpus, duration)
        write_ranks(folder, index, [lead])
        runs.append(finish_run(host, case, index, [lead], duration + engine["ready_s"] + 30, exit_code=0))
    return runs


def maxbatch_runs(case: Case, folder: Path, host: Host, rng: random.Random) -> list[RunSample]:
    """The search's trials as kit.measure.maxbatch runs them (each a training run at one micro-batch in
    its own run folder), a trial running out of memory where the memory model says it would."""

    def run_trial(trial: Case, index: int) -> RunSample:
        scratch = folder / "trial"
        [sample] = train_runs(trial, scratch, host, rng)
        (folder / "runs").mkdir(exist_ok=True)
        (scratch / "runs" / "1").rename(folder / "runs" / str(index))
        shutil.rmtree(scratch)
        atomic_write_model(folder / "runs" / str(index) / "case.json", trial)
        return sample.model_copy(update={"index": index})

    return maxbatch.search(case, run_trial, device_memory_bytes(host.spec) if host.cuda else None)


WORKLOAD_RUNS = {"train": train_runs, "comm": comm_runs, "profile": profile_runs, "serve": serve_runs}


# --- The run directory --------------------------------------------------------------------------


TOPOLOGIES = {
    "nvlink-all-pairs": TopologyClass(
        gpu_count=8, interconnect="nvlink-all-pairs", nvlink_bonds=[8], label="8 GPUs, all pairs NVLink (NV8)"
    ),
    # GeForce cards joined two by two with NVLink bridges (RTX 3090: NV4); other pairs over PCIe.
    "nvlink-partial": TopologyClass(
        gpu_count=8,
        interconnect="nvlink-partial",
        nvlink_bonds=[4],
        label="8 GPUs, NVLink between 4 pairs (NV4), the rest PCIe",
    ),
    "pcie-only": TopologyClass(gpu_count=8, interconnect="pcie-only", label="8 GPUs, PCIe only"),
}
# A variant's throughput against its twin's, per workload: peer-to-peer off sends GPU-to-GPU
# traffic through host memory, which costs training about the 10 % the paper reports (C8).
VARIANT_SPEED = {"p2p-off": {"train": 0.9, "comm": 0.45}}


def synthetic_fingerprint(
    plan: Plan, gpu_name: str, collected: datetime, interconnect: str = "nvlink-all-pairs"
) -> Fingerprint:
    gpus = (
        [
            Gpu(
                index=i,
                name=gpu_name,
                uuid=f"GPU-5e7a{i:04d}-0000-0000-0000-00000000000{i}",
                memory_bytes=80 * 10**9,
                persistence_mode=True,
                ecc_enabled=True,
                ecc_uncorrected_aggregate=0,
                mig_enabled=False,
                pcie_gen_max=4,
                pcie_width_max=16,
            )
            for i in range(8)
        ]
        if plan.device == "cuda"
        else []
    )
    topology = Topology(topology_class=TOPOLOGIES[interconnect]) if gpus else Topology(unavailable="no NVIDIA GPU")
    return Fingerprint(
        collected_at=collected,
        host=HostInfo(
            hostname=HOSTNAME if gpus else "synthetic-cpu-host",
            os="Ubuntu 22.04.4 LTS",
            kernel="5.15.0-105-generic",
            architecture="x86_64",
            cpu=CpuInfo(
                model="Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz" if gpus else "AMD EPYC 7B13",
                sockets=2 if gpus else 1,
                physical_cores=64 if gpus else 2,
                logical_cpus=128 if gpus else 2,
                frequency_governor="performance",
            ),
            numa_nodes=2 if gpus else 1,
            memory_bytes=(2048 if gpus else 8) * GIB,
        ),
        gpus=GpuInventory(driver_version="550.54.15", cuda_driver_version="12.4", gpus=gpus)
        if gpus
        else GpuInventory(unavailable="NVML: no NVIDIA driver"),
        topology=topology,
        network=NetworkInfo(unavailable="no RDMA device"),
        container_runtime=ContainerRuntime(
            docker_client_version="26.1.3",
            docker_server_version="26.1.3",
            runtimes=["nvidia", "runc"],
            default_runtime="runc",
            nvidia_container_toolkit="1.15.0",
        ),
        image=ImageProbe(python="3.11.7", torch="2.13.0+cu130" if gpus else "2.13.0+cpu"),
        kit=KIT,
    )


HEALTHY_QUERY = Path(__file__).parent.parent / "fixtures" / "health" / "nvidia-smi-q-a100x8-healthy.txt"


def checked_health(plan: Plan, host: Host) -> HostHealth:
    """A healthy host's health section: a real 8 x A100 host's `nvidia-smi -q` (recorded, its
    SOURCE beside it) judged against the catalog, and the preflight's silent-data-corruption
    check over eight devices that computed the same bits (kit.measure.sdc)."""
    driver, gpus = parse_query(HEALTHY_QUERY.read_text())
    health = judged(HostHealth(catalog="", driver_version=driver, gpus=gpus, xid=XidLog(source="dmesg -T")))
    case = sdc_case(plan.cases, len(gpus))
    assert case is not None
    losses = [10.4 - 0.05 * step for step in range(8)]
    bits = [f"0x{struct.unpack('<I', struct.pack('<f', value))[0]:08x}" for value in losses]
    ranks = [
        host.rank(
            case,
            rank,
            details=SdcDetails(
                device=f"GPU{rank}: {host.device_name}",
                losses=losses,
                grad_norms=losses,
                loss_bits=bits,
                grad_norm_bits=bits,
            ),
        )
        for rank in range(case.gpus)
    ]
    sample = finish_run(host, case, 1, ranks, 40.0, exit_code=0)
    return health.model_copy(
        update={"silent_data_corruption": silent_data_corruption(case, sample, "preflight/sdc.g8/runs/1")}
    )


def write_run(
    root: Path,
    plan: Plan,
    *,
    seed: int = 0,
    speed: float = 1.0,
    gpu_name: str = A800,
    interconnect: str = "nvlink-all-pairs",
    cases: list[str] | None = None,
    fingerprint: bool = True,
    past_bound: tuple[str, ...] = (),
    checked: bool = False,
) -> Path:
    """A finished synthetic run of `plan` (all its cases, or `cases`) in `root`.

    `speed` scales every throughput (1.25: each step takes 1 / 1.25 of the time), which makes two
    runs of one plan an A/B pair with a known answer; `seed` draws their run-to-run noise. The
    cases `past_bound` names run PAST_BOUND_SPEEDUP times faster, past their physical bounds.
    `checked`: the host was checked before it was measured (checked_health) and each serving run's
    output was checked and equal to transformers'."""
    root = Path(root)
    host = Host(plan, gpu_name, seed, speed, output_checked=checked)
    selected = [case for case in plan.cases if cases is None or case.id in cases]
    before = synthetic_fingerprint(plan, gpu_name, host.clock.now, interconnect)
    if checked:
        before = before.model_copy(update={"health": checked_health(plan, host)})
    checks = evaluate(before, load_expectations(), 8 if plan.device == "cuda" else None)
    run = RunDir(root)
    if fingerprint:
        atomic_write_model(run.fingerprint_path, before)
    info = RunInfo(
        run_id=root.name,
        kit=KIT,
        checks=checks,
        profile=plan.profile,
        plan=plan,
        selected=[case.id for case in selected],
        executor="auto",
        host={
            "hostname": before.host.hostname,
            "os": "Linux-5.15.0-105-generic-x86_64-with-glibc2.35",
            "python": "3.11.7",
            "gpus": [gpu.name for gpu in before.gpus.gpus],
        },
        argv=["kit", "run", "--all", "--profile", plan.profile],
        started_at=host.clock.stamp(),
        synthetic="written by tests/support/paper_size_run.py: numbers drawn by a seeded generator, measured on no machine",
    )
    run.write_info(info)
    images: dict[str, str] = {}
    for case in selected:
        started = host.clock.stamp()
        folder = run.prepare_case(case)
        rng = host.rng(case)
        case_host = host if case.variant is None else host.slower(VARIANT_SPEED[case.variant][case.workload])
        if case.id in past_bound:
            case_host = case_host.slower(PAST_BOUND_SPEEDUP)  # its throughputs scaled up by the factor
        make_runs = maxbatch_runs if getattr(case.params, "max_batch_search", None) else WORKLOAD_RUNS[case.workload]
        runs = make_runs(case, folder, case_host, rng)
        executor = "docker" if any(sample.container for sample in runs) else "local"
        log = [
            f"=== run {s.index}: torchrun --nproc-per-node {case.gpus} -m kit.workloads --case case.json\n"
            f"=== run {s.index}: exit code {s.exit_code} after {s.wall_s:.1f} s\n"
            for s in runs
        ]
        atomic_write_text(folder / "log.txt", "".join(log))
        result = result_of(case, runs, executor, started).model_copy(update={"finished_at": host.clock.stamp()})
        run.write_result(result)
        for sample in runs:
            if sample.container is not None:
                images[sample.container.image] = (sample.container.repo_digests or [sample.container.image_digest])[0]
        host.clock.advance(5)
    if fingerprint:
        after = before.model_copy(update={"collected_at": host.clock.now})
        atomic_write_model(run.fingerprint_after_path, after)
    info.images = images
    info.status, info.finished_at = "finished", host.clock.stamp()
    run.write_info(info)
    run.write_sums()
    return root


def write_paper_size_run(root: Path, seed: int = 0, past_bound: tuple[str, ...] = ()) -> Path:
    """Every case of the `paper` profile, on 8 x A800 (see the module's docstring: synthetic);
    the cases `past_bound` names past their physical bounds."""
    return write_run(root, build_plan(load_protocol(), "paper"), seed=seed, past_bound=past_bound)


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "paper-size-run")
    write_paper_size_run(target)
    print(target)
