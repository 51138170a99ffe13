"""One run of a serve case, on the host: the engine as published, the kit's client beside it.

The executor decides where the engine runs (its pinned image, or a process of this host) through
a `Placement`; everything else happens here, the same way for every placement: the model
directory the engine reads (config and tokenizer only where the engine makes random weights
itself; else a synthetic checkpoint, made once), prompts of exactly `input_tokens` tokens as the
served tokenizer counts them, readiness, untimed warm-up requests, the engine's own counters
before and after, the burst, then the sweep's points (kit.serve.sweep), then the rate search
(kit.serve.rate), the engine stopped gracefully. Into the run's folder go requests.jsonl (one row per request: the raw samples every
aggregate is computed from; a point of the sweep's in sweep/c<N>/, of the rate search's in
rates/p<k>/), engine.log (everything the
engine printed), engine.json (how it was started) and rank-0.json (the driver's sample).
Requests that fail are data: their rows are kept and counted, the figures are those of the
requests that finished. An engine that dies, or never becomes ready, or a burst or sweep in
which no request finished, make the run an `error` that keeps every row.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path

from kit.files.atomic import atomic_write_text
from kit.files.regular import sha256_file
from kit.plan.protocol import Case, ServeParams
from kit.rundir.directory import atomic_write_model
from kit.rundir.schema import RankSample, SoakWindow, utc_now
from kit.rundir.serving import (
    EngineRecord,
    ModelRecord,
    PromptsRecord,
    RunFiles,
    ServeDetails,
    ServerCounters,
    StartupDetails,
    StartupTime,
    TokenCheck,
    WarmupRecord,
    aggregate,
)
from kit.serve.bounds import burst_bound_details, device_names
from kit.serve.burst import burst_prompts, token_count
from kit.serve.client import fire_burst
from kit.serve.correctness import check_output
from kit.serve.cpu_split import cpu_split, running_on
from kit.serve.engines import Engine, engine_for, loads_checkpoint
from kit.serve.placement import EngineHandle, Placement, wait_ready
from kit.serve.prefix import describe as describe_prefix
from kit.serve.prefix import plan_conversations, run_conversations, without_caching
from kit.serve.process import EngineFailed, http_get, log_tail
from kit.serve.prometheus import read_page
from kit.serve.rate import run_rate_search
from kit.serve.startup import measure_startups
from kit.serve.sweep import planned_points, run_sweep
from kit.workloads.harness import Unavailable

STOP_MARGIN_S = 45  # left of the case's timeout for stopping the engine and writing the rows
WARMUP_SEED_OFFSET = 1  # warm-up prompts are drawn apart from the burst's


def model_directory(case: Case, engine: Engine, placement: Placement, say) -> tuple[Path, ModelRecord]:
    """The folder the engine serves and how the result identifies it."""
    params = case.params_as(ServeParams)
    if params.model_path:
        path = Path(params.model_path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"model_path {path} has no config.json")
        files = {p.relative_to(path).as_posix(): sha256_file(p) for p in sorted(path.rglob("*")) if p.is_file()}
        digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()
        return path, ModelRecord(kind="user-given", path=str(path), sha256=digest, files=files)
    from kit.cache import entry_digest, read_marker

    if not loads_checkpoint(case, engine):
        from kit.plan.model_files import weightless_model

        path = weightless_model(*case.named_model, params.seed, say=say)
        kind = "config and tokenizer; the engine makes random weights"
    else:
        path = placement.checkpoint(case, say)
        kind = "synthetic checkpoint"
    marker = read_marker(path)
    files = {rel: facts["sha256"] for rel, facts in marker["files"].items()}
    return path, ModelRecord(kind=kind, path=str(path), sha256=entry_digest(marker), files=files)


def engine_version(engine: Engine, base_url: str) -> str | None:
    if engine.version_path is None:
        return None
    try:
        status, body = http_get(base_url + engine.version_path)
        return str(json.loads(body)["version"]) if status == 200 else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_counters(engine: Engine, base_url: str) -> dict[str, float | None] | str:
    """The engine's generated-token and finished-request counters, or why they cannot be read."""
    samples = read_page(base_url)
    if isinstance(samples, str):
        return samples
    return {
        "generated_tokens": engine.generated_tokens.total(samples),
        "finished_requests": engine.finished_requests.total(samples),
    }


