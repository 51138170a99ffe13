"""An engine's start-up time: from its process (or container) started to the first token of a
first request, from a cold cache and from a warm one (ServeParams.startup).

On a fresh server a user waits this long before anything is served. As `vllm bench sweep
startup` does, a cold start is one whose cache folder (the engine's `cache_variable`:
vLLM's VLLM_CACHE_ROOT, where it keeps what torch.compile built) is new and empty, and a warm start
one that finds what the cold start left there. After the run's measurements the engine is started
twice more, cold then warm, each time asked for one request as soon as its health route answers
(each start's engine.log in startup/<cache>/), and stopped. The model files are the same folder
each time, so the host's page cache holds them for both: the cold start is the engine's own cold
cache, not a cold disk. A container starts from its image with an empty cache, so its warm start
would need the cache mounted: there the warm start is said to be unavailable.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kit.plan.protocol import Case, ServeParams
from kit.rundir.serving import StartupDetails, StartupTime
from kit.serve.client import fire_burst
from kit.serve.engines import Engine
from kit.serve.placement import EngineHandle, Placement, wait_ready
from kit.serve.process import EngineFailed

KEEPS_CACHE = ("local",)  # placements whose engine reads a folder of this host across starts


def timed_start(
    case: Case,
    engine: Engine,
    placement: Placement,
    model_dir: Path,
    out_dir: Path,
    prompt: str,
    input_tokens: int,
    cache: str,
    say,
    cpus: Sequence[int] | None,
) -> StartupTime:
    """One start, timed from the moment the placement is asked to start the engine."""
    params = case.params_as(ServeParams)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    handle: EngineHandle | None = None
    try:
        handle, _record = placement.start(engine, case, model_dir, out_dir, say, cpus=cpus)
        wait_ready(handle, engine.health_path, params.ready_timeout_s)
        ready_s = time.monotonic() - started
        [row] = fire_burst(handle.base_url, engine, params, [prompt], [input_tokens], params.ready_timeout_s).records
        first = ready_s + row.sent_at + row.ttft if row.ttft is not None else None  # sent_at: since the release
        return StartupTime(cache=cache, ready_s=ready_s, first_token_s=first, error=row.error)
    except EngineFailed as exc:
        return StartupTime(cache=cache, ready_s=time.monotonic() - started, error=str(exc))
    finally:
        if handle is not None:
            handle.stop()


def measure_startups(
    case: Case,
    engine: Engine,
    placement: Placement,
    model_dir: Path,
    out_dir: Path,
    prompt: str,
    input_tokens: int,
    say,
    cpus: Sequence[int] | None,
) -> StartupDetails:
    """The cold start, then the warm one, each in its own folder under `out_dir`/startup."""
    if engine.cache_variable is None:
        return StartupDetails(unavailable=f"{engine.label} documents no cache folder: no cold or warm start to set up")
    details = StartupDetails(cache_variable=engine.cache_variable)
    folder = Path(tempfile.mkdtemp(prefix="kit-engine-cache-"))
    params = case.params_as(ServeParams)
    cached = case.model_copy(
        update={"params": params.model_copy(update={"env": {**params.env, engine.cache_variable: str(folder)}})}
    )
    kinds = ["cold", "warm"] if placement.name in KEEPS_CACHE else ["cold"]
    if len(kinds) == 1:
        details.unavailable = (
            f"warm start: the {placement.name} placement starts each engine with its image's empty cache"
        )
    try:
        for kind in kinds:
            say(f"serve: start-up, {kind} cache ({engine.cache_variable}={folder})")
            where = out_dir / "startup" / kind
            start = timed_start(cached, engine, placement, model_dir, where, prompt, input_tokens, kind, say, cpus)
            start.engine_log = f"startup/{kind}/engine.log"
            details.starts.append(start)
            say(
                f"serve: {kind} start: ready after {start.ready_s:.1f} s, first token after "
                + (f"{start.first_token_s:.1f} s" if start.first_token_s is not None else f"none ({start.error})")
            )
            if start.error:
                break
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return details
