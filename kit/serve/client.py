"""The load generator: the burst as the paper sends it, every request released at t=0; a
point of the sweep, N requests in flight at a time; and a point of the rate search, each request
sent at its own arrival time (kit.serve.arrivals), however many are in flight then.

One asyncio event loop over aiohttp (the HTTP client vLLM's `benchmark_serving` and NVIDIA
AIPerf use too), one streaming request per prompt, no cap on open connections. At a concurrency
N, a request waits for one of N slots and is sent (its clock started) when it has one, as vLLM's
`vllm bench serve --max-concurrency N` does with a semaphore. Each event is time-stamped as the
client reads it; the client measures what it costs itself (CPU time, event loop lag, how long
the burst took to send) so that `aggregate.saturation` can tell when the client, not the server,
limited the measurement. Its CPU time is that of the thread running the event loop, so other
threads of the process (a container's log copier) are not counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kit.files.atomic import atomic_write_text
from kit.plan.protocol import ServeParams
from kit.rundir.serving import (
    BurstAggregates,
    ClientLoad,
    RequestRecord,
    Saturation,
    aggregate,
    percentile,
    saturation,
)
from kit.serve.engines import ONE_TOKEN, Engine, StreamEvent
from kit.serve.sse import EventFramer

LAG_TICK_S = 0.01


class Firing:
    """One firing of requests against one engine (the burst, or a point of the sweep): its
    records, the client's own load, its duration, and whether its deadline cut it short."""

    def __init__(self, records: list[RequestRecord], load: ClientLoad, duration: float, cut_short: bool):
        self.records, self.load, self.duration, self.cut_short = records, load, duration, cut_short

    def kept(self, rows_file: Path, all_at_once: bool) -> tuple[BurstAggregates, Saturation]:
        """Write the rows to `rows_file` (one line per request: the raw samples every figure is
        computed from) and give the figures computed from them: the aggregates, and whether the
        client's load (`load`) may have limited them."""
        atomic_write_text(rows_file, "".join(record.model_dump_json() + "\n" for record in self.records))
        totals = aggregate(self.records, self.duration)
        median_tpot = totals.tpot_s.median if totals.tpot_s else None
        return totals, saturation(self.load, median_tpot, self.duration, all_at_once)


async def _one_request(
    session, url: str, body: dict, engine: Engine, record: RequestRecord, t0: float, counters: dict
) -> None:
    """One streamed request; the hot loop keeps its figures in locals and writes the record once.

    Each event is time-stamped as it is read, as vLLM's `vllm bench serve` does. A stream must
    end with the event that says the engine finished the request; one that stops before it, or
    in the middle of an event, is that request's error, never a short count.
    """
    framer = EventFramer()
    parse, perf = engine.parse, time.perf_counter
    start = perf()
    record.sent_at = start - t0
    counters["last_sent"] = max(counters["last_sent"], record.sent_at)
    first = last = None
    gaps: list[float] = []
    token_events = events = streamed = 0
    server_tokens = prompt_tokens = error = None
    finished = False

    def take(event: StreamEvent, now: float) -> None:
        nonlocal first, last, token_events, streamed, server_tokens, prompt_tokens, error, finished
        if event.error and error is None:
            error = f"engine: {event.error}"[:300]
        if event.prompt_tokens is not None:
            prompt_tokens = event.prompt_tokens
        if event.output_tokens is not None:
            server_tokens = event.output_tokens
        streamed += event.tokens
        if event.token_events:
            token_events += event.token_events
            if last is None:
                first = now
            else:
                gaps.append(now - last)
            last = now
        finished = finished or event.finished

    try:
        async with session.post(url, json=body) as response:
            record.status = response.status
            if response.status != 200:
                error = f"http {response.status}: {(await response.text())[:300]}"
                return
            async for chunk in response.content.iter_any():
                for data in framer.feed(chunk):
                    now = perf()
                    events += 1
                    event = parse(data)
                    if event is ONE_TOKEN:  # the common event, handled inline
                        token_events += 1
                        streamed += 1
                        if last is None:
                            first = now
                        else:
                            gaps.append(now - last)
                        last = now
                    else:
                        take(event, now)
            for data in framer.close():
                events += 1
                try:
                    take(parse(data), perf())
                except ValueError:
                    error = f"the stream ended in the middle of an event: {data[:120]!r}"
        if error is None and not finished:
            error = f"the stream ended before the engine finished the request ({streamed} tokens)"
        if error is None:
            record.latency = perf() - start
    except asyncio.CancelledError:
        error = "timeout: the deadline passed before this request ended"
        raise
    except Exception as exc:  # a dead engine shows as a reset or truncated stream
        error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        record.ended_at = perf() - t0
        record.error, record.server_prompt_tokens = error, prompt_tokens
        record.ttft = first - start if first is not None else None
        record.itl, record.token_events, record.streamed_tokens = gaps, token_events, streamed
        counters["events"] += events
        if server_tokens is not None:
            record.output_tokens, record.output_tokens_source = server_tokens, "server"
        else:
            record.output_tokens, record.output_tokens_source = streamed, "client"
        if counters.get("on_end"):
            counters["on_end"](record)