def counters_during(engine: Engine, before: dict | str, after: dict | str) -> ServerCounters:
    names = f"{engine.generated_tokens.metric_names()[0]}, {engine.finished_requests.metric_names()[0]}"
    if isinstance(before, str) or isinstance(after, str):
        return ServerCounters(source=names, unavailable=before if isinstance(before, str) else after)
    delta = {key: (after[key] - before[key]) if None not in (after[key], before[key]) else None for key in before}
    missing = [key for key, value in delta.items() if value is None]
    return ServerCounters(
        **delta, source=names, unavailable=f"/metrics has no {', '.join(missing)} counter" if missing else None
    )


def announce_first(say):
    """Say one line when the first request of the burst has finished (progress for a person
    watching log.txt; one line, so the client's timing is not disturbed)."""
    said = []

    def on_end(record) -> None:
        if record.ok and not said:
            said.append(record.index)
            say(f"serve: first request finished ({record.latency:.2f} s)")

    return on_end


class BurstTelemetry:
    """NVML over the burst, of the GPUs the engine runs on (kit.measure.telemetry); a CPU case says why
    there is none."""

    def __init__(self, case: Case):
        from kit.measure.telemetry import GpusSampler, NoDevice, unavailable

        self.sampler = GpusSampler(case.gpus) if case.device == "cuda" else NoDevice()
        self.result = unavailable("no burst was fired") if case.device == "cuda" else NoDevice().stop()
        self._running = False

    def start(self) -> None:
        self.sampler.start()
        self._running = True

    def stop(self) -> None:
        if self._running:
            self.result, self._running = self.sampler.stop(), False


def token_counts(engine: Engine, before: dict | str, after: dict | str, records) -> TokenCheck:
    """The generated tokens the client counted in `records`, beside the engine's own counters
    over the same interval: equal, or the rows do not hold what the engine did."""
    counters = counters_during(engine, before, after)
    client_tokens = sum(r.streamed_tokens for r in records)
    return TokenCheck(
        client_counted=client_tokens,
        token_events=sum(r.token_events for r in records),
        engine_reported_per_request=sum(r.output_tokens for r in records if r.output_tokens_source == "server"),
        server_counters=counters,
        equal=counters.generated_tokens is not None and client_tokens == counters.generated_tokens,
    )


def miscounted(records) -> list[int]:
    """The requests whose prompt the engine counted differently than its tokenizer does here."""
    return [r.index for r in records if r.server_prompt_tokens not in (None, r.input_tokens)]


def none_finished(what: str, records) -> str | None:
    """Errors are data, unless no request finished at all: then there is nothing to measure."""
    if not records or any(r.ok for r in records):
        return None
    return f"none of the {len(records)} requests of the {what} finished (first: {records[0].error})"


def soak_bursts(
    case: Case,
    engine: Engine,
    handle: EngineHandle,
    tokenizer,
    out_dir: Path,
    first: SoakWindow,
    soak_started: float,
    deadline: float,
) -> tuple[list[SoakWindow], str | None]:
    """After the first burst (`first`), bursts one after another until the soak's seconds have
    passed since it began, each of fresh prompts (an engine that caches prefixes would serve
    repeated ones faster) with its rows in requests-window-<k>.jsonl and NVML over it; the
    windows, and why they stopped early (or None)."""
    params = case.params_as(ServeParams)
    assert params.soak is not None, "soak bursts are a soak case's"
    windows = [first]
    while time.monotonic() - soak_started < params.soak.seconds:
        index = len(windows) + 1
        prompts = burst_prompts(
            tokenizer, params.prompts, params.input_tokens, params.seed + WARMUP_SEED_OFFSET + index
        )
        counts = [token_count(tokenizer, prompt) for prompt in prompts]
        telemetry = BurstTelemetry(case)
        begun = time.monotonic() - soak_started
        telemetry.start()
        try:
            burst = fire_burst(handle.base_url, engine, params, prompts, counts, max(deadline - time.monotonic(), 1.0))
        finally:
            telemetry.stop()
        totals, _saturated = burst.kept(out_dir / f"requests-window-{index}.jsonl", all_at_once=True)
        windows.append(
            SoakWindow(started_s=begun, seconds=burst.duration, tokens=totals.output_tokens, telemetry=telemetry.result)
        )
        if handle.exit_code() is not None:
            return windows, f"the engine exited with code {handle.exit_code()} in soak window {index}"
        if totals.errors:
            return windows, f"{totals.errors} of {totals.requests} requests of soak window {index} failed"
    return windows, None


