"""The Slurm executor: each launch of a case is one batch job, its ranks started by srun.

The kit writes the job's script beside the case (kit.execute.slurm_script), submits it with
`sbatch --parsable`, follows it with `scontrol show job -o` (and `sacct` once Slurm has let go of
it), and reads what the ranks wrote through the file system the run directory lives on, which
the compute nodes must share (`check_shared_run_dir`, before the first case). A job Slurm ended
(time limit, memory, node failure, cancel) gives its run that status with Slurm's words; a job
its ranks ended is judged from their samples as on one host. Ctrl-C, or the kit being stopped,
cancels the job (`scancel`) and waits until Slurm no longer lists it; the jobs of a kit killed
outright are cancelled by the next kit start.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from kit import images
from kit.execute import memory_cap_bytes, nccl_tests, processes
from kit.execute.node_fingerprint import fingerprint_step, fingerprinted, node_token
from kit.execute.owners import alive, mark_this_process, process_start_ticks
from kit.execute.samples import launch_samples, run_sample
from kit.execute.slurm_jobs import (
    SACCT_FORMAT,
    JobState,
    ended_by_slurm,
    first_failed_task,
    owner_comment,
    owner_of,
    parse_sacct,
    parse_scontrol_job,
    parse_submitted,
)
from kit.execute.slurm_script import (
    batch_script,
    check_script,
    layout,
    node_fingerprint_script,
    pyxis_arguments,
)
from kit.files.atomic import appending, atomic_write_text
from kit.host.hostlist import expand_hostlist
from kit.plan.protocol import Case
from kit.rundir.directory import CHECK_MARKS, atomic_write_model
from kit.rundir.directory import NODE_FINGERPRINTS as FINGERPRINTS
from kit.rundir.schema import RankSample, RunSample, SlurmJob, SlurmOptions, utc_now

NAME = "slurm"
# srun's MPI plugin for nccl-tests across nodes: the binaries built with MPI=1 (NVIDIA/nccl-tests
# README, "Build": MPI gives the number of processes), one task per GPU with `-g 1`, as in
# `srun --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --mpi=pmix all_reduce_perf_mpi ... -g 1`
# (nebius/soperator#428) and NVIDIA/NeMo-Framework-Launcher#49 (pmix for nccl-tests on Slurm).
NCCL_TESTS_MPI = "pmix"
POLL_S = 2.0
CANCEL_WAIT_S = 60
COMMAND_TIMEOUT_S = 60


class SlurmUnavailable(RuntimeError):
    """No Slurm answers here (no sbatch, or the controller does not respond)."""


class RunDirNotShared(RuntimeError):
    """The compute nodes do not see the run directory, so no result could come back."""


def slurm_command(arguments: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    """A Slurm command's output; one that does not answer in time reads as a failed command."""
    try:
        return subprocess.run(arguments, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except FileNotFoundError:
        raise SlurmUnavailable(
            f"{arguments[0]} is not installed here: the slurm executor runs where Slurm's commands do"
        ) from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            arguments, 124, "", f"{arguments[0]} did not answer in {COMMAND_TIMEOUT_S} s"
        )


def submit(script: Path, text: str) -> str:
    """`sbatch --parsable` of the script `text` (on its standard input: the copy kept at `script`
    may name its nodes by token): the job id. The job's comment names this kit process, and the
    kit's cache holds a mark of it first, so that a kit killed outright has its jobs cancelled by
    the next kit start (`cancel_leftovers`)."""
    mark_this_process()
    comment = owner_comment(platform.node(), os.getpid(), process_start_ticks(os.getpid()))
    done = slurm_command(["sbatch", "--parsable", f"--comment={comment}"], stdin=text)
    if done.returncode != 0:
        raise SlurmUnavailable(f"sbatch refused {script.name}: {(done.stderr or done.stdout).strip()[:500]}")
    return parse_submitted(done.stdout)


