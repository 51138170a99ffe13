"""A process that imports the frameworks once and forks each CPU launch from itself.

On a CPU host the import of torch, transformers and DeepSpeed is most of a small run (seconds per
process, for runs of a few seconds: tests/benchmarks/smoke_duration.py prints the `start`
phase). The local executor starts this server once per kit process and asks it for every launch
of a CPU case: the server forks a launcher (a session of its own, the case's environment, the
case log as its output, the case's memory cap), which forks the ranks (kit.workloads.launch),
each then running its command line (`python -m kit.workloads ...`) as Python would. Every run still has processes
of its own, forked from one that has done nothing but import. What a library reads from the
environment when it is imported is the server's, so each rank applies the case's
OMP_NUM_THREADS to torch again.

One JSON object per line. kit writes {"id", "nproc", "argv", "env", "log", "rlimit_data"}; the
server answers {"id", "pid"} once it has forked that launcher, and {"pid", "exit"} when the
launcher has ended (its exit status as subprocess gives it: -N for signal N).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import resource
import runpy
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from kit.child_process import die_with_parent

# What every CPU training, profiling and comm rank imports; others (peft, Megatron) are imported
# by the ranks that need them, as before.
PRELOAD = (
    "torch",
    "torch.distributed",
    "transformers.models.llama.modeling_llama",
    "deepspeed",
    "kit.workloads.launch",
    "kit.workloads.harness",
)
POLL_S = 0.05
READY_TIMEOUT_S = 300  # the server's imports on a loaded 2-core host


class ForkedProcess:
    """A forked child as kit.workloads.launch handles a rank (poll, returncode, send_signal)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


def _exit_code(exc: SystemExit) -> int:
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def _run_then_exit(body) -> None:
    """In a forked child: run `body`, then leave without the parent's cleanup (os._exit)."""
    code = 1
    try:
        code = body()
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:  # noqa: BLE001 - a child never returns into its parent's loop
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _tie_to(parent: int) -> None:
    """Die with `parent`, also when it died before the tie was made (PR_SET_PDEATHSIG's race):
    an orphaned rank would wait in a collective for ever, holding the case log open."""
    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)


def fork_rank(command: list[str], env: dict[str, str]) -> ForkedProcess:
    """A rank of `python -m MODULE ARGS` or `python SCRIPT ARGS`, forked instead of executed, then
    run as that command line would run it."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return ForkedProcess(pid)

    def rank() -> int:
        _tie_to(parent)
        os.environ.clear()
        os.environ.update(env)
        torch = sys.modules.get("torch")  # preloaded, unless this Python lacks it (the harness says so)
        if torch is not None and env.get("OMP_NUM_THREADS", "").isdigit():
            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        threads = torch.get_num_threads() if torch is not None else "no"
        print(f"rank {env.get('RANK', '0')}: forked by the fork server, {threads} torch threads", flush=True)
        if command[1] == "-m":
            sys.argv = [command[2], *command[3:]]
            runpy.run_module(command[2], run_name="__main__", alter_sys=True)
        else:
            sys.argv = command[1:]
            runpy.run_path(command[1], run_name="__main__")
        return 0

    _run_then_exit(rank)
    raise AssertionError("unreachable")


def _launch(request: dict, parent: int) -> None:
    """In the forked launcher: become the case's process group, then start its ranks."""

    def launcher() -> int:
        from kit.workloads import launch

        _tie_to(parent)
        os.setsid()  # kit stops a launch by its process group, as one it executed itself
        os.environ.clear()
        os.environ.update(request["env"])
        if request.get("rlimit_data") is not None:
            resource.setrlimit(resource.RLIMIT_DATA, (request["rlimit_data"], resource.RLIM_INFINITY))
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        return launch.run(request["nproc"], request["argv"], start=fork_rank)

    _run_then_exit(launcher)


