"""A smoke run killed outright (kill -9, no clean-up) once its first case is in the evidence:
what a crash or a pulled plug leaves for `kit run --resume`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

KIT = [sys.executable, "-m", "kit.cli"]


def in_evidence(run: Path, result: Path) -> bool:
    """Whether SHA256SUMS lists this result.json: a resume keeps those and runs any other again
    (a result written just before the evidence could be)."""
    return f"  {result.relative_to(run)}\n" in (run / "SHA256SUMS").read_text()


def killed_after_first_case(run: Path) -> list[Path]:
    """Start the smoke comm stage into `run`, kill it once SHA256SUMS exists; the result.json
    files the evidence lists."""
    started = subprocess.Popen([*KIT, "run", "--profile", "smoke", "--stage", "comm", "--executor", "local", "--no-preflight",
                                "--out", str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (run / "SHA256SUMS").is_file():
        assert started.poll() is None and time.monotonic() < deadline, "no case finished"
        time.sleep(0.1)
    os.kill(started.pid, signal.SIGKILL)
    started.wait()
    return sorted(path for path in run.glob("cases/*/result.json") if in_evidence(run, path))
