"""How long a case will take: from earlier runs of the same case where the run history has them,
else from the analytic model on a GPU, else unknown (and said so).

An estimate is a plan, not a measurement: each says what it rests on, `kit run` corrects the
remaining ones by how the finished cases compared with theirs, and run.json keeps them beside
the real durations.
"""

from __future__ import annotations

import statistics
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kit.files.regular import RUN_FILE_LIMIT, read_json
from kit.plan.recorded_durations import CPU_CASE_SECONDS, RECORDED_ON

if TYPE_CHECKING:  # a CPU case's estimate reads its id alone: `kit list` passes plan-cache views
    from kit.plan.protocol import Case

RUNS_ROOT = Path("runs")  # where run directories go by default, and earlier runs are looked up

# The analytic estimate's assumptions, stated wherever an estimate rests on them. Training: a
# step at 10 % of its roofline bound and 30 s to start a run, as the recorded one-GPU runs went
# (tests/fixtures/gpu_results, H200, and the H100 run of the same kit: 7.5-12 % of the bound at
# micro-batch 1 and 2, 40 % at 16; 15-24 s of imports and model build per run once the model's
# checkpoint was made, 75-98 s for the run that made it). An offloaded case also streams its
# offloaded states through host memory twice a step, at an assumed 50 GB/s. A case the memory
# model says cannot fit costs its start. Serving (no GPU run of the kit's recorded yet): the
# burst at 40 % of its bound, and 120 s of engine start, twice what vLLM's users report for an
# 8B model on one GPU (14-39 s of engine init, about 60 s until it answers: vllm-project/vllm
# issues 11005 and 20264).
ASSUMED_SHARE_OF_BOUND = 0.1
ASSUMED_START_S = 30.0
ASSUMED_HOST_MEMORY_GB_S = 50.0
SERVING_SHARE_OF_BOUND = 0.4
ENGINE_START_S = 120.0


class Estimate(BaseModel):
    seconds: float | None
    basis: str


def independent_runs(case: Case) -> int:
    """The runs a case makes, each its own: a max-batch search is one search (its runs are its trials)."""
    return 1 if getattr(case.params, "max_batch_search", None) else case.params.runs


