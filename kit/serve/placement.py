"""Where an executor puts a serve case's engine (a process of this host, a container), the
handle of a started engine, and the wait until it is ready: what every phase of a serve run
(kit.serve.session, kit.serve.startup) starts engines through."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from kit.plan.protocol import Case
from kit.rundir.serving import EngineRecord, EngineStop
from kit.serve.engines import Engine
from kit.serve.process import EngineFailed, http_get

POLL_S = 0.5


class EngineHandle(Protocol):
    """A started engine, wherever it runs."""

    base_url: str

    def exit_code(self) -> int | None: ...

    def stop(self) -> EngineStop: ...


class Placement(Protocol):
    """Where an executor puts a serve case's engine (and, where needed, makes its checkpoint)."""

    name: str

    def checkpoint(self, case: Case, say) -> Path: ...

    def start(
        self, engine: Engine, case: Case, model_dir: Path, out_dir: Path, say, cpus: Sequence[int] | None = None
    ) -> tuple[EngineHandle, EngineRecord]:
        """The engine, on `cpus` where given (kit.serve.cpu_split), and what the result records of its launch."""


def wait_ready(handle: EngineHandle, health_path: str, timeout_s: float) -> float:
    """Seconds until the health route answered 200; EngineFailed if the engine exits or the
    time runs out."""
    started = time.monotonic()
    while True:
        code = handle.exit_code()
        if code is not None:
            raise EngineFailed(f"the engine exited with code {code} before it was ready")
        try:
            status, _ = http_get(handle.base_url + health_path)
            if status == 200:
                return time.monotonic() - started
        except OSError:
            pass  # not listening yet
        if time.monotonic() - started > timeout_s:
            raise EngineFailed(f"the engine was not ready after {timeout_s} s")
        time.sleep(POLL_S)
