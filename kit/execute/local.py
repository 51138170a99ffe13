"""The local executor: runs a case's independent runs as processes of this Python.

Each run is its own process group (the launcher and its ranks), so a timeout or Ctrl-C kills the
whole group and nothing is left behind; if `kit` itself is killed, the kernel tells the launcher
(PR_SET_PDEATHSIG) and the launcher takes its ranks down. A CPU case's launcher and ranks are
forked by kit.workloads.forkserver, which has imported the frameworks once for the whole kit run.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from kit.cache import torch_extensions_dir
from kit.child_process import die_with_parent
from kit.comm.gpu_links import topology_facts
from kit.execute import memory_cap_bytes, nccl_tests, processes
from kit.execute.samples import launch_samples, run_sample, serve_run
from kit.plan.protocol import Case
from kit.rundir.directory import atomic_write_model
from kit.rundir.schema import RankSample, RunSample, utc_now
from kit.rundir.serving import EngineRecord
from kit.serve.checkpoints import make_checkpoint
from kit.serve.local_engines import local_command
from kit.serve.process import HOST, EngineProcess, free_port
from kit.serve.session import clean_environment
from kit.workloads.forkserver import ForkServer, ServedLaunch
from kit.workloads.harness import Unavailable

NAME = "local"
KILL_GRACE_S = 10


def launcher_command(case: Case, case_file: Path, out_dirs: list[Path], python: str = sys.executable) -> list[str]:
    """The kit's launcher (kit.workloads.launch), even for one process: the workload always
    finds the rank environment set the same way; one `--out` per run the launch does."""
    outs = [part for out_dir in out_dirs for part in ("--out", str(out_dir))]
    return [
        python,
        "-m",
        "kit.workloads.launch",
        "--nproc",
        str(processes(case)),
        "--",
        python,
        "-m",
        "kit.workloads",
        "--case",
        str(case_file),
        *outs,
    ]


def process_environment(case: Case) -> dict[str, str]:
    """The case's own variables over ours; on CPU the cores are shared fairly between ranks."""
    env = dict(os.environ)
    env.setdefault("TORCH_EXTENSIONS_DIR", str(torch_extensions_dir()))
    env["PYTHONUNBUFFERED"] = "1"
    if case.device == "cpu":
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes(case)))
    env.update(case.params.env)
    return env


def kill_group(process: subprocess.Popen | ServedLaunch) -> None:
    """SIGTERM the process group, then SIGKILL whatever is still there after a grace period."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


class LocalPlacement:
    """A serve case's engine as a process of this host; its checkpoint made by this Python."""

    name = NAME

    def checkpoint(self, case: Case, say) -> Path:
        if importlib.util.find_spec("torch") is None:
            raise Unavailable(
                "a synthetic checkpoint is made with torch, which this Python lacks: "
                "pip install -e '.[local]', or --executor docker"
            )

        def run(arguments: list[str]) -> tuple[int, str]:
            done = subprocess.run([sys.executable, "-m", *arguments], capture_output=True, text=True)
            say(done.stdout + done.stderr)
            return done.returncode, done.stderr or done.stdout

        return make_checkpoint(case, run, say)

    def start(self, engine, case: Case, model_dir: Path, out_dir: Path, say, cpus: Sequence[int] | None = None):
        command, version, bin_dir = local_command(engine, case, say)
        port = free_port()
        argv = [*command, *engine.arguments(case, str(model_dir), HOST, port)]
        devices = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(case.gpus)))} if case.device == "cuda" else {}
        env = clean_environment(devices, engine.environment(case, cpus), case.params.env)
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        handle = EngineProcess(argv, out_dir / "engine.log", port, env, cpus)
        return handle, EngineRecord(
            name=engine.name,
            label=engine.label,
            placement=self.name,
            argv=argv,
            port=port,
            pid=handle.pid,
            version=version,
            environment=sorted(env),
        )


