"""What a kit that was killed (kill -9, a lost session) left running: its containers and Slurm
jobs go before new ones start."""

from __future__ import annotations

from kit.execute.docker import remove_leftovers as remove_containers
from kit.execute.owners import dead_marks
from kit.execute.slurm import cancel_leftovers


def remove_leftovers(say) -> list[str] | None:
    """Containers and Slurm jobs of a kit that was killed (kill -9, a lost session) go before new
    ones start, and the marks of kits that no longer run with them; None where docker or Slurm
    could not be asked."""
    marks = dead_marks()
    jobs, containers = cancel_leftovers(say), remove_containers(say)
    if jobs is None or containers is None:
        return None
    for mark in marks:
        mark.unlink(missing_ok=True)
    return jobs + containers