async def _loop_lag(samples: list[float], stop: asyncio.Event) -> None:
    """How late a LAG_TICK_S timer fires: the time events wait before the client sees them."""
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(LAG_TICK_S)
        samples.append(max(0.0, time.perf_counter() - before - LAG_TICK_S))


async def _in_slot(slots: asyncio.Semaphore, stop_at: float | None, record: RequestRecord, *request) -> None:
    """One request of a point of the sweep: sent once one of its concurrency's slots is free,
    unless the point stopped sending (`stop_at`, on perf_counter's clock) by then."""
    try:
        async with slots:
            if stop_at is None or time.perf_counter() < stop_at:
                await _one_request(*request)
    except asyncio.CancelledError:
        if record.error is None:  # still waiting for a slot
            record.error = "timeout: the deadline passed before this request was sent"
        raise


async def _on_time(at: float, record: RequestRecord, *request) -> None:
    """One request of a rate point: sent at `at` (on perf_counter's clock), as `vllm bench serve
    --request-rate` sends each after its drawn gap, whether or not the others have ended."""
    try:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        await _one_request(*request)
    except asyncio.CancelledError:
        if record.error is None:  # not sent yet
            record.error = "timeout: the deadline passed before this request was sent"
        raise


async def _in_turn(requests: Sequence[tuple]) -> None:
    """One conversation: each turn sent once the previous one has ended, as a chat user does."""
    for request in requests:
        await _one_request(*request)