class ServeFailed(Exception):
    """A serve run that failed part-way: an `error` result keeping what was measured before."""

    def __init__(self, reason: str, details: ServeDetails, windows: list[SoakWindow]):
        super().__init__(reason)
        self.details, self.windows = details, windows


def measure(
    case: Case, placement: Placement, out_dir: Path, say, telemetry: BurstTelemetry
) -> tuple[ServeDetails, list[SoakWindow]]:
    """The burst against the engine the placement starts, then the sweep's points where the case
    has one; the details of the driver's sample and a soak's windows. Requests that fail are data
    (their rows and the figures of those that finished are kept); the run fails where the engine
    does, or where no request of the burst, or of the sweep, finished. Raises Unavailable, or
    ServeFailed with what was measured before the failure."""
    from kit.plan.model_files import load_tokenizer

    started = time.monotonic()
    params = case.params_as(ServeParams)
    engine = engine_for(params)
    model_dir, model = model_directory(case, engine, placement, say)

    tokenizer = load_tokenizer(model_dir)
    prompts = burst_prompts(tokenizer, params.prompts, params.input_tokens, params.seed)
    counts = [token_count(tokenizer, prompt) for prompt in prompts]
    warmup = burst_prompts(tokenizer, params.warmup_requests, params.input_tokens, params.seed + WARMUP_SEED_OFFSET)
    points = planned_points(tokenizer, params)
    conversations = plan_conversations(tokenizer, params)

    split = cpu_split(case)
    launched = time.monotonic()
    handle, record = placement.start(engine, case, model_dir, out_dir, say, cpus=split.engine if split else None)
    if split:
        say(f"serve: the engine on CPUs {list(split.engine)}, the client on {list(split.client)}")
    record.cpus = split
    details = ServeDetails(
        engine=record,
        model=model,
        prompts=PromptsRecord(count=len(prompts), input_tokens=params.input_tokens, counted_by="served tokenizer"),
        ignore_eos=params.ignore_eos if engine.ignore_eos_note is None else False,
        ignore_eos_note=engine.ignore_eos_note,
        files=RunFiles(requests="requests.jsonl", engine_log="engine.log", engine="engine.json"),
    )
    write_engine_record(out_dir, record)
    windows: list[SoakWindow] = []
    burst = sweep = rates = None
    failure = None
    before: dict | str = "not read"
    after: dict | str = "not read"
    swept: dict | str = "not read"
    rated: dict | str = "not read"
    before_rates: dict | str = "not read"
    deadline = started + params.timeout_s - STOP_MARGIN_S
    with running_on(split.client if split else None):  # the client apart from the engine's CPUs
        try:
            say(f"serve: waiting for {engine.label} to be ready (up to {params.ready_timeout_s} s)")
            record.ready_s = wait_ready(handle, engine.health_path, params.ready_timeout_s)
            first_start = StartupTime(cache="first", ready_s=time.monotonic() - launched, engine_log="engine.log")
            record.version = engine_version(engine, handle.base_url) or record.version
            say("serve: checking the engine's greedy output against transformers' on the same weights")
            details.correctness = check_output(case, engine, handle.base_url, model_dir, tokenizer)
            if details.correctness.status == "fail":
                say(f"serve: output wrong: {'; '.join(details.correctness.mismatches)}")
            if warmup:
                warm = fire_burst(handle.base_url, engine, params, warmup, [params.input_tokens] * len(warmup), 600)
                errors = [r.error for r in warm.records if not r.ok]
                details.warmup = WarmupRecord(requests=len(warmup), duration_s=warm.duration, errors=errors)
                opening = warm.records[0]
                if opening.ttft is not None:
                    first_start.first_token_s = first_start.ready_s + opening.sent_at + opening.ttft
                if errors:
                    raise EngineFailed(f"the warm-up request failed: {errors[0]}")
            before = read_counters(engine, handle.base_url)
            say(f"serve: burst of {len(prompts)} requests released")
            soak_started = time.monotonic()
            telemetry.start()
            try:
                burst = fire_burst(
                    handle.base_url,
                    engine,
                    params,
                    prompts,
                    counts,
                    max(deadline - time.monotonic(), 1.0),
                    announce_first(say),
                )
            finally:
                telemetry.stop()
            after = read_counters(engine, handle.base_url)
            if handle.exit_code() is not None:
                failure = f"the engine exited with code {handle.exit_code()} during the burst"
            elif burst.cut_short:
                failure = f"the case's time (timeout_s {params.timeout_s}) ran out during the burst"
            else:
                failure = none_finished("burst", burst.records)
            if failure is None and params.soak is not None:
                say(f"serve: soak, bursts one after another for {params.soak.seconds:.0f} s")
                first = SoakWindow(
                    started_s=0.0,
                    seconds=burst.duration,
                    telemetry=telemetry.result,
                    tokens=aggregate(burst.records, burst.duration).output_tokens,
                )
                windows, failure = soak_bursts(case, engine, handle, tokenizer, out_dir, first, soak_started, deadline)
            if failure is None and points:
                sweep = run_sweep(case, engine, handle, points, out_dir, deadline, say)
                swept = read_counters(engine, handle.base_url)
                failure = sweep.failure
            if failure is None and params.rates is not None:
                before_rates = swept if points else after
                rates = run_rate_search(case, engine, handle, tokenizer, out_dir, deadline, say)
                rated = read_counters(engine, handle.base_url)
                failure = rates.failure
            if failure is None and conversations is not None:
                assert params.prefix is not None, "conversations are planned from the case's prefix"
                details.prefix = describe_prefix(params.prefix)
                opened = read_counters(engine, handle.base_url)
                details.prefix.on, chatted = run_conversations(case, engine, handle, conversations, out_dir, "on", say)
                details.prefix.on.tokens = token_counts(engine, opened, read_counters(engine, handle.base_url), chatted)
                failure = none_finished("shared-prefix workload", chatted)
        except EngineFailed as exc:
            failure = str(exc)
        finally:
            record.stop = handle.stop()
            write_engine_record(out_dir, record)
        if failure is None and params.prefix and params.prefix.compare_off and details.prefix and conversations:
            details.prefix.off, details.prefix.off_unavailable = without_caching(
                case, engine, placement, model_dir, out_dir, conversations, say, split.engine if split else None
            )
        if failure is None and params.startup:
            details.startup = startups(
                case, engine, placement, model_dir, out_dir, prompts[0], counts[0], say, split, first_start, deadline
            )

    if burst is not None:
        totals, saturated = burst.kept(out_dir / "requests.jsonl", all_at_once=True)
        details.aggregates, details.client, details.saturation = totals, burst.load, saturated
        details.tokens = token_counts(engine, before, after, burst.records)
        details.bounds = burst_bound_details(case, totals)
        mismatched = miscounted(burst.records)
        if details.prompts is not None:
            details.prompts.server_count_mismatches = mismatched
        details.short_outputs = sum(1 for r in burst.records if r.ok and r.output_tokens < params.max_output_tokens)
        if totals.errors:
            first_error = next(r.error for r in burst.records if not r.ok)
            say(
                f"serve: {totals.errors} of {totals.requests} requests of the burst failed (first: {first_error}); "
                f"the figures are of the {totals.completed} that finished"
            )
        if failure is None and mismatched:
            failure = f"{len(mismatched)} prompts were counted differently by the engine than by its tokenizer"
        if failure is not None:
            failure += f"; {totals.completed} of {totals.requests} requests finished and are kept in requests.jsonl"
    if sweep is not None:
        details.sweep = sweep.details
        sweep.details.tokens = token_counts(engine, after, swept, sweep.records)
        sweep.details.server_count_mismatches = miscounted(sweep.records)
        failure = failure or none_finished("sweep", sweep.records)
        if failure is None and sweep.details.server_count_mismatches:
            failure = f"{len(sweep.details.server_count_mismatches)} prompts of the sweep were counted differently by the engine"
    if rates is not None:
        details.rates = rates.details
        rates.details.tokens = token_counts(engine, before_rates, rated, rates.records)
        rates.details.server_count_mismatches = miscounted(rates.records)
        failure = failure or none_finished("rate search", rates.records)
    if failure is not None:
        record.log_tail = tail = log_tail(out_dir / "engine.log")
        say(f"serve: {failure}\n--- engine.log (last lines) ---\n{tail}")
        raise ServeFailed(f"{failure}; engine log: engine.log", details, windows)
    return details, windows