def run_history(root: Path) -> dict[str, list[float]]:
    """Case id -> how long one of its runs took (result.json's finished - started, over the runs
    it made; a max-batch search is one) in earlier run directories under `root` that finished it
    ok: a run asked for more runs of the case (`kit run --runs N`) takes as many times as long.
    A file that is no result the kit wrote (a list, a string, a case id that is no text) gives no
    history, nor does a span the clock stepped back across (a negative duration is no estimate)."""
    found: dict[str, list[float]] = {}
    for path in sorted(root.glob("*/cases/*/result.json")):
        try:
            result = read_json(path, RUN_FILE_LIMIT)
            if not isinstance(result, dict) or result.get("status") != "ok" or not isinstance(result["case_id"], str):
                continue
            span = datetime.fromisoformat(result["finished_at"]) - datetime.fromisoformat(result["started_at"])
            params = result["case"]["params"]
            runs = 1 if params.get("max_batch_search") else int(params["runs"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a result the kit wrote: no history from it
        if span.total_seconds() >= 0:
            found.setdefault(result["case_id"], []).append(span.total_seconds() / max(runs, 1))
    return found


def _training(case: Case, spec, capacity_bytes: int | None) -> Estimate | None:
    from kit.plan.predictions import predicted_oom, predicted_training_memory, training_step_bound
    from kit.plan.protocol import StepParams

    params = case.params_as(StepParams)
    runs = case.max_batch_search.max_trials if case.max_batch_search else params.runs
    if predicted_oom(case, spec, capacity_bytes):
        return Estimate(
            seconds=runs * ASSUMED_START_S, basis=f"analytic: predicted OOM, {ASSUMED_START_S:.0f} s start per run"
        )
    bound = training_step_bound(case, spec)
    if bound is None:
        return None
    step_s, basis = (
        bound.seconds / ASSUMED_SHARE_OF_BOUND,
        f"at {ASSUMED_SHARE_OF_BOUND:.0%} of the {spec.model} roofline",
    )
    memory = predicted_training_memory(case).memory
    if memory is not None and memory.offloaded_to_host:
        step_s += 2 * memory.offloaded_to_host / (ASSUMED_HOST_MEMORY_GB_S * 1e9)
        basis += f", the offloaded states through host memory twice at {ASSUMED_HOST_MEMORY_GB_S:.0f} GB/s"
    steps = params.warmup_steps + params.measured_steps
    return Estimate(
        seconds=runs * (ASSUMED_START_S + steps * step_s),
        basis=f"analytic: {steps} steps {basis}, {ASSUMED_START_S:.0f} s start per run",
    )


def _analytic(case: Case, gpu_names: list[str], capacity_bytes: int | None) -> Estimate | None:
    if case.device != "cuda":
        return None  # the analytic model is of GPUs
    from kit.plan.predictions import concurrency_bound, device_spec, serving_bounds

    spec = device_spec(case, gpu_names[: case.gpus])
    if spec is None:
        return None
    params = case.params
    if params.kind in ("train", "profile"):
        return _training(case, spec, capacity_bytes)
    if params.kind == "serve":
        bounds = serving_bounds(case, spec)
        if bounds is None:
            return None
        serving_s, what = bounds.burst.seconds, "the burst"
        serving_s /= SERVING_SHARE_OF_BOUND
        if params.sweep is not None:  # a point of N concurrent requests: its requests / N batches of N, or max_point_s
            levels, sweep = params.sweep.levels(params.prompts), params.sweep
            points_s = []
            for n in levels:
                point = concurrency_bound(case, spec, n)
                assert point is not None, "serving_bounds above found the peaks it needs"
                points_s.append(sweep.requests_at(n) / n * point.together.seconds / SERVING_SHARE_OF_BOUND)
            serving_s += sum(min(seconds, sweep.max_point_s or seconds) for seconds in points_s)
            what += f" and the sweep's {len(levels)} points"
        if params.rates is not None:  # its time cap: a search stops starting points after it
            serving_s += params.rates.max_search_s
            what += f", the rate search's {params.rates.max_search_s} s"
        seconds = params.runs * (ENGINE_START_S + serving_s)
        return Estimate(
            seconds=seconds,
            basis=f"analytic: {what} at {SERVING_SHARE_OF_BOUND:.0%} of the "
            f"{spec.model} roofline, {ENGINE_START_S:.0f} s engine start",
        )
    return None


def estimate(
    case: Case,
    history: dict[str, list[float]],
    gpu_names: list[str],
    capacity_bytes: int | None = None,
    predicted_to_fail: str | None = None,
) -> Estimate:
    """`capacity_bytes`: the smallest of the host's GPUs' memory (NVML), where known;
    `predicted_to_fail`: why the fit (kit.plan.fit.predicted_failure) says the case will fail,
    which then costs its start alone."""
    if predicted_to_fail is not None and case.device == "cuda":  # a CPU case's recorded duration says it
        start = ENGINE_START_S if case.workload == "serve" else ASSUMED_START_S
        search = case.max_batch_search
        runs = search.max_trials if search else case.params.runs
        return Estimate(seconds=runs * start, basis=f"{predicted_to_fail}: {start:.0f} s start per run")
    soak = case.soak
    if soak is not None:  # as long as it was asked to last, whatever an earlier soak lasted
        start = ENGINE_START_S if case.workload == "serve" else ASSUMED_START_S
        return Estimate(
            seconds=soak.seconds + start, basis=f"the soak's {soak.seconds:g} s and a start of {start:.0f} s"
        )
    earlier = history.get(case.id)
    if earlier:
        runs = independent_runs(case)
        return Estimate(
            seconds=runs * statistics.median(earlier),
            basis=f"median of {len(earlier)} earlier run(s) of this case" + (f", × {runs} runs" if runs > 1 else ""),
        )
    if case.device == "cpu" and case.id in CPU_CASE_SECONDS:
        return Estimate(seconds=CPU_CASE_SECONDS[case.id], basis=RECORDED_ON)
    return _analytic(case, gpu_names, capacity_bytes) or Estimate(
        seconds=None, basis="unknown: no earlier run, no analytic model here"
    )


def estimates(
    cases: list[Case],
    history_root: Path,
    gpu_names: list[str],
    capacity_bytes: int | None = None,
    predicted_to_fail: dict[str, str] | None = None,
) -> dict[str, Estimate]:
    history, failing = run_history(history_root), predicted_to_fail or {}
    return {case.id: estimate(case, history, gpu_names, capacity_bytes, failing.get(case.id)) for case in cases}


def remaining_seconds(pending: list[str], predicted: dict[str, Estimate], actual: dict[str, float]) -> float | None:
    """What is left, corrected by how long the finished cases took against their estimates."""
    known = [seconds for case_id in pending if (seconds := predicted[case_id].seconds) is not None]
    if not known:
        return None
    done = [(actual[c], seconds) for c in actual if (found := predicted.get(c)) and (seconds := found.seconds)]
    correction = sum(a for a, _ in done) / sum(p for _, p in done) if done else 1.0
    return correction * sum(known)
