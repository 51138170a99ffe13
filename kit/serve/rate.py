"""The rate search: arrivals at a rate on the engine after the sweep (ServeParams.rates), and the
highest rate whose p99 TTFT and TPOT meet the objectives.

The sweep holds N requests in flight; production load arrives at a rate whatever is in flight,
as MLPerf Inference's Server scenario sends it and as `vllm bench sweep serve_sla` searches it.
Each point sends max(min_requests, rate x min_duration_s) new prompts (the burst's lengths, or
lengths drawn from the search's distributions or a named preset, seeded) at
seeded arrival times (kit.serve.arrivals) and is judged from its rows: the p99s with their
intervals (kit.measure.rate), the objectives (kit.measure.slo.judge), whether its arrivals were
Poisson, and whether the engine kept up (a queue that grows while requests end slower than they
arrive: past saturation). The search doubles the rate from start_rps until a point misses (or
max_rps), then bisects between the highest rate that met and the lowest that missed; no point is
started after max_search_s, nor once the case's time is short. A point past saturation, cut short,
or within the objectives by less than the client's own lag counts as a miss (verdict): the
capacity stated is never above what was shown. Rows go to rates/p<k>/requests.jsonl, in the order run.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import NamedTuple

from kit.measure.rate import arrival_check, backlog, quantile_interval
from kit.measure.slo import PERCENTILE, Judged, Slo, judge
from kit.plan.protocol import Case, LengthPair, RateSearch, ServeParams
from kit.rundir.serving import (
    CPU_SHARE_LIMIT,
    ClientLoad,
    PointFiles,
    RateDetails,
    RatePointDetails,
    RequestRecord,
)
from kit.serve.arrivals import arrival_times
from kit.serve.burst import prompts_of_lengths, token_count
from kit.serve.client import fire_at_rate
from kit.serve.engines import Engine

SEED_OFFSET = 5000  # point k draws its prompts and arrivals from seed + 5000 + k: apart from the sweep's
DRAIN_S = 30.0  # a point's requests may run this long after its last arrival (and as long again as its arrivals)
LEAST_POINT_S = 5.0


def describe_lengths(pair: LengthPair, preset: str | None) -> str:
    def one(lengths) -> str:
        return str(lengths.tokens) if lengths.low == lengths.tokens else f"U[{lengths.low}, {lengths.tokens}]"

    said = f"input {one(pair.input)}, output {one(pair.output)} tokens"
    return f"{preset}: {said}" if preset else said


def point_folder(index: int) -> str:
    """Where the k-th point run keeps its rows, in its run's folder."""
    return f"rates/p{index}"


def next_rate(search: RateSearch, points: list[RatePointDetails]) -> float | None:
    """The rate of the next point, or None where the search is done: doubling from start_rps to the
    first miss (or max_rps), then halving the interval between the highest met rate below the
    lowest missed one and that missed one, `bisections` times."""
    if not points:
        return search.start_rps
    missed = [point.rate_rps for point in points if not point.meets]
    if not missed:
        top = max(point.rate_rps for point in points)
        return None if top >= search.max_rps else min(2 * top, search.max_rps)
    lowest_miss = min(missed)
    met_below = [point.rate_rps for point in points if point.meets and point.rate_rps < lowest_miss]
    first_miss = next(index for index, point in enumerate(points) if not point.meets)
    if len(points) - first_miss - 1 >= search.bisections:
        return None
    low = max(met_below) if met_below else 0.0
    return (low + lowest_miss) / 2


def stop_reason(search: RateSearch, points: list[RatePointDetails]) -> str:
    """Why the search ended where next_rate says it is done."""
    if all(point.meets for point in points):
        return f"every rate met the objectives, up to max_rps ({search.max_rps:g} requests/s)"
    return f"{search.bisections} bisections after the first rate that missed"


def verdict(
    judged: Judged, slo: Slo, load: ClientLoad, saturated: str | None, cut_short: bool
) -> tuple[bool, str | None]:
    """Whether a point meets the objectives, where nothing else may have set its figures. A client
    whose event loop lagged stamps events late by at most its largest lag: a point within the
    objectives by more than that margin met them whatever the lag; one within them by less, or
    a client that used a whole core, is a miss (the capacity is never above what was shown)."""
    if cut_short:
        return False, "cut short: its time ran out before its requests ended"
    if saturated:
        return False, f"past saturation: {saturated}"
    if not judged.meets:
        return False, judged.why_not
    if load.cpu_share >= CPU_SHARE_LIMIT:
        return False, f"the client may have limited it: it used {load.cpu_share:.0%} of a core"
    margin = load.loop_lag_max_s
    if judged.ttft_p99_s + margin > slo.ttft_s or judged.tpot_p99_s + margin > slo.tpot_s:
        return False, (
            f"within the objectives by less than the client's largest event loop lag ({1000 * margin:.3g} ms)"
        )
    return True, None


