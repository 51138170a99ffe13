"""`kit run --executor slurm --per-node`: the same plan on every node of a Slurm allocation at once,
each node into its own run directory (OUT/<node>/), for `kit report --fleet` to compare.

Each node's run is a whole `kit run` of its own (its lock, its evidence, `--resume` on its own),
its jobs pinned to its node (`--nodelist`) with every case's ranks on it (`--nodes 1`). They run
side by side; their lines are printed prefixed with the node's name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from kit.execute.slurm import SlurmUnavailable, slurm_command

UP_STATES = "idle,mixed,allocated"


def fleet_nodes(partition: str | None) -> list[str]:
    """The nodes of the allocation kit runs in (SLURM_JOB_NODELIST), else the nodes of the
    partition (or of every partition) that are up."""
    listed = os.environ.get("SLURM_JOB_NODELIST")
    if listed:
        arguments = ["scontrol", "show", "hostnames", listed]
    else:
        arguments = ["sinfo", "-h", "-N", "-t", UP_STATES, "-o", "%N", *(["-p", partition] if partition else [])]
    done = slurm_command(arguments)
    if done.returncode != 0:
        raise SlurmUnavailable(f"{' '.join(arguments)} failed: {done.stderr.strip() or 'no reason given'}")
    return list(dict.fromkeys(done.stdout.split()))


def node_arguments(arguments: Sequence[str], node: str, out: Path, folder_of: Callable[[str], str] = str) -> list[str]:
    """`kit run`'s arguments for one node's run: the run's own, into OUT/<node>/ (a redacted
    run's into OUT/<the node's token>/: `folder_of`), every job on that node and each case's ranks
    on it alone."""
    return [*arguments, f"--out={out / folder_of(node)}", "--nodes=1", f"--nodelist={node}"]


def _relay(node: str, process: subprocess.Popen[str], say: Callable[[str], None]) -> None:
    assert process.stdout is not None  # a pipe (run_on_each_node)
    for line in process.stdout:
        say(f"[{node}] {line.rstrip()}")


def run_on_each_node(
    arguments: Sequence[str],
    nodes: Sequence[str],
    out: Path,
    say: Callable[[str], None],
    folder_of: Callable[[str], str] = str,
) -> dict[str, int]:
    """One `kit run` per node, all at once; each one's exit status. Each runs in a session of its
    own and gets from this kit the Ctrl-C (SIGINT) or SIGTERM this kit gets, once, then cancels its
    own jobs before it ends; KeyboardInterrupt is raised again once they all have."""
    processes = {
        node: subprocess.Popen(
            [sys.executable, "-m", "kit.cli", "run", *node_arguments(arguments, node, out, folder_of)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        for node in nodes
    }
    relays = [
        threading.Thread(target=_relay, args=(node, process, say), daemon=True) for node, process in processes.items()
    ]
    for relay in relays:
        relay.start()

    def forward(signum: int, frame=None) -> None:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    interrupted = False
    try:
        while any(process.poll() is None for process in processes.values()):
            try:
                for process in processes.values():
                    process.wait()
            except KeyboardInterrupt:
                if not interrupted:
                    interrupted = True
                    forward(signal.SIGINT)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for relay in relays:
            relay.join(timeout=5)
    if interrupted:
        raise KeyboardInterrupt
    return {node: process.returncode for node, process in processes.items()}
