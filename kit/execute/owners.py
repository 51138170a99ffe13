"""Which kit processes have started containers or Slurm jobs, known without asking docker or Slurm.

Each kit process that starts a container or submits a job leaves a mark in the kit's cache
first, and removes it when it exits. A kit that was killed (kill -9, a lost session) leaves its
mark behind, so the next kit start, whatever its command, knows to look for that kit's leftover
containers and jobs; where no mark of a dead process exists, starting kit costs no docker or
Slurm call at all.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from kit.cache import cache_dir


def process_start_ticks(pid: int) -> str | None:
    """When a process started (clock ticks since boot): a pid plus this names one process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[19]
    except (OSError, IndexError):
        return None


def alive(host: str, pid: str, start_ticks: str) -> bool:
    """Whether the kit process named by host, pid and start still runs; another host's process
    is taken to (it is not ours to judge)."""
    import platform

    if host != platform.node():
        return True
    if not pid.isdigit():
        return False
    started = process_start_ticks(int(pid))
    return started is not None and started == start_ticks


def marks_dir() -> Path:
    return cache_dir() / "containers" / "owners"


def mark_path(pid: int, start_ticks: str | None) -> Path:
    return marks_dir() / f"{pid}-{start_ticks or 'unknown'}"


def mark_this_process() -> None:
    """Before this process's first container: the mark a killed kit leaves behind."""
    path = mark_path(os.getpid(), process_start_ticks(os.getpid()))
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        atexit.register(path.unlink, missing_ok=True)


def dead_marks() -> list[Path]:
    """Marks of kit processes that no longer run: their containers may be left over."""
    if not marks_dir().is_dir():
        return []
    dead = []
    for path in marks_dir().iterdir():
        pid, _, ticks = path.name.partition("-")
        if not pid.isdigit() or process_start_ticks(int(pid)) != ticks:
            dead.append(path)
    return dead