async def _fire(
    base_url: str,
    engine: Engine,
    params: ServeParams,
    prompts: Sequence[str],
    input_tokens: Sequence[int],
    deadline_s: float,
    on_end: Callable[[RequestRecord], None] | None,
    concurrency: int | None,
    stop_sending_s: float | None,
    arrivals: Sequence[float] | None = None,
    output_tokens: Sequence[int] | None = None,
    chains: Sequence[Sequence[int]] | None = None,
) -> Firing:
    """fire_burst's, fire_at_concurrency's, fire_at_rate's and fire_conversations': `concurrency`,
    `arrivals` and `chains` None send every request at once; `output_tokens` None asks each for
    the case's max_output_tokens."""
    import aiohttp

    records = [RequestRecord(index=i, input_tokens=n, sent_at=0.0) for i, n in enumerate(input_tokens)]
    wanted: Sequence[int | None] = output_tokens or [None] * len(prompts)
    requests = [engine.request(prompt, params, n) for prompt, n in zip(prompts, wanted)]  # built before t=0
    counters = {"events": 0, "last_sent": 0.0, "on_end": on_end}
    lag: list[float] = []
    stop = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=60, sock_read=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        monitor = asyncio.create_task(_loop_lag(lag, stop))
        cpu0, t0 = time.thread_time(), time.perf_counter()
        slots = asyncio.Semaphore(concurrency) if concurrency else None
        stop_at = None if stop_sending_s is None else t0 + stop_sending_s
        tasks = []
        requested = [
            (session, base_url + path, body, engine, record, t0, counters)
            for (path, body), record in zip(requests, records)
        ]
        for chain in chains or []:
            tasks.append(asyncio.create_task(_in_turn([requested[index] for index in chain])))
        for index, request in enumerate(requested if chains is None else []):
            record = records[index]
            if arrivals is not None:
                sending = _on_time(t0 + arrivals[index], record, *request)
            elif slots is not None:
                sending = _in_slot(slots, stop_at, record, *request)
            else:
                sending = _one_request(*request)
            tasks.append(asyncio.create_task(sending))
        done, pending = await asyncio.wait(tasks, timeout=deadline_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        duration = max((r.ended_at for r in records if r.ended_at is not None), default=0.0)
        wall, cpu = time.perf_counter() - t0, time.thread_time() - cpu0
        stop.set()
        await monitor
    load = ClientLoad(
        cpu_s=cpu,
        wall_s=wall,
        events=counters["events"],
        dispatch_s=counters["last_sent"],
        loop_lag_p99_s=percentile(lag, 99) if lag else 0.0,
        loop_lag_max_s=max(lag) if lag else 0.0,
    )
    if concurrency or arrivals is not None or chains is not None:  # a point's rows are the requests it sent
        records = [record for record in records if record.ended_at is not None]
    return Firing(records, load, duration, cut_short=bool(pending))


def fire_burst(
    base_url: str,
    engine: Engine,
    params: ServeParams,
    prompts: Sequence[str],
    input_tokens: Sequence[int],
    deadline_s: float,
    on_end: Callable[[RequestRecord], None] | None = None,
) -> Firing:
    """Send every prompt at once and read every stream to its end (or until `deadline_s`).
    `on_end` sees each request as it ends, in the event loop: it must be quick."""
    return asyncio.run(_fire(base_url, engine, params, prompts, input_tokens, deadline_s, on_end, None, None))


def fire_at_concurrency(
    base_url: str,
    engine: Engine,
    params: ServeParams,
    prompts: Sequence[str],
    input_tokens: Sequence[int],
    deadline_s: float,
    concurrency: int,
    stop_sending_s: float | None = None,
) -> Firing:
    """Send the prompts in order, `concurrency` of them in flight at a time, each as a slot
    frees, none after `stop_sending_s`, and read every stream to its end (or until `deadline_s`).
    The rows are those of the requests sent."""
    return asyncio.run(
        _fire(base_url, engine, params, prompts, input_tokens, deadline_s, None, concurrency, stop_sending_s)
    )


def fire_at_rate(
    base_url: str,
    engine: Engine,
    params: ServeParams,
    prompts: Sequence[str],
    input_tokens: Sequence[int],
    deadline_s: float,
    arrivals: Sequence[float],
    output_tokens: Sequence[int] | None = None,
) -> Firing:
    """Send prompt i at `arrivals[i]` seconds after the release, asking for `output_tokens[i]`
    tokens, and read every stream to its end (or until `deadline_s`). The rows are those of the
    requests sent."""
    if len(arrivals) != len(prompts):
        raise ValueError(f"{len(arrivals)} arrival times for {len(prompts)} prompts")
    return asyncio.run(
        _fire(base_url, engine, params, prompts, input_tokens, deadline_s, None, None, None, arrivals, output_tokens)
    )


def fire_conversations(
    base_url: str,
    engine: Engine,
    params: ServeParams,
    prompts: Sequence[str],
    input_tokens: Sequence[int],
    deadline_s: float,
    chains: Sequence[Sequence[int]],
    output_tokens: Sequence[int],
) -> Firing:
    """Every conversation at once, each a chain of prompt indices sent one after another (the
    next once the previous ended), and read every stream to its end (or until `deadline_s`)."""
    return asyncio.run(
        _fire(
            base_url, engine, params, prompts, input_tokens, deadline_s, None, None, None, None, output_tokens, chains
        )
    )
