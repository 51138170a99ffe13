"""An engine server as a child process: start it, wait until it answers, stop it gracefully.

Every way this can go wrong ends in `EngineFailed` with the reason and the tail of the engine's
log, within a bounded time: an engine that exits, or never becomes healthy, never hangs a run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from kit.serve.engines import HOST

POLL_S = 0.5
STOP_GRACE_S = 30
LOG_TAIL_LINES = 40


class EngineFailed(Exception):
    """The engine died, or did not become ready in time."""


def free_port() -> int:
    """A TCP port free on loopback now (the engine binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


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

    def __init__(self, argv: list[str], log_path: Path, port: int, env: dict[str, str] | None = None):
        self.argv, self.log_path, self.port = argv, log_path, port
        self.base_url = f"http://{HOST}:{port}"
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> int | None:
        return self.process.poll()

    def wait_ready(self, health_path: str, timeout_s: float) -> float:
        """Seconds until the health endpoint answered 200; EngineFailed if it exits or times out."""
        started = time.monotonic()
        while True:
            code = self.process.poll()
            if code is not None:
                raise EngineFailed(f"the engine exited with code {code} before it was ready")
            try:
                status, _ = http_get(self.base_url + health_path)
                if status == 200:
                    return time.monotonic() - started
            except OSError:
                pass  # not listening yet
            if time.monotonic() - started > timeout_s:
                raise EngineFailed(f"the engine was not ready after {timeout_s} s")
            time.sleep(POLL_S)

    def stop(self, grace_s: float = STOP_GRACE_S) -> dict:
        """SIGTERM (servers drain and exit), SIGKILL after `grace_s`; what happened, as a record."""
        if self.process.poll() is not None:
            outcome = {"stopped_by": "itself", "exit_code": self.process.returncode}
        else:
            outcome = {"stopped_by": "SIGTERM"}
            for sig, label in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                outcome["stopped_by"] = label
                try:
                    self.process.wait(timeout=grace_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            outcome["exit_code"] = self.process.returncode
        try:  # children the engine left in its group (workers) go too
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._log.close()
        return outcome
