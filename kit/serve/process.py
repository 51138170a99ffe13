"""An engine server as a child process of this host (the local executor): start it, stop it
gracefully, and take its whole process group with it; it dies with the kit (PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from kit.child_process import die_with_parent
from kit.files.atomic import appending_bytes
from kit.rundir.serving import EngineStop

HOST = "127.0.0.1"  # engines of this host listen on loopback only: the client runs beside them

STOP_GRACE_S = 30
LOG_TAIL_LINES = 40


class EngineFailed(Exception):
    """The engine died, or did not become ready in time."""


def free_port() -> int:
    """A TCP port free on loopback now (the engine binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.is_file():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""


class EngineProcess:
    """One engine server, its own process group, its output in `log_path`."""

    def __init__(
        self,
        argv: list[str],
        log_path: Path,
        port: int,
        env: dict[str, str] | None = None,
        cpus: Sequence[int] | None = None,
    ):
        self.argv, self.log_path, self.port = argv, log_path, port
        self.base_url = f"http://{HOST}:{port}"
        self._log = appending_bytes(log_path)

        def before_exec() -> None:  # in the child: its processes inherit the CPUs
            die_with_parent()
            if cpus:
                os.sched_setaffinity(0, cpus)

        self.process = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=before_exec,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> int | None:
        return self.process.poll()

    def stop(self, grace_s: float = STOP_GRACE_S) -> EngineStop:
        """SIGTERM (servers drain and exit), SIGKILL after `grace_s`; what happened, as a record."""
        if self.process.poll() is not None:
            outcome = EngineStop(stopped_by="itself", exit_code=self.process.returncode)
        else:
            outcome = EngineStop(stopped_by="SIGTERM")
            for sig, label in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                outcome.stopped_by = label
                try:
                    self.process.wait(timeout=grace_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            outcome.exit_code = self.process.returncode
        try:  # children the engine left in its group (workers) go too
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._log.close()
        return outcome