class RateOutcome(NamedTuple):
    details: RateDetails
    records: list[RequestRecord]
    failure: str | None  # the engine exited: the case is an error


def run_rate_search(case: Case, engine: Engine, handle, tokenizer, out_dir: Path, deadline: float, say) -> RateOutcome:
    """Points one after another as next_rate gives them, until it is done, the search's time cap
    passes or the case's time (`deadline`, on time.monotonic's clock) is short."""
    params = case.params_as(ServeParams)
    search = params.rates
    assert search is not None, "a rate search is a case's with rates"
    slo = Slo(ttft_s=search.slo_ttft_ms / 1000, tpot_s=search.slo_tpot_ms / 1000)
    pair = search.length_pair(params.input_tokens, params.max_output_tokens)
    details = RateDetails(
        process=search.process,
        slo_ttft_s=slo.ttft_s,
        slo_tpot_s=slo.tpot_s,
        max_search_s=search.max_search_s,
        lengths=describe_lengths(pair, search.lengths if isinstance(search.lengths, str) else None),
        points=[],
        stopped="not started",
    )
    records: list[RequestRecord] = []
    started = time.monotonic()
    while True:
        rate = next_rate(search, details.points)
        if rate is None:
            details.stopped = stop_reason(search, details.points)
            break
        if time.monotonic() - started > search.max_search_s:
            details.stopped = f"its time cap (max_search_s {search.max_search_s} s) passed"
            break
        index = len(details.points) + 1
        count = search.requests_at(rate)
        seed = params.seed + SEED_OFFSET + index
        arrivals = arrival_times(rate, count, search.process, seed)
        left = deadline - time.monotonic()
        if left < LEAST_POINT_S + arrivals[-1]:
            details.stopped = f"the case's time (timeout_s {params.timeout_s}) ran short before {rate:.4g} requests/s"
            break
        draw = random.Random(seed)
        inputs = [draw.randint(pair.input.low, pair.input.tokens) for _ in range(count)]
        outputs = [draw.randint(pair.output.low, pair.output.tokens) for _ in range(count)]
        prompts = prompts_of_lengths(tokenizer, inputs, seed)
        say(f"serve: rate {rate:.4g} requests/s ({search.process}): {count} requests over {arrivals[-1]:.1f} s")
        fired = fire_at_rate(
            handle.base_url,
            engine,
            params,
            prompts,
            [token_count(tokenizer, prompt) for prompt in prompts],
            min(left, arrivals[-1] * 2 + DRAIN_S),
            arrivals,
            outputs,
        )
        folder = point_folder(index)
        (out_dir / folder).mkdir(parents=True, exist_ok=True)
        totals, client = fired.kept(out_dir / folder / "requests.jsonl", all_at_once=False)
        judged = judge(fired.records, totals.duration_s, slo)
        queue = backlog(fired.records)
        meets, why = verdict(judged, slo, fired.load, queue.why if queue.saturated else None, fired.cut_short)
        done = [row for row in fired.records if row.ok]
        details.points.append(
            RatePointDetails(
                rate_rps=rate,
                process=search.process,
                planned=count,
                sent=len(fired.records),
                files=PointFiles(requests=f"{folder}/requests.jsonl"),
                aggregates=totals,
                client=fired.load,
                saturation=client,
                ttft_p99=quantile_interval([row.ttft for row in done if row.ttft is not None], PERCENTILE),
                tpot_p99=quantile_interval([row.tpot for row in done if row.tpot is not None], PERCENTILE),
                meets=meets,
                why_not=why,
                arrivals=arrival_check([row.sent_at for row in fired.records], rate)
                if search.process == "poisson"
                else None,
                backlog=queue,
                cut_short=fired.cut_short,
            )
        )
        say(f"serve: rate {rate:.4g} requests/s " + ("met the objectives" if meets else f"missed them: {why}"))
        records += fired.records
        code = handle.exit_code()
        if code is not None:
            details.stopped = f"the engine exited with code {code} at {rate:.4g} requests/s"
            return RateOutcome(details, records, details.stopped)
    met = [point.rate_rps for point in details.points if point.meets]
    missed = [point.rate_rps for point in details.points if not point.meets]
    details.missed_rps = min(missed) if missed else None
    below = [rate for rate in met if details.missed_rps is None or rate < details.missed_rps]
    details.capacity_rps = max(below) if below else None
    return RateOutcome(details, records, None)
