"""The batch script of one Slurm job: a case's launch as `sbatch` runs it, and `srun` starts its ranks.

Pure functions of the case, the options and the paths, so that every script can be read, kept
beside the run, and tested as a golden file (tests/golden/slurm/); the executor
(kit.execute.slurm) submits what they write.

One job per launch: N nodes x T tasks, one task per rank (one GPU each on a GPU case). srun's
tasks are the ranks; `kit.workloads.srun_rank` maps Slurm's task variables to the rank
environment torch.distributed reads, with the first node's address as the master's.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from pydantic import BaseModel

from kit.plan.protocol import Case
from kit.rundir.schema import SlurmOptions

CONTAINER_MODES = ("none", "pyxis")
KIT_SOURCE_IN_CONTAINER = "/opt/kit/src/kit"  # where the images find the kit (as the docker executor mounts it)
MASTER_PORT_BASE = 20000  # the job's rendezvous port: base + job id modulo the span, unique per running job
MASTER_PORT_SPAN = 20000


class Layout(BaseModel):
    """How a case's ranks sit on nodes."""

    nodes: int
    tasks_per_node: int


def layout(ranks: int, device: str, options: SlurmOptions) -> Layout:
    """Nodes x tasks for `ranks` ranks: the nodes asked for (never more than the ranks), else
    GPU ranks filling nodes of `gpus_per_node`, else one node; ranks must split evenly."""
    if options.nodes is not None:
        nodes = min(options.nodes, ranks)
    elif device == "cuda" and options.gpus_per_node is not None:
        nodes = math.ceil(ranks / options.gpus_per_node)
    else:
        nodes = 1
    if ranks % nodes:
        raise ValueError(f"{ranks} ranks do not split evenly over {nodes} nodes")
    return Layout(nodes=nodes, tasks_per_node=ranks // nodes)


def time_limit(seconds: float) -> str:
    """A timeout as Slurm's --time (whole minutes, rounded up: Slurm counts in minutes)."""
    minutes = max(1, math.ceil(seconds / 60))
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def sbatch_header(case: Case, place: Layout, options: SlurmOptions, limit: str, output: Path) -> list[str]:
    lines = [
        f"#SBATCH --job-name=kit-{case.id}",
        f"#SBATCH --nodes={place.nodes}",
        f"#SBATCH --ntasks-per-node={place.tasks_per_node}",
        f"#SBATCH --time={options.time_limit or limit}",
        f"#SBATCH --output={output}",
    ]
    if case.device == "cuda":
        lines.append(f"#SBATCH --gpus-per-node={place.tasks_per_node}")
    return lines + site_lines(options)


def site_lines(options: SlurmOptions) -> list[str]:
    """Where the cluster wants jobs: partition, account, the nodes they are pinned to, and the
    user's own sbatch arguments."""
    lines = [f"#SBATCH --partition={options.partition}"] if options.partition else []
    lines += [f"#SBATCH --account={options.account}"] if options.account else []
    lines += [f"#SBATCH --nodelist={options.nodelist}"] if options.nodelist else []
    return lines + [f"#SBATCH {argument}" for argument in options.sbatch_args]


def environment_lines(case: Case, memory_cap_bytes: int | None) -> list[str]:
    """The variables every rank gets (the case's own last: they win), and a CPU case's data
    limit, which srun passes on to the tasks (Slurm propagates resource limits by default)."""
    lines = ["export PYTHONUNBUFFERED=1"]
    if case.device == "cpu":  # a CPU rank's threads: the cores Slurm gave its task
        lines.append('export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"')
    lines += [f"export {name}={shlex.quote(value)}" for name, value in case.params.env.items()]
    if memory_cap_bytes is not None:
        lines.append(f"ulimit -S -d {memory_cap_bytes // 1024}")  # soft: a process may lift it (an op build does)
    return lines


def pyxis_arguments(image: str, run_dir: Path, kit_source: Path) -> list[str]:
    """srun's pyxis options: the case's image by digest, the run directory at its own path (so
    that every path in the script holds inside), the kit's source read-only where the images
    look for it."""
    if "@sha256:" not in image:
        raise ValueError(
            f"pyxis runs an image by its registry digest; {image} has none in the lock "
            "(push it to a registry the cluster reaches and pin its digest in manifests/images.lock.yaml)"
        )
    return [
        f"--container-image={image}",
        f"--container-mounts={run_dir}:{run_dir},{kit_source}:{KIT_SOURCE_IN_CONTAINER}:ro",
        "--no-container-mount-home",
    ]


def batch_script(
    case: Case,
    rank_command: list[str],
    *,
    python: str,
    options: SlurmOptions,
    ranks: int,
    timeout_s: float,
    output: Path,
    rank_logs: Path,
    memory_cap_bytes: int | None = None,
    container: list[str] | None = None,
    mpi: str | None = None,
) -> str:
    """The whole script: #SBATCH lines, the master's address and port, the ranks' environment,
    and one srun that starts every rank of `rank_command` (`container`: srun's pyxis options).
    A rank that fails ends the step (--kill-on-bad-exit): the others stop instead of waiting.
    `mpi`: srun's MPI plugin for a command that is an MPI program itself (nccl-tests built with
    MPI=1), whose ranks then come from MPI, not from kit.workloads.srun_rank."""
    place = layout(ranks, case.device, options)
    launch = (
        [f"--mpi={mpi}", *(container or []), *rank_command]
        if mpi
        else [*(container or []), python, "-m", "kit.workloads.srun_rank", "--", *rank_command]
    )
    srun = ["srun", "--kill-on-bad-exit=1", f"--output={rank_logs}", *launch]
    lines = [
        "#!/bin/bash",
        *sbatch_header(case, place, options, time_limit(timeout_s), output),
        f"# kit case {case.id}: {ranks} ranks, {place.nodes} node(s) x {place.tasks_per_node} task(s)",
        "set -euo pipefail",
        'first_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "MASTER_ADDR=$(scontrol show node \"$first_node\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        'export MASTER_ADDR="${MASTER_ADDR:-$first_node}"',
        f"export MASTER_PORT=$(({MASTER_PORT_BASE} + SLURM_JOB_ID % {MASTER_PORT_SPAN}))",
        *environment_lines(case, memory_cap_bytes),
        'echo "kit: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, master $MASTER_ADDR:$MASTER_PORT"',
        shlex.join(srun),
    ]
    return "\n".join(lines) + "\n"


def check_script(
    marks: Path, nodes: int, options: SlurmOptions, output: Path, fingerprint_step: str | None = None
) -> str:
    """A tiny job whose every node writes a file named after it into `marks` (in the run
    directory): the kit reads them back to know that the compute nodes see the run directory.
    `fingerprint_step` (kit.execute.node_fingerprint) then fingerprints each of those nodes."""
    header = tiny_job_header("kit-shared-fs-check", nodes, output) + site_lines(options)
    write = f'mkdir -p {shlex.quote(str(marks))} && hostname > {shlex.quote(str(marks))}/"$SLURMD_NODENAME"'
    steps = [f"srun bash -c {shlex.quote(write)}", *([fingerprint_step] if fingerprint_step else [])]
    return "\n".join([*header, "set -euo pipefail", *steps]) + "\n"


def node_fingerprint_script(nodes: list[str], options: SlurmOptions, output: Path, fingerprint_step: str) -> str:
    """A tiny job pinned to `nodes` (--nodelist), one task each, running `fingerprint_step`: the
    nodes a case's job ran on that the check job at the start did not land on."""
    pinned = options.model_copy(update={"nodelist": ",".join(nodes)})
    header = tiny_job_header("kit-node-fingerprint", len(nodes), output) + site_lines(pinned)
    return "\n".join([*header, "set -euo pipefail", fingerprint_step]) + "\n"


def tiny_job_header(name: str, nodes: int, output: Path) -> list[str]:
    return [
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --time=00:02:00",
        f"#SBATCH --output={output}",
    ]