def serve() -> None:
    """Import, say so, then fork a launcher per request until kit closes our standard input."""
    die_with_parent()
    server = os.getpid()
    replies = os.dup(1)  # the frameworks print to standard output: theirs goes to our log
    os.dup2(2, 1)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # a rank without it fails as it would have anyway
            importlib.import_module(name)
    gc.freeze()  # what was imported stays out of the ranks' collections, and unwritten (no copy-on-write)

    def reply(message: dict) -> None:
        os.write(replies, (json.dumps(message) + "\n").encode())

    children: set[int] = set()
    pending = b""
    while True:
        if select.select([0], [], [], POLL_S)[0]:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return  # kit is done with us; launchers still running die with us
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    os.close(replies)
                    _launch(request, server)
                children.add(pid)
                reply({"id": request["id"], "pid": pid})
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                reply({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


class ServedLaunch:
    """A launcher the server forked, as the local executor handles a process (Popen's pid,
    wait, returncode); it is not kit's child, so its exit status comes from the server."""

    def __init__(self, server: ForkServer, pid: int, argv: list[str]):
        self.server, self.pid, self.argv = server, pid, argv
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        code = self.server.exit_of(self.pid, timeout)
        if code is None:
            assert timeout is not None, "exit_of waits for the exit where no timeout is given"
            raise subprocess.TimeoutExpired(self.argv, timeout)
        self.returncode = code
        return code


class ForkServer:
    """kit's side: the server process, started on first use and ended with kit."""

    def __init__(self, env: dict[str, str], log_path: Path):
        self.log = log_path.open("ab")
        # A session of its own: Ctrl-C at a terminal signals the whole foreground process group,
        # and the server must outlive it, for kit to stop the running launch and say how to resume.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kit.workloads.forkserver"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        assert self.process.stdin is not None and self.process.stdout is not None  # both pipes, above
        self.requests, self.replies = self.process.stdin, self.process.stdout
        self.lock = threading.Lock()
        self.exits: dict[int, int] = {}
        self.forked: dict[int, int] = {}
        self.next_id = 0
        self.pending = b""

    def start(
        self, nproc: int, argv: list[str], env: dict[str, str], log: Path, rlimit_data: int | None
    ) -> ServedLaunch:
        with self.lock:
            self.next_id += 1
            ident = self.next_id
            request = {
                "id": ident,
                "nproc": nproc,
                "argv": argv,
                "env": env,
                "log": str(log),
                "rlimit_data": rlimit_data,
            }
            self.requests.write((json.dumps(request) + "\n").encode())
            self.requests.flush()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while ident not in self.forked:
            if not self._read(deadline - time.monotonic()) and (
                time.monotonic() > deadline or self.process.poll() is not None
            ):
                raise self._failure(f"did not fork a launcher within {READY_TIMEOUT_S} s")
        return ServedLaunch(self, self.forked.pop(ident), argv)

    def exit_of(self, pid: int, timeout: float | None) -> int | None:
        """The launcher's exit status, or None when it has not ended within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.exits:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if not self._read(left) and self.process.poll() is not None:
                raise self._failure("ended")
        return self.exits.pop(pid)

    def _read(self, timeout: float | None) -> bool:
        """Take in the server's messages that arrive within `timeout`; False when none did."""
        with self.lock:
            out = self.replies.fileno()
            wait = POLL_S * 4 if timeout is None else max(0.0, min(timeout, POLL_S * 4))
            if not select.select([out], [], [], wait)[0]:
                return False
            chunk = os.read(out, 1 << 16)
            if not chunk:
                return False
            self.pending += chunk
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                message = json.loads(line)
                if "exit" in message:
                    self.exits[message["pid"]] = message["exit"]
                elif "id" in message:
                    self.forked[message["id"]] = message["pid"]
            return True

    def _failure(self, what: str) -> RuntimeError:
        self.log.flush()
        tail = Path(self.log.name).read_text(errors="replace").splitlines()[-20:]
        return RuntimeError(
            f"the fork server {what} (exit status {self.process.poll()}); its last output:\n" + "\n".join(tail)
        )

    def close(self) -> None:
        """End the server (kit's exit). A second Ctrl-C while it waits for the server kills the
        server instead of ending the clean-up in a traceback, and the log is removed either way
        (it was left in $TMPDIR)."""
        try:
            with contextlib.suppress(OSError):
                self.requests.close()
            try:
                self.process.wait(timeout=10)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                self.process.send_signal(signal.SIGKILL)
                self.process.wait()
        finally:
            self.log.close()
            Path(self.log.name).unlink(missing_ok=True)


if __name__ == "__main__":
    serve()
