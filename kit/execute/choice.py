"""Which executor a case runs in: the one asked for (by name, or the Slurm executor with its
options), else docker with its pinned image where it can, else this Python; and the line that
tells the user so."""

from __future__ import annotations

from kit.execute.base import Executor
from kit.plan.protocol import Case

EXECUTORS = ("docker", "local", "slurm")


def named(name: str) -> Executor:
    """The executor of that name, with its defaults (Slurm's options: kit.execute.slurm.configured)."""
    from kit.execute.docker import DockerExecutor
    from kit.execute.local import LocalExecutor
    from kit.execute.slurm import SlurmExecutor

    known: dict[str, type[DockerExecutor] | type[LocalExecutor] | type[SlurmExecutor]] = {
        "docker": DockerExecutor,
        "local": LocalExecutor,
        "slurm": SlurmExecutor,
    }
    if name not in known:
        raise ValueError(f"unknown executor {name!r} (known: {', '.join(EXECUTORS)})")
    return known[name]()


def choose(case: Case, requested: Executor | None = None) -> Executor:
    """The executor for a case: the one asked for, else the best available here.

    By default a GPU case runs in docker, in its pinned image (never silently in this Python: that
    takes `--executor local`); a CPU case (the smoke profile) runs in docker when an engine answers
    and its image is present locally, else in this Python (local).
    """
    from kit.execute import docker

    if requested is not None:
        return requested
    if case.device == "cuda" or docker.unavailable_reason(case) is None:
        return named("docker")
    return named("local")


def describe_choice(cases: list[Case], requested: Executor | None = None) -> str:
    """One line for the user: which executor the cases will run in, and why."""
    from kit.execute import docker

    if requested is not None:
        return f"executor: {requested.name} (as asked)"
    if any(case.device == "cuda" for case in cases):
        return "executor: docker, each case in its pinned image (--executor local runs them in this Python)"
    first_of_image = {case.image: case for case in reversed(cases)}
    reasons = {image: docker.unavailable_reason(case) for image, case in first_of_image.items()}
    in_docker = sorted(image for image, reason in reasons.items() if reason is None)
    elsewhere = {image: reason for image, reason in reasons.items() if reason is not None}
    if not elsewhere:
        return f"executor: docker (images present: {', '.join(in_docker) or 'none needed'})"
    why = "; ".join(sorted(set(elsewhere.values())))
    if not in_docker:
        return f"executor: local, in this Python ({why})"
    return f"executor: docker for {', '.join(in_docker)}; local for {', '.join(sorted(elsewhere))} ({why})"


def needs_local_frameworks(cases: list[Case], requested: Executor | None = None) -> bool:
    """Whether any case will run in this Python (which then needs torch and the frameworks), here
    or, with Slurm and no containers, on the compute nodes; an nccl-tests case runs its binary
    and needs neither."""
    from kit.execute.nccl_tests import runs_binary

    return any(choose(case, requested).uses_this_python and not runs_binary(case) for case in cases)
