"""What of the plan this host can attempt, and what it is predicted to fail for: the GPUs a case
needs, their memory with a margin, the host memory offload needs, the disk its checkpoint needs,
and the software it needs. Kept light (no pydantic model is imported for a CPU case), as
`kit list` asks it of every case of the plan cache's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple

import kit
from kit.host.this_host import Host
from kit.plan.workload_modules import WORKLOADS

if TYPE_CHECKING:  # pydantic's models: `kit list` reads the cases without them (kit.plan.plan_cache)
    from kit.plan.protocol import Case

GIB = 2**30
# What a GPU holds beyond the memory model's prediction. Allocator slack: the recorded H100 run
# (tests/fixtures/h100x1-run, the same three cases on the H200 of tests/fixtures/gpu_results)
# reserved 0.67, 1.14 and 1.64 GiB more than predicted (profile r b16 53.91 vs 53.24, profile
# base 53.23 vs 52.09, scaling q b2 10.96 vs 9.32 GiB): 2 GiB. The CUDA context, which no
# allocator counts: about 300 MB with lazy module loading, up to 1 GB without (pytorch/pytorch
# issues 107667 and 28394): 1 GiB. NCCL's buffers for a case of several GPUs: 1 GiB, assumed
# (no multi-GPU run of the kit is recorded yet).
ALLOCATOR_SLACK_BYTES = 2 * GIB
CUDA_CONTEXT_BYTES = 1 * GIB
NCCL_BUFFERS_BYTES = 1 * GIB
CHECKPOINT_BYTES_PER_PARAM = 2  # synthetic checkpoints are bf16 (kit.plan.model_files.WEIGHTS_DTYPE)
# The engines published as images only: without a docker engine they are not installed here.
# Each loads a checkpoint; vLLM makes random weights itself (kit.serve.engines, makes_random_weights).
IMAGE_ONLY_ENGINES = {"tgi": "TGI", "lightllm": "LightLLM"}

Shortfall = Literal["predicted OOM", "host memory", "disk", "unavailable"]


class PredictedFailure(NamedTuple):
    """Why a case this host can attempt is predicted to fail, with the figures it rests on."""

    kind: Shortfall
    reason: str

    @property
    def text(self) -> str:
        return f"{self.kind}: {self.reason}"


def skip_reason(case: Case, host: Host, skip_predicted_oom: bool = False, cluster: bool = False) -> str | None:
    """Why a case cannot be attempted on this host at all, or None. With skip_predicted_oom, a
    case predicted to fail for its GPU memory, host memory, disk or software (predicted_failure)
    is not attempted either. With `cluster` (the Slurm executor) the nodes, not this host, have
    the GPUs: Slurm refuses a job its nodes cannot hold, and the case ends `error` with its words."""
    if case.workload not in (*WORKLOADS, "serve"):
        return f"no '{case.workload}' workload in kit {kit.__version__} yet"
    if case.device == "cuda" and case.gpus > host.gpu_count and not cluster:
        return f"needs {case.gpus} GPUs, host has {host.gpu_count}"
    if case.does_not_fit and not cluster:
        return case.does_not_fit
    if skip_predicted_oom and not cluster and (failure := predicted_failure(case, host)) is not None:
        return failure.text
    return None


def gpu_memory_margin(gpus: int) -> int:
    """Bytes a GPU of a case of `gpus` GPUs holds beyond the predicted peak (see above)."""
    return ALLOCATOR_SLACK_BYTES + CUDA_CONTEXT_BYTES + (NCCL_BUFFERS_BYTES if gpus > 1 else 0)


def predicted_failure(case: Case, host: Host) -> PredictedFailure | None:
    """The first resource the host lacks for a GPU case it can attempt, or None: its software,
    then its GPUs' memory (with the margin), its host memory, its free disk. A resource the host
    (or its fingerprint) does not report is not judged. A CPU case fails for one reason alone."""
    if case.device != "cuda":  # kit.plan.protocol.unavailable_by_design's, read from a plan-cache view too
        flash = case.step is not None and case.step.attention == "flash_attention_2"
        return PredictedFailure("unavailable", "FlashAttention-2 needs a CUDA GPU") if flash else None
    return _missing_software(case, host) or _gpu_memory(case, host) or _host_memory(case, host) or _disk(case, host)


def _missing_software(case: Case, host: Host) -> PredictedFailure | None:
    """Without a docker engine a case runs in this Python (--executor local), which must have
    what it needs; with one, its image has it (manifests/images.lock.yaml)."""
    found = host.resources
    if found.docker_engine is not False:
        return None
    if case.workload == "serve":
        engine = IMAGE_ONLY_ENGINES.get(case.method)
        if engine is not None:
            return PredictedFailure("unavailable", f"no docker engine for {engine}'s image")
        return None
    step, train, packages = case.step, case.train, found.packages or {}
    needed = ["flash-attn"] if step is not None and step.attention == "flash_attention_2" else []
    needed += ["deepspeed"] if train is not None and train.framework == "deepspeed" else []
    needed += ["bitsandbytes"] if train is not None and train.quantization != "none" else []
    missing = [name for name in needed if name in packages and packages[name] is None]
    if missing:
        return PredictedFailure("unavailable", f"no {' and no '.join(missing)}")
    fused_adam = (
        train is not None
        and train.framework == "deepspeed"
        and not train.offload
        and train.optimizer_impl != "torch"
        and (train.quantization == "none" or train.peft != "none")
    )  # DeepSpeed's FusedAdam, JIT-built on first use (kit.workloads.deepspeed_ops.needed_ops)
    if fused_adam and found.cuda_compiler is False:
        return PredictedFailure("unavailable", "no nvcc to build DeepSpeed's FusedAdam")
    return None


def _gpu_memory(case: Case, host: Host) -> PredictedFailure | None:
    from kit.plan.predictions import host_gpu_spec, predicted_training_memory
    from kit.theory.hardware import load_hardware

    memory = predicted_training_memory(case).memory
    if memory is None:
        return None
    used = host.gpu_memory_bytes[: case.gpus]
    margin = gpu_memory_margin(case.gpus)
    if len(used) == case.gpus and used:
        capacity, where = min(used), "GPU (NVML)"
    else:
        from kit.plan.predictions import device_memory_bytes

        spec = host_gpu_spec(host.gpu_names, case.gpus, load_hardware())
        datasheet = None if spec is None else device_memory_bytes(spec)
        if datasheet is None:
            return None
        capacity, where = int(datasheet), "GPU (datasheet)"
    if memory.total + margin <= capacity:
        return None
    return PredictedFailure(
        "predicted OOM",
        f"{memory.total / GIB:.1f} GiB + {margin / GIB:.0f} GiB margin > {capacity / GIB:.1f} GiB {where}",
    )


def _host_memory(case: Case, host: Host) -> PredictedFailure | None:
    """ZeRO offload keeps each rank's share of the optimizer states (and, at stage 3, of the
    parameters) in host memory: all ranks together must fit in it."""
    from kit.plan.predictions import predicted_training_memory

    total = host.resources.memory_bytes
    memory = predicted_training_memory(case).memory
    if total is None or memory is None or not memory.offloaded_to_host:
        return None
    needed = memory.offloaded_to_host * case.gpus
    if needed <= total:
        return None
    return PredictedFailure("host memory", f"{needed / GIB:.0f} GiB offloaded > {total / GIB:.1f} GiB of host memory")


def checkpoint_bytes(case: Case) -> float | None:
    """The synthetic checkpoint a case loads (bf16 weights), or None for one that loads none."""
    if not case.needs_checkpoint or case.shape is None:
        return None
    if case.workload == "serve" and case.method not in IMAGE_ONLY_ENGINES:
        return None
    from kit.theory.analytic import parameter_count

    return parameter_count(case.model_shape) * CHECKPOINT_BYTES_PER_PARAM


def _disk(case: Case, host: Host) -> PredictedFailure | None:
    free = host.resources.disk_free_bytes
    needed = checkpoint_bytes(case)
    if free is None or needed is None or needed <= free:
        return None
    return PredictedFailure("disk", f"{needed / 1e9:.0f} GB checkpoint > {free / 1e9:.0f} GB free")
