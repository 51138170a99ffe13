"""One rank of a Slurm job: Slurm's task variables as the rank environment, then the rank's command.

`srun python -m kit.workloads.srun_rank -- python -m kit.workloads ...` runs as every task of a
job step; each maps SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, the tasks on its node and
SLURM_NODEID to RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and GROUP_RANK (the variables the
kit's own launcher sets on one host), keeps MASTER_ADDR and MASTER_PORT from the batch script (the
first node's address), and replaces itself with the command. Nothing heavy is imported.
"""

from __future__ import annotations

import os
import platform
import re
import sys


def rank_environment(slurm: dict[str, str]) -> dict[str, str]:
    """The rank variables from a task's Slurm variables (SLURM_STEP_TASKS_PER_NODE reads like
    `2(x2)`: two tasks on each of two nodes)."""
    per_node = (
        slurm.get("SLURM_NTASKS_PER_NODE")
        or slurm.get("SLURM_STEP_TASKS_PER_NODE")
        or slurm.get("SLURM_TASKS_PER_NODE", "1")
    )
    count = re.match(r"\d+", per_node)
    assert count is not None, f"Slurm's tasks per node {per_node!r} start with no count"
    return {
        "RANK": slurm["SLURM_PROCID"],
        "LOCAL_RANK": slurm["SLURM_LOCALID"],
        "WORLD_SIZE": slurm["SLURM_NTASKS"],
        "LOCAL_WORLD_SIZE": count.group(0),
        "GROUP_RANK": slurm.get("SLURM_NODEID", "0"),
    }


def node_name() -> str:
    """The node this process runs on: its name in Slurm (SLURMD_NODENAME, which may differ from
    the host name: two simulated nodes share one host), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or platform.node()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        sys.exit("usage: python -m kit.workloads.srun_rank -- COMMAND (as a task of srun)")
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID") if name not in os.environ]
    if missing:
        sys.exit(
            f"kit.workloads.srun_rank: {', '.join(missing)} not set: run it as srun's task in the kit's batch script"
        )
    os.environ.update(rank_environment(dict(os.environ)))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