def job_state(job_id: str) -> JobState | None:
    """The job as scontrol knows it; once Slurm let go of it (MinJobAge), as the accounting
    database (sacct) or, without one, the job completion file (sacct -c) has it; None when the
    controller did not answer (a busy or restarting slurmctld: ask again later)."""
    shown = slurm_command(["scontrol", "show", "job", "-o", job_id])
    if shown.returncode != 0 and "Invalid job id" not in shown.stderr:
        return None
    job = parse_scontrol_job(shown.stdout)
    for source in ([], ["-c"]):
        if job is not None:
            return job
        job = parse_sacct(
            slurm_command(["sacct", *source, "-n", "-P", "-o", SACCT_FORMAT, "-j", job_id]).stdout, job_id
        )
    return job or JobState(job_id=job_id, state="UNKNOWN", reason="neither scontrol nor sacct knows the job any more")


def follow(job_id: str, say) -> tuple[JobState, float]:
    """Wait until the job ends, saying each change of state; the job and how long it ran."""
    seen, started = None, None
    while True:
        job = job_state(job_id)
        if job is None:
            time.sleep(POLL_S)
            continue
        if (job.state, job.reason) != seen:
            seen = (job.state, job.reason)
            say(f"Slurm job {job_id}: {job.state}" + (f" ({job.reason})" if job.reason not in ("", "None") else ""))
        if started is None and job.state != "PENDING":
            started = time.monotonic()
        if not job.active:
            return job, time.monotonic() - (started or time.monotonic())
        time.sleep(POLL_S)


