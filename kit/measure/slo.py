"""Service-level objectives: the latencies a buyer holds a server to, and the points of a sweep
judged by them.

The defaults are MLPerf Inference's latency constraints for Llama-2-70B in its Server scenario:
p99 time to first token within 2000 ms and p99 time per output token within 200 ms
(mlcommons/inference, loadgen/mlperf.conf: `llama2-70b.Server.ttft_latency = 2000`,
`llama2-70b.Server.tpot_latency = 200`, `*.Server.target_latency_percentile = 99`); the paper's
models are Llama-2's. Its interactive setting asks for 450 ms and 40 ms
(`llama2-70b-interactive.Server`). The objectives are options of the report
(`kit report --slo-ttft-ms --slo-tpot-ms`), not of the run: every request's row is kept, so a
finished run is held to any target without being measured again, and two buyers with two
targets read the same evidence.

Goodput: the requests per second that met both objectives, each request by its own TTFT and
TPOT, over the point's duration: vLLM's request goodput (`vllm bench serve --goodput`), after
DistServe (Zhong et al., OSDI 2024). A failed request meets neither; a finished request of one
token waits for no second one and meets the TPOT objective, as vLLM counts it.
A point meets the objectives when the p99 of its requests' TTFT and TPOT, a failed request
counted as never answered, are within them: more than 1 % of its requests failed, it does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from kit.rundir.serving import LatencyFigures, RequestTimes, percentile

PERCENTILE = 99
SOURCE = "MLPerf Inference, Llama-2-70B, Server scenario"


class Slo(BaseModel):
    """Both objectives, in seconds, held at the p99."""

    model_config = ConfigDict(frozen=True)

    ttft_s: float = Field(gt=0)
    tpot_s: float = Field(gt=0)

    def short(self) -> str:
        return f"p{PERCENTILE} TTFT ≤ {1000 * self.ttft_s:g} ms, TPOT ≤ {1000 * self.tpot_s:g} ms"

    def source(self) -> str:
        return SOURCE if self == DEFAULT_SLO else "given to kit report"

    def describe(self) -> str:
        return f"{self.short()} ({self.source()})"


DEFAULT_SLO = Slo(ttft_s=2.0, tpot_s=0.2)  # mlperf.conf, llama2-70b.Server: 2000 ms, 200 ms


def given_slo(ttft_ms: float | None, tpot_ms: float | None) -> Slo:
    """The objectives given in milliseconds (`--slo-ttft-ms`, `--slo-tpot-ms`), the default for the others."""
    return Slo(
        ttft_s=DEFAULT_SLO.ttft_s if ttft_ms is None else ttft_ms / 1000,
        tpot_s=DEFAULT_SLO.tpot_s if tpot_ms is None else tpot_ms / 1000,
    )


class Judged(BaseModel):
    """A point's requests held to the objectives."""

    goodput: float  # requests/s that met both
    good_share: float  # of all its requests
    ttft_p99_s: float  # over all its requests, a failed one never answered (inf)
    tpot_p99_s: float
    meets: bool
    why_not: str | None  # the first objective it misses, where it misses one


def judge(rows: Sequence[RequestTimes], duration: float, slo: Slo) -> Judged:
    ttfts = [row.ttft if row.ok and row.ttft is not None else math.inf for row in rows]
    tpots = [(row.tpot or 0.0) if row.ok else math.inf for row in rows]
    good = sum(1 for ttft, tpot in zip(ttfts, tpots) if ttft <= slo.ttft_s and tpot <= slo.tpot_s)
    ttft_p99, tpot_p99 = (percentile(values, PERCENTILE) if values else math.inf for values in (ttfts, tpots))
    failed = sum(1 for row in rows if not row.ok)
    why = None
    if failed and math.isinf(max(ttft_p99, tpot_p99)):
        why = f"{failed} of {len(rows)} requests failed: its p{PERCENTILE} is one of them"
    elif ttft_p99 > slo.ttft_s:
        why = f"p{PERCENTILE} TTFT {ttft_p99:.3g} s > {slo.ttft_s:g} s"
    elif tpot_p99 > slo.tpot_s:
        why = f"p{PERCENTILE} TPOT {1000 * tpot_p99:.3g} ms > {1000 * slo.tpot_s:g} ms"
    return Judged(
        goodput=good / duration if duration > 0 else 0.0,
        good_share=good / len(rows) if rows else 0.0,
        ttft_p99_s=ttft_p99,
        tpot_p99_s=tpot_p99,
        meets=bool(rows) and why is None,
        why_not=why,
    )


class SweepPoint(BaseModel):
    """One concurrency of a case's sweep: its figures from the rows of every run, held to the
    objectives, and its roofline (or why there is none)."""

    concurrency: int
    figures: LatencyFigures
    judged: Judged
    bound_tokens_per_s: float | None
    bound_note: str | None
    cut_short: bool  # the case's time ran out during it: not a steady state, never the capacity
    client_limited: str | None = None  # why the client may have limited it (kit.rundir.serving.saturation)
    invalid: str | None = None  # why its figures are no measurement: past its bound, or its case is invalid

    @property
    def above_bound(self) -> str | None:
        """Output tokens/s past the roofline of its concurrency on its GPUs: impossible."""
        if not self.bound_tokens_per_s or self.figures.output_throughput <= self.bound_tokens_per_s:
            return None
        ratio = self.figures.output_throughput / self.bound_tokens_per_s
        return f"output tokens/s {ratio:.3g} × its roofline bound ({self.bound_tokens_per_s:.4g} tokens/s): impossible"

    @property
    def not_judged(self) -> str | None:
        """Why the point's latencies may not be the server's, so that it is held to no objective:
        the case's time cut it short, or the client may have limited it (a client short of CPU
        time-stamps events late, and a TPOT read from late stamps can look better or worse)."""
        if self.cut_short:
            return "cut short: the case's time ran out during it"
        if self.client_limited:
            return f"the client may have limited it: {self.client_limited}"
        return None

    @property
    def counted(self) -> bool:
        """Within the objectives, measured as the server, not the client or the clock, set it, and valid."""
        return self.judged.meets and self.not_judged is None and self.invalid is None


def capacity(points: Sequence[SweepPoint]) -> SweepPoint | None:
    """The point of the highest output throughput that counts (meets the objectives and is
    judged): what the server serves within them (None where no point does)."""
    return max(
        (point for point in points if point.counted), key=lambda point: point.figures.output_throughput, default=None
    )


def at_sweep_cap(points: Sequence[SweepPoint], point: SweepPoint) -> bool:
    """Whether `point` is the sweep's largest concurrency: the server may serve more than it, so
    a capacity found there is a lower bound."""
    return point.concurrency == max(p.concurrency for p in points)
