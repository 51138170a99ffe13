"""What of the plan this host can attempt: why a case cannot run here at all. Kept light (no
pydantic model is imported), as `kit list` asks it of every case of the plan cache's."""

from __future__ import annotations

from typing import TYPE_CHECKING

import kit
from kit.host.this_host import Host
from kit.plan.workload_modules import WORKLOADS

if TYPE_CHECKING:  # pydantic's models: `kit list` reads the cases without them (kit.plan.plan_cache)
    from kit.plan.protocol import Case


def skip_reason(case: Case, host: Host, skip_predicted_oom: bool = False, cluster: bool = False) -> str | None:
    """Why a case cannot be attempted on this host at all, or None. With skip_predicted_oom, a
    GPU case whose predicted memory exceeds the host GPU's (kit.plan.predictions) is not attempted.
    With `cluster` (the Slurm executor) the nodes, not this host, have the GPUs: Slurm refuses a
    job its nodes cannot hold, and the case ends `error` with its words."""
    if case.workload not in (*WORKLOADS, "serve"):
        return f"no '{case.workload}' workload in kit {kit.__version__} yet"
    if case.device == "cuda" and case.gpus > host.gpu_count and not cluster:
        return f"needs {case.gpus} GPUs, host has {host.gpu_count}"
    if case.does_not_fit and not cluster:
        return case.does_not_fit
    if skip_predicted_oom and case.device == "cuda":
        from kit.plan.predictions import host_gpu_spec, predicted_oom
        from kit.theory.hardware import load_hardware

        used = host.gpu_memory_bytes[: case.gpus]
        capacity = min(used) if len(used) == case.gpus else None
        return predicted_oom(case, host_gpu_spec(host.gpu_names, case.gpus, load_hardware()), capacity)
    return None
