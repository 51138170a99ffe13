"""What Slurm says about a job, read: `scontrol show job -o`, `sacct`, and a job's end as a run's status.

Pure functions of Slurm's text, so that they are tested on output recorded from a real Slurm
(tests/fixtures/slurm/); the executor (kit.execute.slurm) runs the commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kit.rundir.schema import SlurmJob

# A job in one of these states may still run; any other state is its end.
ACTIVE_STATES = (
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "SUSPENDED",
    "REQUEUED",
    "RESIZING",
    "STAGE_OUT",
    "SIGNALING",
    "RESV_DEL_HOLD",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
)
# How a job that Slurm ended (rather than its ranks) ends the run: the case's status, and what
# Slurm's state means in words. COMPLETED and FAILED are left to the ranks' own samples.
ENDED_BY_SLURM = {
    "TIMEOUT": ("timeout", "the job exceeded its time limit ({limit}) and Slurm stopped it"),
    "DEADLINE": ("timeout", "the job reached its deadline and Slurm stopped it"),
    "OUT_OF_MEMORY": ("oom", "a step of the job ran out of memory (Slurm OUT_OF_MEMORY)"),
    "NODE_FAIL": ("error", "a node of the job ({nodes}) failed (Slurm NODE_FAIL)"),
    "BOOT_FAIL": ("error", "a node of the job ({nodes}) failed to boot (Slurm BOOT_FAIL)"),
    "CANCELLED": ("error", "the job was cancelled (Slurm CANCELLED{by})"),
    "PREEMPTED": ("error", "the job was preempted (Slurm PREEMPTED)"),
}
_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_/:]*)=")
# srun's line for a task that ended badly: `srun: error: n2: task 1: Exited with exit code 3`.
_TASK_ENDED = re.compile(r"^srun: error: (?P<node>\S+): tasks? (?P<tasks>[\d,-]+): (?P<how>.+)$", re.MULTILINE)


class JobState(SlurmJob):
    """A job as Slurm reports it: its state, why, exit status, limit and nodes."""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def cancelled_by(self) -> str:
        """`CANCELLED by 0` in sacct; scontrol says only CANCELLED."""
        return self.state.partition(" by ")[2]


def parse_fields(line: str) -> dict[str, str]:
    """`Key=value Key=value ...` (one line of `scontrol show ... -o`) as a dict; a value may hold
    `=` (TRES=cpu=2,node=2) and ends where the next ` Key=` begins."""
    starts = list(_KEY.finditer(line.strip()))
    text = line.strip()
    fields = {}
    for match, following in zip(starts, [*starts[1:], None]):
        end = following.start() if following is not None else len(text)
        fields[match.group(1)] = text[match.end() : end].strip()
    return fields


def _exit_status(text: str) -> tuple[int | None, int | None]:
    code, _, sig = text.partition(":")
    return (int(code), int(sig)) if code.isdigit() and sig.isdigit() else (None, None)


def parse_scontrol_job(output: str) -> JobState | None:
    """The job in `scontrol show job -o JOBID`'s output; None when Slurm no longer knows it
    (`Invalid job id specified`, after MinJobAge)."""
    line = next((line for line in output.splitlines() if line.startswith("JobId=")), None)
    if line is None:
        return None
    fields = parse_fields(line)
    code, sig = _exit_status(fields.get("ExitCode", ""))
    return JobState(
        job_id=fields["JobId"],
        state=fields.get("JobState", "UNKNOWN"),
        reason=fields.get("Reason", ""),
        exit_code=code,
        signal=sig,
        time_limit=fields.get("TimeLimit", ""),
        nodes=fields.get("NodeList", ""),
    )


SACCT_FORMAT = "JobID,State,ExitCode,Timelimit,NodeList"


def parse_sacct(output: str, job_id: str) -> JobState | None:
    """The job's own line (not its steps') in `sacct -n -P -o SACCT_FORMAT -j JOBID`; None if absent."""
    for line in output.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and parts[0] == job_id:
            code, sig = _exit_status(parts[2])
            return JobState(
                job_id=job_id, state=parts[1], exit_code=code, signal=sig, time_limit=parts[3], nodes=parts[4]
            )
    return None


def parse_submitted(output: str) -> str:
    """The job id `sbatch --parsable` printed (`JOBID` or `JOBID;CLUSTER`)."""
    job_id = output.strip().splitlines()[-1].split(";")[0] if output.strip() else ""
    if not job_id.isdigit():
        raise ValueError(f"sbatch --parsable printed no job id: {output.strip()[:200]!r}")
    return job_id


def ended_by_slurm(job: JobState) -> tuple[str, str] | None:
    """(status, reason) when Slurm itself ended the job (time limit, memory, node, cancel); None
    when its ranks did (COMPLETED, FAILED): their own samples then say how the run went."""
    state = job.state.split(" ")[0]
    if state not in ENDED_BY_SLURM:
        return None
    status, text = ENDED_BY_SLURM[state]
    by = f" by uid {job.cancelled_by}" if job.cancelled_by else ""
    reason = text.format(limit=job.time_limit or "unknown", nodes=job.nodes or "unknown", by=by)
    detail = f"; Slurm's reason: {job.reason}" if job.reason and job.reason != "None" else ""
    return status, f"Slurm job {job.job_id}: {reason}{detail}"


@dataclass(frozen=True)
class FailedTask:
    """The task (rank) srun names first as having ended badly on its own, not stopped by srun."""

    node: str
    tasks: str
    how: str


def first_failed_task(job_output: str) -> FailedTask | None:
    """From the batch job's output: the first task srun says failed (an exit code, a signal),
    leaving out the tasks srun itself terminated because of it."""
    for match in _TASK_ENDED.finditer(job_output):
        if match.group("how").strip() != "Terminated":
            return FailedTask(node=match.group("node"), tasks=match.group("tasks"), how=match.group("how").strip())
    return None


OWNER_PREFIX = "kit-owner:"


def owner_comment(host: str, pid: int, start_ticks: str | None) -> str:
    """The job comment naming the kit process that submitted it (`sbatch --comment`)."""
    return f"{OWNER_PREFIX}{host}:{pid}:{start_ticks or 'unknown'}"


def owner_of(comment: str) -> tuple[str, str, str] | None:
    """(host, pid, start ticks) from a job comment the kit wrote; None for anyone else's job."""
    if not comment.startswith(OWNER_PREFIX):
        return None
    parts = comment[len(OWNER_PREFIX) :].rsplit(":", 2)
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None
