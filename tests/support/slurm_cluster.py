"""What the tests that drive a real Slurm share: the two-node Slurm of tests/slurm/start.sh, or a
clear reason to skip. Where KIT_REQUIRE_SLURM=1 (a CI that starts it), a missing Slurm is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import TESTS

REQUIRE = os.environ.get("KIT_REQUIRE_SLURM") == "1"
START = TESTS / "slurm" / "start.sh"


def nodes_up() -> list[str]:
    done = subprocess.run(
        ["sinfo", "-h", "-N", "-t", "idle,mixed,allocated", "-o", "%N"], capture_output=True, text=True, timeout=30
    )
    return sorted(set(done.stdout.split())) if done.returncode == 0 else []


def slurm_or_skip() -> list[str]:
    """The nodes of a running Slurm with at least two of them up."""
    reason = None
    if shutil.which("sbatch") is None:
        reason = f"Slurm is not installed here: run {START} (as root) to install and start a two-node Slurm"
    elif len(nodes_up()) < 2:
        reason = f"no Slurm with two nodes up answers here (sinfo): start one with {START} (as root)"
    if reason is not None:
        if REQUIRE:
            pytest.fail(f"KIT_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    return nodes_up()


def queued_jobs(name_prefix: str = "kit-") -> list[str]:
    """`squeue` lines of the kit's jobs still pending, running or completing."""
    done = subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True, timeout=30)
    return [line for line in done.stdout.splitlines() if line.split()[1].startswith(name_prefix)]


def processes_with(environment_entry: str, text: str) -> list[int]:
    """Pids whose environment holds `NAME=value` and whose command line mentions `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if environment_entry.encode() in environ and text in cmdline:
            found.append(int(proc.name))
    return found