class LocalExecutor:
    """Runs a case's independent runs as processes of this Python."""

    name = NAME
    uses_this_python = True
    on_cluster = False

    def run_once(self, case: Case, case_dir: Path, index: int, log: TextIO) -> RunSample:
        """One independent run: launch, wait up to the case's timeout, collect the rank samples."""
        if case.workload == "serve":
            return serve_run(case, case_dir, index, log, LocalPlacement())
        if nccl_tests.runs_binary(case):
            out_dir = case_dir / "runs" / str(index)
            out_dir.mkdir(parents=True, exist_ok=True)
            return run_binary(case, out_dir, index, log)
        return self.run_launch(case, case_dir, [index], log)[0]

    def run_launch(self, case: Case, case_dir: Path, indices: list[int], log: TextIO) -> list[RunSample]:
        """One launch of the case's processes doing the runs `indices` one after another (one run
        unless the case shares a launch between its runs); the runs it finished, in order."""
        out_dirs = [case_dir / "runs" / str(index) for index in indices]
        for out_dir in out_dirs:
            out_dir.mkdir(parents=True, exist_ok=True)
        command = launcher_command(case, case_dir / "case.json", out_dirs)
        rank_command = command[command.index("--") + 1 :]
        forked = (
            case.device == "cpu"
        )  # imports are most of a CPU run: its ranks are forked from a process that did them
        what = f"run {indices[0]}" if len(indices) == 1 else f"runs {indices[0]}-{indices[-1]} (one launch)"
        how = (
            f"{processes(case)} ranks forked by kit.workloads.forkserver, each {' '.join(rank_command)}"
            if forked
            else " ".join(command)
        )
        log.write(f"\n=== {what}: {how}\n")
        log.flush()
        started = time.monotonic()
        process: subprocess.Popen | ServedLaunch
        if forked:
            process = fork_server().start(
                processes(case), rank_command, process_environment(case), Path(log.name), memory_cap_bytes(case)
            )
        else:
            process = _start(command, case, stdout=log, stderr=subprocess.STDOUT)
        timed_out = _wait(process, case, case.params.timeout_s * len(indices))
        wall_s = time.monotonic() - started
        log.write(f"=== {what}: exit code {process.returncode} after {wall_s:.1f} s\n")
        log.flush()
        return launch_samples(
            indices=indices,
            out_dirs=out_dirs,
            expected_ranks=processes(case),
            exit_code=process.returncode,
            wall_s=wall_s,
            timed_out=timed_out,
            timeout_s=case.params.timeout_s,
        )


_fork_server: ForkServer | None = None


def fork_server() -> ForkServer:
    """This kit process's fork server (kit.workloads.forkserver), started on first use."""
    global _fork_server
    if _fork_server is None or _fork_server.process.poll() is not None:
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(torch_extensions_dir()), "PYTHONUNBUFFERED": "1"}
        _fork_server = ForkServer(env, Path(tempfile.mkstemp(prefix="kit-forkserver-", suffix=".log")[1]))
        atexit.register(_fork_server.close)
    return _fork_server


def _start(command: list[str], case: Case, **streams) -> subprocess.Popen:
    cap = memory_cap_bytes(case)

    def before_exec() -> None:  # in the child: the launcher and its ranks inherit the limit
        die_with_parent()
        if cap is not None:  # soft only: a one-off build of an op lifts it (deepspeed_ops)
            resource.setrlimit(resource.RLIMIT_DATA, (cap, resource.RLIM_INFINITY))

    return subprocess.Popen(
        command, env=process_environment(case), start_new_session=True, preexec_fn=before_exec, **streams
    )


def _wait(process: subprocess.Popen | ServedLaunch, case: Case, timeout_s: float | None = None) -> bool:
    """Wait up to the case's timeout (or `timeout_s`); True if it had to be killed for it."""
    try:
        process.wait(timeout=timeout_s or case.params.timeout_s)
        return False
    except subprocess.TimeoutExpired:
        kill_group(process)
        return True
    except BaseException:  # Ctrl-C or kit being stopped: take the whole group down first
        kill_group(process)
        raise


def run_binary(case: Case, out_dir: Path, index: int, log) -> RunSample:
    """An nccl-tests case: its binary, found here, is the run's one process; its output is kept
    beside the run and read on this side into the run's sample."""
    binary, missing = nccl_tests.find_binary(case)
    started_at, started = utc_now(), time.monotonic()
    if binary is None:
        log.write(f"\n=== run {index}: {missing}\n")
        log.flush()
        rank = RankSample(
            rank=0,
            world_size=1,
            status="unavailable",
            reason=missing,
            device=case.device,
            device_name="unknown",
            started_at=started_at,
            finished_at=utc_now(),
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
    command = nccl_tests.command(case, str(binary))
    log.write(f"\n=== run {index}: {' '.join(command)}\n")
    log.flush()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = _start(command, case, stdout=stdout, stderr=stderr)
        timed_out = _wait(process, case)
        stdout.seek(0)
        stderr.seek(0)
        out, err = stdout.read(), stderr.read()
    wall_s = time.monotonic() - started
    raw_name = nccl_tests.keep_output(out_dir, command[0], out, err)
    log.write(
        out + err + f"=== run {index}: exit code {process.returncode} after {wall_s:.1f} s; output in {raw_name}\n"
    )
    log.flush()
    rank = nccl_tests.rank_sample(
        case,
        command,
        out,
        err,
        process.returncode,
        raw_name,
        started_at,
        utc_now(),
        topology_facts(case.gpus) if case.device == "cuda" else None,
    )
    atomic_write_model(out_dir / "rank-0.json", rank)
    return run_sample(
        index=index,
        ranks=[rank],
        expected_ranks=1,
        exit_code=process.returncode,
        wall_s=wall_s,
        timed_out=timed_out,
        timeout_s=case.params.timeout_s,
    )
