"""The concurrency sweep: steady-state points on the engine after the burst (ServeParams.sweep).

The burst says how long a batch of requests takes. A buyer sizing a server asks another
question: how many tokens per second it serves while each user still sees a first token, and a
fluent stream, within a target. At each concurrency N of the sweep (1, 2, 4, ... and the
largest) the client keeps N requests in flight until the point's requests are done
(kit.serve.client.fire_at_concurrency). Every prompt is new, with the burst's lengths: vLLM
caches prefixes by default, and a prompt sent again would be served from its cache. A point's
rows go to sweep/c<N>/requests.jsonl beside the burst's, its aggregates, the client's load and
the roofline at N into the run's sample. The points judged by latency objectives (goodput, the
largest throughput within them) are the report's, from the rows (kit.measure.slo).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

from kit.plan.protocol import Case, ServeParams
from kit.rundir.serving import PointFiles, RequestRecord, SweepDetails, SweepPointDetails, sweep_point_folder
from kit.serve.bounds import point_bound_details
from kit.serve.burst import burst_prompts, token_count
from kit.serve.client import fire_at_concurrency
from kit.serve.engines import Engine

SEED_OFFSET = (
    1000  # point N draws its prompts from seed + 1000 + N: apart from the burst's, the warm-up's and each other's
)
LEAST_POINT_S = 1.0  # less time than this left of the case: the next point is not started


class PlannedPoint(NamedTuple):
    concurrency: int
    prompts: list[str]
    input_tokens: list[int]  # each prompt's length, as the served tokenizer counts it


def planned_points(tokenizer, params: ServeParams) -> list[PlannedPoint]:
    """Every point's prompts, built before the engine starts."""
    sweep = params.sweep
    if sweep is None:
        return []
    points = []
    for concurrency in sweep.levels(params.prompts):
        prompts = burst_prompts(
            tokenizer, sweep.requests_at(concurrency), params.input_tokens, params.seed + SEED_OFFSET + concurrency
        )
        points.append(PlannedPoint(concurrency, prompts, [token_count(tokenizer, prompt) for prompt in prompts]))
    return points


class SweepOutcome(NamedTuple):
    details: SweepDetails  # for the run's sample
    records: list[RequestRecord]  # every point's rows
    failure: str | None  # the engine exited: the case is an error


def run_sweep(
    case: Case, engine: Engine, handle, points: list[PlannedPoint], out_dir: Path, deadline: float, say
) -> SweepOutcome:
    """Each point in turn, until the case's time (`deadline`, on time.monotonic's clock) runs out;
    a point cut short by it is kept, and said to be, and the points above it are not run."""
    params = case.params_as(ServeParams)
    max_point_s = params.sweep.max_point_s if params.sweep else None
    records: list[RequestRecord] = []
    details = SweepDetails(
        levels=[point.concurrency for point in points],
        planned={str(point.concurrency): len(point.prompts) for point in points},
        max_point_s=max_point_s,
        points=[],
    )
    for point in points:
        left = deadline - time.monotonic()
        if left < LEAST_POINT_S:
            details.not_measured = (
                f"the case's time ran out before concurrency {point.concurrency} (timeout_s {params.timeout_s})"
            )
            break
        say(f"serve: sweep, concurrency {point.concurrency}: {len(point.prompts)} requests")
        fired = fire_at_concurrency(
            handle.base_url,
            engine,
            params,
            point.prompts,
            point.input_tokens,
            left,
            point.concurrency,
            max_point_s,
        )
        folder = out_dir / sweep_point_folder(point.concurrency)
        folder.mkdir(parents=True, exist_ok=True)
        totals, saturated = fired.kept(folder / "requests.jsonl", all_at_once=False)
        details.points.append(
            SweepPointDetails(
                concurrency=point.concurrency,
                planned=len(point.prompts),
                sent=len(fired.records),
                files=PointFiles(requests=f"{sweep_point_folder(point.concurrency)}/requests.jsonl"),
                aggregates=totals,
                client=fired.load,
                saturation=saturated,
                bounds=point_bound_details(case, point.concurrency, totals),
                cut_short=fired.cut_short,
            )
        )
        records += fired.records
        code = handle.exit_code()
        if code is not None:
            return SweepOutcome(
                details,
                records,
                f"the engine exited with code {code} during the sweep, at concurrency {point.concurrency}",
            )
        if fired.cut_short:
            details.not_measured = (
                f"the case's time ran out at concurrency {point.concurrency} (timeout_s "
                f"{params.timeout_s}): its unfinished requests are errors, higher ones not run"
            )
            break
    return SweepOutcome(details, records, None)
