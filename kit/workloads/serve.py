"""The serve workload: one engine, one burst, on rank 0 of a serve case.

Launch the case's engine on a free loopback port, wait until it is healthy, send the warm-up
requests (untimed), fire the burst, stop the engine gracefully. Into the run's folder go
requests.jsonl (one row per request: the raw samples every aggregate is computed from),
engine.log (everything the engine printed) and engine.json (its command line, port and pid).
An engine that dies, or never becomes ready, or requests that fail, make the run an `error`
that keeps the rows of the requests that did finish.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from kit.protocol import Case, ServeParams
from kit.results import atomic_write_text, sha256_file
from kit.serve.aggregate import aggregate, saturation
from kit.serve.burst import burst_prompts, served_tokenizer, token_count
from kit.serve.client import fire_burst
from kit.serve.engines import Engine, engine_for
from kit.serve.process import EngineFailed, EngineProcess, free_port, http_get, log_tail
from kit.workloads.harness import MeasureFailed, Unavailable

STOP_MARGIN_S = 45  # left of the case's timeout for stopping the engine and writing the rows
WARMUP_SEED_OFFSET = 1  # warm-up prompts are drawn apart from the burst's


def model_directory(case: Case) -> tuple[str, dict]:
    """The weights the engine serves and how they are identified in the result."""
    params: ServeParams = case.params
    if params.model_path:
        path = Path(params.model_path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model_path {path} has no config.json")
        files = {p.relative_to(path).as_posix(): sha256_file(p) for p in sorted(path.rglob("*")) if p.is_file()}
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
        return str(path), {"kind": "user-given", "path": str(path), "sha256": digest, "files": files}
    from kit.workloads.synthetic import checkpoint_digest, checkpoint_files, synthetic_checkpoint

    path = synthetic_checkpoint(case.model, case.shape, params.seed)
    files = checkpoint_files(path)
    return str(path), {"kind": "synthetic", "path": str(path), "sha256": checkpoint_digest(path), "files": files}


def check_available(case: Case, engine: Engine) -> None:
    if case.device == "cpu" and engine.name != "transformers-cpu":
        raise Unavailable(f"{engine.label} serves on CUDA GPUs; this case runs on CPU")
    reason = engine.missing()
    if reason:
        raise Unavailable(reason)


def engine_version(engine: Engine, base_url: str) -> str | None:
    if engine.version_path:
        try:
            status, body = http_get(base_url + engine.version_path)
            if status == 200:
                found = engine.version_from(json.loads(body))
                if found:
                    return found
        except (OSError, ValueError):
            pass
    return engine.installed_version()


def announce_first():
    """Print one line when the first request of the burst has finished (progress for a person
    watching log.txt; one print, so the client's timing is not disturbed)."""
    said = []

    def on_end(record) -> None:
        if record.ok and not said:
            said.append(record.index)
            print(f"serve: first request finished ({record.latency:.2f} s)", flush=True)

    return on_end


def write_rows(path: Path, records) -> None:
    atomic_write_text(path, "".join(record.model_dump_json() + "\n" for record in records))


def measure(case: Case, device, out_dir: Path) -> dict:
    if int(os.environ.get("RANK", "0")) != 0:
        return {"role": "idle: rank 0 drives the engine, which shards itself over the case's GPUs"}
    started = time.monotonic()
    params: ServeParams = case.params
    engine = engine_for(params)
    check_available(case, engine)
    model_dir, model = model_directory(case)

    tokenizer = served_tokenizer(model_dir)
    prompts = burst_prompts(tokenizer, params.prompts, params.input_tokens, params.seed)
    counts = [token_count(tokenizer, prompt) for prompt in prompts]
    warmup = burst_prompts(tokenizer, params.warmup_requests, params.input_tokens, params.seed + WARMUP_SEED_OFFSET)

    port = free_port()
    argv = engine.command(case, model_dir, port)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **params.env}
    details: dict = {
        "engine": {"name": engine.name, "label": engine.label, "argv": argv, "port": port},
        "model": model,
        "prompts": {"count": len(prompts), "input_tokens": params.input_tokens, "counted_by": "served tokenizer"},
        "ignore_eos": params.ignore_eos if engine.ignore_eos_note is None else False,
        "ignore_eos_note": engine.ignore_eos_note,
        "files": {"requests": "requests.jsonl", "engine_log": "engine.log"},
    }
    server = EngineProcess(argv, out_dir / "engine.log", port, env)
    details["engine"]["pid"] = server.pid
    atomic_write_text(out_dir / "engine.json", json.dumps(details["engine"], indent=2) + "\n")
    burst = None
    failure = None
    try:
        details["engine"]["ready_s"] = server.wait_ready(engine.health_path, params.ready_timeout_s)
        details["engine"]["version"] = engine_version(engine, server.base_url)
        if warmup:
            warm = fire_burst(server.base_url, engine, params, warmup, [params.input_tokens] * len(warmup), 600)
            errors = [r.error for r in warm.records if not r.ok]
            details["warmup"] = {"requests": len(warmup), "duration_s": warm.duration, "errors": errors}
            if errors:
                raise EngineFailed(f"the warm-up request failed: {errors[0]}")
        budget = params.timeout_s - (time.monotonic() - started) - STOP_MARGIN_S
        print(f"serve: burst of {len(prompts)} requests released", flush=True)
        burst = fire_burst(server.base_url, engine, params, prompts, counts, max(budget, 1.0), announce_first())
        if server.exit_code() is not None:
            failure = f"the engine exited with code {server.exit_code()} during the burst"
    except EngineFailed as exc:
        failure = str(exc)
    finally:
        details["engine"]["stop"] = server.stop()

    if burst is not None:
        write_rows(out_dir / "requests.jsonl", burst.records)
        totals = aggregate(burst.records, burst.duration)
        median_itl = totals.itl_s.median if totals.itl_s else None
        details["aggregates"] = totals.model_dump()
        details["client"] = {**burst.load.model_dump(), "cpu_share": burst.load.cpu_share,
                             "cpu_us_per_event": burst.load.cpu_us_per_event}  # fmt: skip
        details["saturation"] = saturation(burst.load, median_itl, burst.duration).model_dump()
        mismatched = [r.index for r in burst.records if r.server_prompt_tokens not in (None, r.input_tokens)]
        details["prompts"]["server_count_mismatches"] = mismatched
        details["short_outputs"] = sum(1 for r in burst.records if r.ok and r.output_tokens < params.max_output_tokens)
        if failure is None and totals.errors:
            first = next(r.error for r in burst.records if not r.ok)
            failure = f"{totals.errors} of {totals.requests} requests failed (first: {first})"
        if failure is None and mismatched:
            failure = f"{len(mismatched)} prompts were counted differently by the engine than by its tokenizer"
        if failure is not None:
            failure += f"; {totals.completed} of {totals.requests} requests finished and are kept in requests.jsonl"
    if failure is not None:
        tail = log_tail(out_dir / "engine.log")
        details["engine"]["log_tail"] = tail
        print(f"serve: {failure}\n--- engine.log (last lines) ---\n{tail}", flush=True)
        raise MeasureFailed(f"{failure}; engine log: engine.log", details)
    return details
