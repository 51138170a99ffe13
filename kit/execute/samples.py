"""What a finished run left behind (rank samples, exit code, timeout) -> one RunSample.

Shared by every executor, so a run is judged the same way wherever it ran.
"""

from __future__ import annotations

from kit.results import RankSample, RunSample

# When ranks disagree, the most telling status wins: an OOM on one rank explains the errors
# (torn-down collectives) on the others.
SEVERITY = ("oom", "error", "unavailable", "ok")


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
