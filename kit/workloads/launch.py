"""The ranks of one run on one host: N workload processes with the rank environment set.

`python -m kit.workloads.launch --nproc N -- python -m kit.workloads --case C --out D` starts N
processes with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set,
the variables torch.distributed's env:// rendezvous and DeepSpeed read (what torchrun sets for a
single node). It imports nothing heavy: torchrun imports torch first, seconds per run that the
workload processes pay again anyway. When one rank fails, the others get a short grace to finish
their own failure report, then are stopped, so a rank waiting in a collective never hangs the
run; SIGTERM and SIGINT are passed on to every rank; the ranks die with the launcher.
Its exit status is that of the first rank to fail, else 0.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

FAILED_RANK_GRACE_S = 10
POLL_S = 0.05


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rank_environment(rank: int, nproc: int, port: int, base: dict[str, str]) -> dict[str, str]:
    return {
        **base,
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }


def _die_with_launcher() -> None:
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _stop(ranks: list[subprocess.Popen], sig: int) -> None:
    for process in ranks:
        if process.poll() is None:
            try:
                process.send_signal(sig)
            except ProcessLookupError:
                pass


def executed_rank(command: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(command, env=env, preexec_fn=_die_with_launcher)


def run(nproc: int, command: list[str], start=executed_rank) -> int:
    """The ranks, each started by `start(command, env)` (executed; kit.workloads.forkserver forks
    them), watched until all have ended."""
    port = free_loopback_port()
    ranks = [start(command, rank_environment(rank, nproc, port, dict(os.environ))) for rank in range(nproc)]

    def forward(signum, frame):
        _stop(ranks, signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    failed_at, stopped, first_failure = None, None, 0
    while [process.poll() for process in ranks].count(None):
        failures = [process.returncode for process in ranks if process.returncode not in (None, 0)]
        if failed_at is None and failures:
            failed_at, first_failure = time.monotonic(), failures[0]
        if failed_at is not None and stopped is None and time.monotonic() - failed_at > FAILED_RANK_GRACE_S:
            stopped = time.monotonic()
            _stop(ranks, signal.SIGTERM)
        if stopped is not None and time.monotonic() - stopped > FAILED_RANK_GRACE_S:
            _stop(ranks, signal.SIGKILL)
        time.sleep(POLL_S)
    code = first_failure or next((process.returncode for process in ranks if process.returncode != 0), 0)
    return 128 - code if code < 0 else code  # a rank killed by signal N: 128 + N, as a shell says it


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kit.workloads.launch")
    parser.add_argument("--nproc", type=int, required=True, help="processes (ranks) to start")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the rank's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.nproc < 1 or not command:
        parser.error("give --nproc N (N >= 1) and the command after --")
    sys.exit(run(args.nproc, command))


if __name__ == "__main__":
    main()