def cancel_leftovers(say=None) -> list[str] | None:
    """Cancel the jobs of kit processes of this host that no longer run; the ids of those
    cancelled, or None where squeue could not be asked (they may still be there)."""
    if shutil.which("squeue") is None:
        return []
    done = subprocess.run(
        ["squeue", "-h", "--me", "-o", "%i|%k"], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    if done.returncode != 0:
        return None
    cancelled = []
    for line in done.stdout.splitlines():
        job_id, _, comment = line.partition("|")
        owner = owner_of(comment)
        if owner is None or alive(*owner):
            continue
        slurm_command(["scancel", job_id])
        cancelled.append(job_id)
        if say:
            say(f"cancelled Slurm job {job_id} left by kit pid {owner[1]}")
    return cancelled


def listed(job_id: str) -> bool:
    """Whether squeue still lists the job (pending, running or completing)."""
    done = slurm_command(["squeue", "-h", "-j", job_id, "-o", "%T"])
    return done.returncode == 0 and bool(done.stdout.strip())


def cancel(job_id: str, say) -> None:
    """scancel the job and wait (a while) until squeue no longer lists it."""
    slurm_command(["scancel", job_id])
    deadline = time.monotonic() + CANCEL_WAIT_S
    while listed(job_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    say(f"Slurm job {job_id}: cancelled" + ("" if not listed(job_id) else f", still listed after {CANCEL_WAIT_S} s"))


def kept_copy(script_text: str, run_dir: Path, redact: bool) -> str | None:
    """The copy of a job's script that a redacted run keeps: its nodes (a --nodelist) by token,
    its host and paths as kit.rundir.redact writes them; None (the script itself) for any other run."""
    if not redact:
        return None
    from kit.rundir.redact import Redactor

    return Redactor(run_dir, cluster_nodes()).text(script_text)


def run_job(script_text: str, script: Path, say, kept_text: str | None = None) -> tuple[JobState, float]:
    """Write (as `kept_text`, kept_copy, where the run must not hold what is submitted), submit and
    follow one job; cancelled if the kit is interrupted while it runs."""
    atomic_write_text(script, script_text if kept_text is None else kept_text)
    job_id = submit(script, script_text)
    say(f"submitted {script.name} as Slurm job {job_id}")
    try:
        return follow(job_id, say)
    except BaseException:  # Ctrl-C or kit being stopped: the job must not outlive the run
        cancel(job_id, say)
        raise


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def append_job_logs(log, job_id: str, folder: Path) -> str:
    """The job's own output (srun's messages) and each rank's (srun --output, one file per task)
    into the case log, in rank order; the job's output, returned."""
    job_output = read_text(folder / f"job-{job_id}.out")
    log.write(f"--- job-{job_id}.out\n{job_output}")
    for path in sorted(folder.glob(f"job-{job_id}-rank-*.log"), key=lambda p: int(p.stem.rsplit("-", 1)[1])):
        log.write(f"--- {path.name}\n{read_text(path)}")
    log.flush()
    return job_output


def judged(samples: list[RunSample], job: JobState, job_output: str = "") -> list[RunSample]:
    """The launch's samples, each naming its job; the last one (where the launch stopped) given
    Slurm's status and reason when Slurm ended the job (a time limit explains the ranks it
    stopped), or, when a rank failed, naming the rank srun saw fail first and its log (the others
    were stopped for it)."""
    samples = [sample.model_copy(update={"slurm_job": SlurmJob(**job.model_dump())}) for sample in samples]
    last = samples[-1]
    if last.status == "ok":
        return samples
    ended = ended_by_slurm(job)
    if ended is not None:
        status, reason = ended
    else:
        failed = first_failed_task(job_output)
        if failed is None or last.status != "error":
            return samples
        first = failed.tasks.split(",")[0].split("-")[0]
        log_name = f"slurm/job-{job.job_id}-rank-{first}.log"
        status, reason = (
            "error",
            f"rank {failed.tasks} on {failed.node}: {failed.how} (srun; its log: {log_name}); {last.reason}",
        )
    return [*samples[:-1], last.model_copy(update={"status": status, "reason": reason})]


def not_run(case: Case, index: int, status: str, reason: str) -> RunSample:
    """A run the executor could not start, with why."""
    now = utc_now()
    rank = RankSample(
        rank=0,
        world_size=processes(case),
        status=status,
        reason=reason,
        device=case.device,
        device_name="unknown",
        started_at=now,
        finished_at=now,
    )
    return run_sample(
        index=index,
        ranks=[rank],
        expected_ranks=1,
        exit_code=None,
        wall_s=0.0,
        timed_out=False,
        timeout_s=case.params.timeout_s,
    )


class SlurmExecutor:
    """The executor with its options (partition, nodes, container mode...), as run.json keeps them."""

    name = NAME
    on_cluster = True

    def __init__(self, options: SlurmOptions | None = None, redact: bool = False):
        self.options = options or SlurmOptions()
        self.redact = redact  # the scripts a redacted run keeps name no node (kept_copy)

    @property
    def uses_this_python(self) -> bool:
        """Without containers the ranks run this Python (on a file system the nodes share)."""
        return self.options.container_mode == "none"

    def run_once(self, case: Case, case_dir: Path, index: int, log) -> RunSample:
        if case.workload == "serve":
            return not_run(
                case,
                index,
                "unavailable",
                "serving cases run on one host (--executor docker or local), not as Slurm jobs",
            )
        return self.run_launch(case, case_dir, [index], log)[0]

    def container_arguments(self, case: Case, run_dir: Path) -> list[str]:
        if self.options.container_mode != "pyxis":
            return []
        found = images.image_for_case(case.image)
        if found is None:
            raise ValueError(f"the lock ({images.lock_path()}) has no image {case.image!r}")
        return pyxis_arguments(found[1].pinned_reference, run_dir, images.kit_source_dir())

    def script(self, case: Case, case_dir: Path, indices: list[int], job_files: Path) -> str:
        """The batch script of one launch doing the runs `indices` (paths absolute: the nodes read
        them). An nccl-tests case is one MPI rank per GPU (the binary, on the nodes' PATH or in the
        image, built with MPI=1), started by srun's MPI plugin."""
        case_dir = case_dir.resolve()
        python = sys.executable if self.options.container_mode == "none" else "python"
        if nccl_tests.runs_binary(case):
            command, ranks, mpi = (
                nccl_tests.command(case, nccl_tests.binary_name(case), gpus_per_process=1),
                case.gpus,
                NCCL_TESTS_MPI,
            )
        else:
            outs = [part for index in indices for part in ("--out", str(case_dir / "runs" / str(index)))]
            command, ranks, mpi = (
                [python, "-m", "kit.workloads", "--case", str(case_dir / "case.json"), *outs],
                processes(case),
                None,
            )
        return batch_script(
            case,
            command,
            python=python,
            options=self.options,
            ranks=ranks,
            timeout_s=case.params.timeout_s * len(indices),
            output=job_files / "job-%j.out",
            rank_logs=job_files / "job-%j-rank-%t.log",
            memory_cap_bytes=memory_cap_bytes(case),
            container=self.container_arguments(case, case_dir.parent.parent),
            mpi=mpi,
        )

    def read_binary_output(self, case: Case, job: JobState, job_files: Path, out_dir: Path, job_output: str) -> None:
        """An nccl-tests job's sample: rank 0 prints the sweep (nccl-tests prints from its first
        MPI rank only), kept beside the run and read as on one host."""
        printed = read_text(job_files / f"job-{job.job_id}-rank-0.log")
        argv = nccl_tests.command(case, nccl_tests.binary_name(case), gpus_per_process=1)
        raw_name = nccl_tests.keep_output(out_dir, argv[0], printed, job_output)
        rank = nccl_tests.rank_sample(
            case, argv, printed, job_output, job.exit_code, raw_name, utc_now(), utc_now(), None
        )
        atomic_write_model(out_dir / "rank-0.json", rank)

    def run_launch(self, case: Case, case_dir: Path, indices: list[int], log) -> list[RunSample]:
        out_dirs = [case_dir / "runs" / str(index) for index in indices]
        for out_dir in out_dirs:
            out_dir.mkdir(parents=True, exist_ok=True)
        job_files = (case_dir / "slurm").resolve()
        try:
            text = self.script(case, case_dir, indices, job_files)
        except ValueError as exc:  # ranks that do not fit the nodes asked for, an image without a digest
            return [not_run(case, indices[0], "error", str(exc))]
        what = f"run {indices[0]}" if len(indices) == 1 else f"runs {indices[0]}-{indices[-1]} (one launch)"
        log.write(f"\n=== {what}: one Slurm job\n")

        def say(line: str) -> None:
            log.write(f"=== {line}\n")
            log.flush()

        try:
            job, wall_s = run_job(
                text,
                job_files / f"launch-{indices[0]}.sbatch",
                say,
                kept_copy(text, case_dir.parent.parent, self.redact),
            )
        except SlurmUnavailable as exc:  # sbatch refused the job (a partition, an account): the case's answer
            say(str(exc))
            return [not_run(case, indices[0], "error", str(exc))]
        job_output = append_job_logs(log, job.job_id, job_files)
        if nccl_tests.runs_binary(case):
            self.read_binary_output(case, job, job_files, out_dirs[0], job_output)
        log.write(
            f"=== {what}: Slurm job {job.job_id} ended {job.state}, exit code {job.exit_code}:{job.signal} "
            f"after {wall_s:.1f} s\n"
        )
        log.flush()
        samples = launch_samples(
            indices=indices,
            out_dirs=out_dirs,
            expected_ranks=processes(case),
            exit_code=job.exit_code,
            wall_s=wall_s,
            timed_out=False,
            timeout_s=case.params.timeout_s,
        )
        return judged(samples, job, job_output)

    def fingerprint_nodes(self, run_dir: Path, samples: list[RunSample], redact: bool) -> dict[str, str]:
        """Every node the samples' jobs ran on, fingerprinted (those the check job at the start
        did not already): node -> file, as run.json keeps them. What Slurm said goes to
        slurm/node-fingerprints/log.txt; a refused job leaves those nodes without one, which
        the report names."""
        folder = run_dir / "slurm" / "node-fingerprints"
        folder.mkdir(parents=True, exist_ok=True)
        with appending(folder / "log.txt") as log:
            try:
                return fingerprint_missing_nodes(
                    run_dir, samples, self.options, lambda line: print(line, file=log, flush=True), redact
                )
            except SlurmUnavailable as exc:
                log.write(f"{exc}\n")
                return fingerprinted(run_dir)


def configured(options: SlurmOptions | None, redact: bool = False) -> SlurmExecutor:
    """The executor with the options run.json keeps. A redacted run's
    options name its nodes by token (--nodelist, an sbatch argument): each token of a node of this
    cluster is that node's name again, so that a resumed run's jobs are pinned as its first were."""
    text = (options or SlurmOptions()).model_dump_json()
    if "redacted-" in text:
        named = nodes_by_token()
        text = re.sub(r"redacted-[0-9a-f]+", lambda found: named.get(found.group(0), found.group(0)), text)
    return SlurmExecutor(SlurmOptions.model_validate_json(text), redact)


def nodes_needed(cases: list[Case], options: SlurmOptions) -> int:
    """The most nodes one of these cases' jobs asks for."""
    counts = []
    for case in cases:
        try:
            counts.append(layout(processes(case), case.device, options).nodes)
        except ValueError:
            continue
    return max(counts, default=1)


def check_shared_run_dir(run_dir: Path, nodes: int, options: SlurmOptions, say, redact: bool = False) -> list[str]:
    """A tiny job on `nodes` nodes, each writing a file into the run directory, then
    fingerprinting itself into it (kit.execute.node_fingerprint): the nodes that wrote their file
    (raising RunDirNotShared, with what to do, when one did not)."""
    marks = (run_dir / CHECK_MARKS).resolve()
    folder = marks.parent
    folder.mkdir(parents=True, exist_ok=True)
    step = fingerprint_step(sys.executable, (run_dir / FINGERPRINTS).resolve(), redact)
    script = check_script(marks, nodes, options, folder / "job-%j.out", step)
    job, _ = run_job(script, folder / "check.sbatch", say, kept_copy(script, run_dir, redact))
    seen = sorted(path.name for path in marks.iterdir()) if marks.is_dir() else []
    if len(seen) < nodes:
        raise RunDirNotShared(
            f"the compute nodes do not see the run directory {run_dir.resolve()}: of the {nodes} node(s) of check job "
            f"{job.job_id} (ended {job.state}), {len(seen)} wrote their file ({', '.join(seen) or 'none'}). Put the run "
            "directory (--out) on a file system every compute node mounts at the same path (a home or project share)"
        )
    return seen


def job_nodes(samples: Iterable[RunSample]) -> list[str]:
    """The nodes the samples' Slurm jobs ran on, one name each."""
    lists = {sample.slurm_job.nodes for sample in samples if sample.slurm_job and sample.slurm_job.nodes}
    return sorted({node for nodelist in lists for node in expand_hostlist(nodelist)})


def fingerprint_missing_nodes(
    run_dir: Path, samples: Iterable[RunSample], options: SlurmOptions, say, redact: bool = False
) -> dict[str, str]:
    """Fingerprint the nodes the run's jobs ran on that have none yet (one small job pinned to
    them); every node's fingerprint file, as run.json keeps them (kit.execute.node_fingerprint).
    A redacted run's files name nodes by token: the job is pinned to the nodes of the cluster
    with those tokens."""
    written = node_token if redact else str
    missing = [written(node) for node in job_nodes(samples) if written(node) not in fingerprinted(run_dir)]
    if missing:
        named = nodes_by_token() if redact else {}
        folder = (run_dir / "slurm" / "node-fingerprints").resolve()
        step = fingerprint_step(sys.executable, (run_dir / FINGERPRINTS).resolve(), redact)
        script = node_fingerprint_script(
            [named.get(node, node) for node in missing], options, folder / "job-%j.out", step
        )
        run_job(script, folder / f"{missing[0]}.sbatch", say, kept_copy(script, run_dir, redact))
    return fingerprinted(run_dir)


def cluster_nodes() -> list[str]:
    """Every node Slurm lists here, whatever its state; none where Slurm does not answer."""
    try:
        done = slurm_command(["sinfo", "-h", "-N", "-o", "%N"])
    except SlurmUnavailable:
        return []
    return sorted(set(done.stdout.split())) if done.returncode == 0 else []


def nodes_by_token() -> dict[str, str]:
    """Each node of this cluster under its redaction token: what a redacted run's files name."""
    return {node_token(node): node for node in cluster_nodes()}
