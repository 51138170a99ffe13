"""A serving run's records and its metrics, defined once: each request's row (requests.jsonl), the
aggregates of a burst or of a point of the sweep (their requests fired together: a firing), the
engine's own counters, and the details the driver records beside its figures (rank-0.json's
`details`: the burst's aggregates, the client's load, the engine's token count, the roofline and
the sweep's points). kit.serve.session writes the details through their model and every reader
(the serving stage, energy, validity, the report) reads them back through it, by attribute.
Fields a kit added after a run was recorded are optional, so an older run still reads.

Definitions (those of vLLM's `vllm bench serve`, vllm/benchmarks/lib/endpoint_request_func.py,
so figures compare):
- A token event: one streamed event that stands for one generated token (vLLM: every chunk with
  choices, some of which decode to empty text; TGI and LightLLM: every event with a token).
- TTFT: from sending the request to the first token event.
- ITL (inter-token latency): the gaps between successive token events of a request, each event
  time-stamped as it is read; events the client reads together are microseconds apart, so a
  median ITL near zero says the events arrived in bursts (a busy client, or an engine that
  flushes several tokens at once), which the saturation check reads against TPOT.
- TPOT: (end-to-end latency - TTFT) / (output tokens - 1), for requests with 2+ output tokens.
- End-to-end latency: from sending the request to the end of its stream.
- Duration: from the firing's release (t=0) to the end of the last request, finished or failed.
- Throughputs over that duration: successful requests/s, their output tokens/s, and their input
  plus output tokens/s.
- Percentiles: linear interpolation between closest ranks (Hyndman & Fan type 7, numpy's
  default), so p50 of [1, 2, 3, 4] is 2.5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from kit.plan.predictions import ConcurrencyBound, ServingBounds

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation (type 7)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    if low == high or math.isinf(ordered[high]):  # a rank itself; or one never measured (inf) within reach
        return ordered[high]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


class RequestTimes(BaseModel):
    """What a request's latencies are judged by: a row of requests.jsonl read without its
    inter-token gaps, which are most of its bytes (a sweep's rows read three times faster so)."""

    ended_at: float | None = None  # since the release: finished, failed or cancelled
    ttft: float | None = None
    latency: float | None = None  # end to end, None when the request never ended
    output_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.latency is not None

    @property
    def tpot(self) -> float | None:
        if not self.ok or self.latency is None or self.ttft is None or self.output_tokens < 2:
            return None
        return (self.latency - self.ttft) / (self.output_tokens - 1)


class RequestRecord(RequestTimes):
    """One request of the burst or of a point of the sweep, as requests.jsonl stores it (times
    in seconds, since the release of the burst or the point)."""

    index: int
    input_tokens: int  # counted by the served tokenizer when the prompt was built
    server_prompt_tokens: int | None = None  # the engine's own count, where it reports one
    sent_at: float
    itl: list[float] = []
    output_tokens_source: str = "none"  # "server" (the engine's count) or "client" (streamed_tokens)
    token_events: int = 0  # events that carried output (TTFT and ITL are timed by them)
    streamed_tokens: int = 0  # generated tokens the client counted in the stream
    status: int | None = None  # HTTP status


class Distribution(BaseModel):
    mean: float
    median: float
    p90: float
    p99: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        if not values:
            return None
        return cls(
            mean=sum(values) / len(values),
            median=percentile(values, 50),
            p90=percentile(values, 90),
            p99=percentile(values, 99),
            min=min(values),
            max=max(values),
            n=len(values),
        )


class ClientLoad(BaseModel):
    """What the load generator itself cost, measured while it sent and read the requests."""

    cpu_s: float  # CPU time of the client's event loop thread over the firing
    wall_s: float
    events: int  # SSE events parsed
    dispatch_s: float  # from the release to the last request put on the wire
    loop_lag_p99_s: float  # how late a 10 ms timer fired in the client's event loop (p99)
    loop_lag_max_s: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cpu_us_per_event(self) -> float:
        return 1e6 * self.cpu_s / self.events if self.events else 0.0


class Saturation(BaseModel):
    """Whether the client, not the server, may have limited the measurement, and why."""

    client_limited: bool
    reasons: list[str]
    cpu_share: float
    cpu_us_per_event: float


# Thresholds of the saturation check. The client is one asyncio thread: at ~1 core it cannot go
# faster; a late timer means events waited in the client before being time-stamped; a burst
# that took long to put on the wire was not "all at once".
CPU_SHARE_LIMIT = 0.9
LAG_SHARE_OF_TPOT = 0.1  # p99 loop lag above 10 % of the median time per output token
LAG_FLOOR_S = 0.005  # ... and above 5 ms, below which timer jitter dominates
DISPATCH_SHARE_LIMIT = 0.05  # the last request sent later than 5 % of the burst's duration


def saturation(load: ClientLoad, median_tpot: float | None, duration: float, all_at_once: bool = True) -> Saturation:
    """TPOT, not ITL, is the yardstick for the loop's lag: a lagging client reads events in
    bursts, which shrinks the gaps it sees (median ITL near zero) but not a request's span. How
    long the requests took to send counts for a burst only (`all_at_once`): a point of the sweep
    sends its last request late by design."""
    reasons = []
    if load.cpu_share >= CPU_SHARE_LIMIT:
        reasons.append(f"client used {load.cpu_share:.0%} of a core while it sent and read the requests")
    yardstick = LAG_SHARE_OF_TPOT * median_tpot if median_tpot else 0.0
    if load.loop_lag_p99_s > max(LAG_FLOOR_S, yardstick):
        reasons.append(
            f"client event loop lagged {1e3 * load.loop_lag_p99_s:.1f} ms (p99), more than 5 ms and 10 % of "
            f"the median time per output token ({1e3 * (median_tpot or 0):.1f} ms)"
        )
    if all_at_once and duration > 0 and load.dispatch_s > DISPATCH_SHARE_LIMIT * duration:
        reasons.append(
            f"the burst took {load.dispatch_s:.3f} s to send, {load.dispatch_s / duration:.0%} of its duration"
        )
    return Saturation(
        client_limited=bool(reasons), reasons=reasons, cpu_share=load.cpu_share, cpu_us_per_event=load.cpu_us_per_event
    )


class LatencyFigures(BaseModel):
    """What the requests' latencies give of a firing: how many finished, how fast, how soon. Every
    figure is computed from its rows (RequestTimes suffice)."""

    requests: int
    completed: int
    errors: int
    duration_s: float
    request_throughput: float  # completed requests / s
    output_throughput: float  # output tokens of completed requests / s
    output_tokens: int
    ttft_s: Distribution | None
    tpot_s: Distribution | None
    latency_s: Distribution | None
    error_kinds: dict[str, int] = {}

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0


def latency_figures(records: Sequence[RequestTimes], duration: float) -> LatencyFigures:
    done = [r for r in records if r.ok]
    kinds: dict[str, int] = {}
    for record in records:
        if not record.ok:
            kind = (record.error or "unfinished").split(":")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
    output = sum(r.output_tokens for r in done)
    return LatencyFigures(
        requests=len(records),
        completed=len(done),
        errors=len(records) - len(done),
        duration_s=duration,
        request_throughput=len(done) / duration if duration > 0 else 0.0,
        output_throughput=output / duration if duration > 0 else 0.0,
        output_tokens=output,
        ttft_s=Distribution.of([r.ttft for r in done if r.ttft is not None]),
        tpot_s=Distribution.of([r.tpot for r in done if r.tpot is not None]),
        latency_s=Distribution.of([r.latency for r in done if r.latency is not None]),
        error_kinds=kinds,
    )


class BurstAggregates(LatencyFigures):
    """The figures of one firing (the burst, or a point of the sweep), every one computed from its
    RequestRecords: its latency figures, the tokens it was sent and the gaps between events."""

    total_token_throughput: float  # input + output tokens of completed requests / s
    input_tokens: int
    itl_s: Distribution | None


def aggregate(records: Sequence[RequestRecord], duration: float) -> BurstAggregates:
    figures = latency_figures(records, duration)
    done = [r for r in records if r.ok]
    inputs = sum(r.input_tokens for r in done)
    return BurstAggregates(
        **dict(figures),
        total_token_throughput=(inputs + figures.output_tokens) / duration if duration > 0 else 0.0,
        input_tokens=inputs,
        itl_s=Distribution.of([gap for r in done for gap in r.itl]),
    )


class ServerCounters(BaseModel):
    """What the engine counted during one burst (after minus before), or why it is not known."""

    generated_tokens: float | None = None
    finished_requests: float | None = None
    source: str  # the metric names read, or why none could be
    unavailable: str | None = None


class NoBound(BaseModel):
    """Why no roofline was computed (a CPU, a GPU the hardware table lacks)."""

    unavailable: str


class TokenCheck(BaseModel):
    """The generated tokens the client counted beside the engine's own counters over the same
    interval: equal, or the rows do not hold what the engine did."""

    client_counted: int
    token_events: int | None = None  # events that carried output (TTFT and ITL are timed by them)
    engine_reported_per_request: int | None = None  # output tokens the engine reported in its responses
    server_counters: ServerCounters
    equal: bool


def sweep_point_folder(concurrency: int) -> str:
    """Where a sweep point's files go, in its run's folder."""
    return f"sweep/c{concurrency}"


class PointFiles(BaseModel):
    requests: str  # the point's rows, relative to the run's folder


class SweepPointDetails(BaseModel):
    """One point of the sweep: how many requests it planned and sent at its concurrency, and the
    figures of those it sent."""

    concurrency: int
    planned: int
    sent: int
    files: PointFiles | None = None
    aggregates: BurstAggregates
    client: ClientLoad | None = None
    saturation: Saturation
    bounds: ConcurrencyBound | NoBound
    cut_short: bool


class SweepDetails(BaseModel):
    levels: list[int] = []
    planned: dict[str, int] = {}  # concurrency -> requests planned
    max_point_s: float | None = None
    points: list[SweepPointDetails]
    not_measured: str | None = None
    tokens: TokenCheck | None = None
    server_count_mismatches: list[int] = []


class QuantileInterval(BaseModel):
    """A percentile's confidence interval from the order statistics of its samples alone (no
    assumed distribution): `high` None where too few samples bound it from above (with n
    samples, the p99's upper 95 % bound needs n of about 300 or more)."""

    percentile: float
    confidence: float
    n: int
    low: float | None
    high: float | None


class ArrivalCheck(BaseModel):
    """Whether the gaps between the requests' send times, as the client recorded them, are those
    of a Poisson process at the point's rate: a Kolmogorov-Smirnov test of the gaps against the
    exponential distribution of mean 1/rate."""

    gaps: int
    mean_gap_s: float
    ks_statistic: float
    p_value: float
    passes: bool  # p-value at or above the test's level


class Backlog(BaseModel):
    """Whether the engine kept up with the arrivals, read from the rows: over the window from one
    median latency after the release (the ramp) to the last send, the rate at which requests
    ended against the rate at which they were sent one ramp earlier (a request that is served in
    the median latency ends one ramp after it is sent), and how fast the requests in flight grew
    there. Past saturation: requests ended slower than they arrived and the queue grew."""

    window_s: float
    offered_rps: float  # sends over the window one ramp earlier
    completed_rps: float
    queue_growth_per_s: float  # least-squares slope of the requests in flight at each send
    saturated: bool
    why: str | None = None  # what says so, or why the window is too short to say


class RatePointDetails(BaseModel):
    """One point of the rate search: its rate, the requests planned and sent, their figures,
    the p99s with their intervals, the objectives' verdict, the arrivals' test and the backlog."""

    rate_rps: float
    process: str
    planned: int
    sent: int
    files: PointFiles
    aggregates: BurstAggregates
    client: ClientLoad | None = None
    saturation: Saturation  # the client's (kit.rundir.serving.saturation)
    ttft_p99: QuantileInterval
    tpot_p99: QuantileInterval
    meets: bool
    why_not: str | None = None
    arrivals: ArrivalCheck | None = None  # Poisson points with enough gaps
    backlog: Backlog
    cut_short: bool


class RateDetails(BaseModel):
    """The rate search: its objectives, every point in the order run, and its answer: the highest
    rate that met the objectives and the lowest above it that did not (None where the search did
    not find one), and why it stopped."""

    process: str
    slo_ttft_s: float
    slo_tpot_s: float
    max_search_s: float
    lengths: str | None = None  # the requests' lengths: fixed, or the distributions they were drawn from
    points: list[RatePointDetails]
    capacity_rps: float | None = None  # the highest rate that met them
    missed_rps: float | None = None  # the lowest rate above it that missed them (or was saturated)
    stopped: str
    tokens: TokenCheck | None = None
    server_count_mismatches: list[int] = []


class PrefixCacheCounts(BaseModel):
    """The engine's prefix cache over one workload (after minus before): prompt tokens looked up
    and, of them, found cached (vLLM: vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total);
    or why they are not known."""

    queried_tokens: float | None = None
    hit_tokens: float | None = None
    unavailable: str | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def hit_rate(self) -> float | None:
        """Hits over lookups; 0 where no token was found cached, lookups or none (vLLM with its
        cache off looks up nothing); None where the counters are unknown."""
        if self.queried_tokens is None or self.hit_tokens is None:
            return None
        if self.hit_tokens == 0:
            return 0.0
        return self.hit_tokens / self.queried_tokens if self.queried_tokens > 0 else None


class PrefixRunDetails(BaseModel):
    """The multi-turn shared-prefix workload on one start of the engine, its prefix cache on or off."""

    caching: bool
    conversations: int
    turns: int
    requests: int
    files: PointFiles
    aggregates: BurstAggregates
    cache: PrefixCacheCounts
    engine_log: str
    cut_short: bool
    tokens: TokenCheck | None = None


class SharedPrefixDetails(BaseModel):
    """The workload with the engine's prefix caching on (the run's engine) and off (a second start),
    or why the second could not be made."""

    shared_tokens: int
    turn_tokens: int
    answer_tokens: int
    on: PrefixRunDetails | None = None
    off: PrefixRunDetails | None = None
    off_unavailable: str | None = None


class StartupTime(BaseModel):
    """One start of the engine: from the process (or container) started to its health route
    answering 200, and to the first token of a first request, sent as soon as it is ready."""

    cache: Literal["cold", "warm", "first"]  # first: the run's own start, its cache as the host had it
    ready_s: float
    first_token_s: float | None = None  # None where the first request failed
    error: str | None = None
    engine_log: str | None = None  # relative to the run's folder


class StartupDetails(BaseModel):
    """The engine's start-up times: the run's own start, then starts from an empty cache (cold)
    and from the cache the cold start filled (warm), the cache named by `cache_variable`; or why
    one kind could not be measured."""

    cache_variable: str | None = None
    starts: list[StartupTime] = []
    unavailable: str | None = None


class CpuSplit(BaseModel):
    """The CPUs the engine may use and those the client keeps."""

    model_config = ConfigDict(frozen=True)

    engine: tuple[int, ...]
    client: tuple[int, ...]


class EngineStop(BaseModel):
    """How the engine ended: by itself, or stopped (SIGTERM, SIGKILL, docker stop), and its exit."""

    stopped_by: str
    exit_code: int | None = None
    oom_killed: bool | None = None  # a container's, as docker said


class ContainerPort(BaseModel):
    container: int
    host: str  # 127.0.0.1:<port>


class EngineRecord(BaseModel):
    """The engine as it ran: which, where (`placement`) and how it was launched (a process of this
    host: its argv and pid; a container: its image by digest, entrypoint, user, command and
    confinement), on which CPUs, how long it took to be ready, and how it stopped."""

    name: str
    label: str
    placement: str  # local, docker
    version: str | None = None
    argv: list[str] | None = None  # local
    pid: int | None = None  # local
    port: int | ContainerPort | None = None
    environment: list[str] | dict[str, str] | None = None  # the variables' names (local), or the container's
    image: str | None = None  # docker
    image_digest: str | None = None
    repo_digests: list[str] = []
    entrypoint: list[str] | None = None
    user: str | None = None
    command: list[str] | None = None
    container_id: str | None = None
    confinement: dict[str, list[str] | str | None] = {}
    cpus: CpuSplit | None = None  # on a host without GPUs: the engine's CPUs and the client's
    ready_s: float | None = None
    stop: EngineStop | None = None
    log_tail: str | None = None  # where the run failed


class ModelRecord(BaseModel):
    """The model folder the engine served: the synthetic checkpoint, the weightless model, or real
    weights the user gave, with the digest of each of its files."""

    kind: str
    path: str
    sha256: str
    files: dict[str, str] = {}


class PromptsRecord(BaseModel):
    count: int
    input_tokens: int
    counted_by: str
    server_count_mismatches: list[int] = []  # requests whose prompt the engine counted differently


class RunFiles(BaseModel):
    requests: str
    engine_log: str
    engine: str


class WarmupRecord(BaseModel):
    requests: int
    duration_s: float
    errors: list[str | None] = []


class OutputCheck(BaseModel):
    """Serving correctness beside speed (kit.serve.correctness): fixed prompts decoded greedily by
    the engine, their first tokens against the same weights' greedy tokens in transformers. A
    failed check marks the case's figures invalid (kit.measure.validity)."""

    status: Literal["pass", "fail", "not_checked"]
    prompts: int = 0
    tokens_compared: int = 0  # per prompt: the first K generated tokens
    agreed: int = 0  # prompts whose first K tokens were the reference's
    reference: str = ""  # "transformers 4.57.1, fp32, CPU, greedy"
    tolerance: str = ""
    mismatches: list[str] = []  # "prompt 2, token 5: engine 311, transformers 87"
    note: str | None = None  # why not checked


class ServeDetails(BaseModel):
    """A serve run's driver details: the engine and model it served, the prompts, then the burst's
    figures (absent where no request of it finished), and the sweep's."""

    kind: Literal["serve"] = "serve"
    engine: EngineRecord
    model: ModelRecord | None = None
    prompts: PromptsRecord | None = None
    ignore_eos: bool | None = None
    ignore_eos_note: str | None = None  # an engine that cannot be told to ignore EOS says so
    files: RunFiles | None = None
    warmup: WarmupRecord | None = None
    aggregates: BurstAggregates | None = None
    client: ClientLoad | None = None
    saturation: Saturation | None = None
    tokens: TokenCheck | None = None
    bounds: ServingBounds | NoBound | None = None
    short_outputs: int | None = None  # requests that ended before max_output_tokens (EOS)
    sweep: SweepDetails | None = None
    correctness: OutputCheck | None = None  # before the burst: the engine's greedy output against transformers'
    rates: RateDetails | None = None
    prefix: SharedPrefixDetails | None = None
    startup: StartupDetails | None = None
