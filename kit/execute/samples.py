"""What a finished run left behind (rank samples, exit code, timeout) -> one RunSample.

Shared by every executor, so a run is judged the same way wherever it ran.
"""

from __future__ import annotations

import os
from pathlib import Path

from kit.plan.predictions import GIB
from kit.plan.protocol import Case
from kit.rundir.directory import read_model
from kit.rundir.schema import RankSample, RunSample
from kit.serve.session import Placement, run_driver

# When ranks disagree, the most telling status wins: an OOM on one rank explains the errors
# (torn-down collectives) on the others.
SEVERITY = ("oom", "error", "unavailable", "ok")


def host_memory_bytes() -> int:
    """This host's physical memory, the figure a host out-of-memory kill is said with."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def killed_for_host_memory(sample: RunSample, memory_bytes: int) -> RunSample:
    """A run whose container the kernel's OOM killer ended ran out of host memory: `oom`, with
    the host's memory, never an error of exit code 137 (SIGKILL)."""
    if sample.status != "error":  # a rank's own out-of-memory (the GPU's) says more
        return sample
    reason = (
        f"host out of memory: the kernel's OOM killer ended the container (exit code {sample.exit_code}) "
        f"on a host of {memory_bytes / GIB:.0f} GiB; see log.txt"
    )
    return sample.model_copy(update={"status": "oom", "reason": reason})


def run_sample(
    *,
    index: int,
    ranks: list[RankSample],
    expected_ranks: int,
    exit_code: int | None,
    wall_s: float,
    timed_out: bool,
    timeout_s: int,
) -> RunSample:
    def sample(status, reason=None):
        return RunSample(index=index, status=status, reason=reason, exit_code=exit_code, wall_s=wall_s, ranks=ranks)

    if timed_out:
        return sample("timeout", f"run {index} exceeded the case timeout of {timeout_s} s and was killed")
    for status in SEVERITY[:-1]:
        failed = [rank for rank in ranks if rank.status == status]
        if failed:
            return sample(status, f"rank {failed[0].rank}: {failed[0].reason}")
    if len(ranks) != expected_ranks:
        missing = sorted(set(range(expected_ranks)) - {rank.rank for rank in ranks})
        return sample("error", f"ranks {missing} wrote no sample (exit code {exit_code}); see log.txt")
    if exit_code != 0:
        return sample("error", f"all ranks finished but the launcher exited with {exit_code}; see log.txt")
    return sample("ok")


def serve_run(case: Case, case_dir: Path, index: int, log, placement: Placement) -> RunSample:
    """One independent run of a serve case, wherever its engine is placed: the driver's sample,
    judged like any other run."""
    driver, wall_s = run_driver(case, case_dir, index, log, placement)
    return run_sample(
        index=index,
        ranks=[driver],
        expected_ranks=1,
        exit_code=0 if driver.status == "ok" else 1,
        wall_s=wall_s,
        timed_out=False,
        timeout_s=case.params.timeout_s,
    )


def read_rank_samples(out_dir: Path) -> list[RankSample]:
    return [
        read_model(path, RankSample)
        for path in sorted(out_dir.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    ]


def launch_samples(
    *,
    indices: list[int],
    out_dirs: list[Path],
    expected_ranks: int,
    exit_code: int | None,
    wall_s: float,
    timed_out: bool,
    timeout_s: int,
) -> list[RunSample]:
    """The runs one launch did, in order, up to the first that did not end ok (the launch stops
    there, as the runner does). A launch of one run is that run; in a shared launch, each run's
    wall time is its slowest rank's own (build, warm-up, measured), and the launch's exit code and
    timeout belong to the run it ended in (a timed-out run's wall time is the launch's: it wrote none)."""
    samples: list[RunSample] = []
    for index, out_dir in zip(indices, out_dirs):
        ranks = read_rank_samples(out_dir)
        whole = len(ranks) == expected_ranks and all(rank.status == "ok" for rank in ranks)
        last = index == indices[-1] or not whole
        own = max((sum(rank.phases_s.values()) for rank in ranks), default=0.0)
        sample = run_sample(
            index=index,
            ranks=ranks,
            expected_ranks=expected_ranks,
            exit_code=exit_code if last else 0,
            wall_s=wall_s if len(indices) == 1 or (timed_out and last) else own,
            timed_out=timed_out and last,
            timeout_s=timeout_s,
        )
        samples.append(sample)
        if sample.status != "ok":
            break
    return samples