def startups(
    case: Case,
    engine: Engine,
    placement: Placement,
    model_dir: Path,
    out_dir: Path,
    prompt: str,
    input_tokens: int,
    say,
    split,
    first: StartupTime,
    deadline: float,
) -> StartupDetails:
    """The run's own start (`first`: to its first warm-up token) beside a cold and a warm one
    (kit.serve.startup), where the case's time leaves room for two more starts as long as it."""
    needed = 2 * first.ready_s + STOP_MARGIN_S
    if deadline - time.monotonic() < needed:
        return StartupDetails(
            starts=[first],
            unavailable=f"cold and warm starts: the case's time left less than the {needed:.0f} s they need",
        )
    found = measure_startups(
        case, engine, placement, model_dir, out_dir, prompt, input_tokens, say, split.engine if split else None
    )
    found.starts.insert(0, first)
    return found


def write_engine_record(out_dir: Path, record: EngineRecord) -> None:
    """engine.json: how the engine was started (and, once it stopped, how it ended)."""
    atomic_write_text(out_dir / "engine.json", record.model_dump_json(indent=2, exclude_none=True) + "\n")


def run_driver(case: Case, case_dir: Path, index: int, log, placement: Placement) -> tuple[RankSample, float]:
    """One independent run of a serve case: the driver's sample (whatever happened, never raised)
    and the run's wall time, for the executor to judge like any other run (kit.execute.samples)."""
    out_dir = case_dir / "runs" / str(index)
    out_dir.mkdir(parents=True, exist_ok=True)

    def say(line: str) -> None:
        log.write(line.rstrip("\n") + "\n")
        log.flush()

    say(f"\n=== run {index}: serve {case.params_as(ServeParams).engine} ({placement.name})")
    started, begun = time.monotonic(), utc_now()
    base = {
        "rank": 0,
        "world_size": 1,
        "device": case.device,
        "started_at": begun,
        "device_name": ", ".join(device_names(case)) or platform.machine(),
    }
    telemetry = BurstTelemetry(case)
    try:
        details, windows = measure(case, placement, out_dir, say, telemetry)
        sample = RankSample(**base, status="ok", windows=windows, details=details, finished_at=utc_now())
    except Unavailable as exc:
        sample = RankSample(**base, status="unavailable", reason=str(exc), finished_at=utc_now())
    except ServeFailed as exc:
        sample = RankSample(
            **base,
            status="error",
            reason=str(exc)[:2000],
            windows=exc.windows,
            details=exc.details,
            finished_at=utc_now(),
        )
    except Exception as exc:  # noqa: BLE001 - a broken model folder, a refused container, a record the kit got wrong: a result
        sample = RankSample(**base, status="error", reason=f"{type(exc).__name__}: {exc}"[:2000], finished_at=utc_now())
    sample.telemetry = telemetry.result
    atomic_write_model(out_dir / "rank-0.json", sample)
    wall_s = time.monotonic() - started
    say(f"=== run {index}: {sample.status} after {wall_s:.1f} s" + (f" ({sample.reason})" if sample.reason else ""))
    return sample, wall_s


def clean_environment(*layers: dict[str, str]) -> dict[str, str]:
    """An engine process's environment, built from scratch: no launcher variables (RANK,
    MASTER_ADDR, TORCHELASTIC_*...) can reach it; the host's PATH, HOME and locale only."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR") if key in os.environ}
    for layer in layers:
        env.update(layer)
    return env
