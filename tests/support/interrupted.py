"""A smoke run killed outright (kill -9, no clean-up) once cases are in the evidence: what a
crash or a pulled plug leaves for `kit run --resume`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

KIT = [sys.executable, "-m", "kit.cli"]


def smoke_comm_run(run: Path) -> list[str]:
    """`kit run` of the smoke profile's collectives in this Python into `run`: a few short cases."""
    return [
        *KIT,
        "run",
        "--profile",
        "smoke",
        "--stage",
        "comm",
        "--executor",
        "local",
        "--no-preflight",
        "--out",
        str(run),
    ]


def in_evidence(run: Path, result: Path) -> bool:
    """Whether SHA256SUMS lists this result.json: a resume keeps those and runs any other again
    (a result written just before the evidence could be)."""
    return f"  {result.relative_to(run)}\n" in (run / "SHA256SUMS").read_text()


def killed_after_first_case(run: Path) -> list[Path]:
    """Start the smoke comm stage into `run`, kill it once SHA256SUMS exists; the result.json
    files the evidence lists."""
    started = subprocess.Popen(
        smoke_comm_run(run),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while not (run / "SHA256SUMS").is_file():
        assert started.poll() is None and time.monotonic() < deadline, "no case finished"
        time.sleep(0.1)
    os.kill(started.pid, signal.SIGKILL)
    started.wait()
    return sorted(path for path in run.glob("cases/*/result.json") if in_evidence(run, path))


@dataclass
class KilledRun:
    """What the kill left, recorded before the resume changes it, and the resume."""

    path: Path
    kept: dict[Path, bytes]  # the result files SHA256SUMS listed when the first run was killed
    left_alive: list[str]  # processes naming the run that outlived the kill by 30 s
    torn: list[str]  # result files the kill left unreadable
    temporary: list[str]  # half-written *.tmp files the kill left
    resumed: subprocess.CompletedProcess


def finished(run: Path) -> list[Path]:
    return sorted(run.glob("cases/*/result.json"))


def processes_mentioning(text: str) -> list[str]:
    """Processes naming `text` in their command line, or holding a file under it open (a rank
    forked by kit.workloads.forkserver has the server's command line, and the case log open)."""
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    named = [line for line in listing.splitlines() if text in line and "ps -eo" not in line]
    holding = []
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(text) and fd.parts[2] != str(os.getpid()):
                holding.append(f"{fd.parts[2]} holds {os.readlink(fd)}")
    return named + holding


def unreadable(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except ValueError:
        return True
    return False


def killed_and_resumed(run: Path, selection: list[str]) -> KilledRun:
    """`kit run SELECTION` into `run`, killed once two cases finished, then `kit run --resume`."""
    first = subprocess.Popen(
        [*KIT, "run", *selection, "--out", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 600
    while len(finished(run)) < 2:
        if first.poll() is not None:
            raise AssertionError(f"the run ended before two cases finished: {first.stderr.read().decode()[-3000:]}")
        if time.monotonic() > deadline:
            first.kill()
            raise AssertionError("no two cases finished in 10 minutes")
        time.sleep(0.5)
    os.kill(first.pid, signal.SIGKILL)  # no chance to clean up: the launcher must die with it
    first.wait()
    kept = {path: path.read_bytes() for path in finished(run) if in_evidence(run, path)}
    for _ in range(60):
        if not processes_mentioning(str(run)):
            break
        time.sleep(0.5)
    left_alive = processes_mentioning(str(run))
    torn = [str(path) for path in finished(run) if unreadable(path)]
    temporary = [str(path) for path in run.rglob("*.tmp")]
    resumed = subprocess.run([*KIT, "run", "--resume", str(run)], capture_output=True, text=True)
    return KilledRun(run, kept, left_alive, torn, temporary, resumed)
