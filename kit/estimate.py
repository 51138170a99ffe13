"""How long a case will take: from earlier runs of the same case where the run history has them,
else from the analytic model on a GPU, else unknown (and said so).

An estimate is a plan, not a measurement: each says what it rests on, `kit run` corrects the
remaining ones by how the finished cases compared with theirs, and run.json keeps them beside
the real durations.
"""

from __future__ import annotations

import json
import statistics
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kit.regular_files import RUN_FILE_LIMIT, read_regular

if TYPE_CHECKING:  # a CPU case's estimate reads its id alone: `kit list` passes plan-cache views
    from kit.protocol import Case

RUNS_ROOT = Path("runs")  # where run directories go by default, and earlier runs are looked up

# The analytic estimate's assumptions (the kit's own, not measured; stated wherever an estimate
# rests on them): a step or a burst at 40 % of its roofline bound, and a start per run (imports,
# model build, engine init) of 90 s, or 300 s for a serving engine.
ASSUMED_SHARE_OF_BOUND = 0.4
ASSUMED_START_S = 90.0
ENGINE_START_S = 300.0


class Estimate(BaseModel):
    seconds: float | None
    basis: str


def run_history(root: Path) -> dict[str, list[float]]:
    """Case id -> how long it took (result.json's finished - started) in earlier run directories
    under `root` that finished it ok."""
    found: dict[str, list[float]] = {}
    for path in sorted(root.glob("*/cases/*/result.json")):
        try:
            result = json.loads(read_regular(path, RUN_FILE_LIMIT))
            if result.get("status") != "ok":
                continue
            span = datetime.fromisoformat(result["finished_at"]) - datetime.fromisoformat(result["started_at"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a result the kit wrote: no history from it
        found.setdefault(result["case_id"], []).append(span.total_seconds())
    return found


def _analytic(case: Case, gpu_names: list[str]) -> Estimate | None:
    if case.device != "cuda":
        return None  # the analytic model is of GPUs
    from kit.predictions import device_spec, serving_bounds, training_step_bound

    spec = device_spec(case, gpu_names[: case.gpus])
    if spec is None:
        return None
    params = case.params
    if params.kind in ("train", "profile"):
        bound = training_step_bound(case, spec)
        if bound is None:
            return None
        steps = params.warmup_steps + params.measured_steps
        seconds = params.runs * (ASSUMED_START_S + steps * bound.seconds / ASSUMED_SHARE_OF_BOUND)
        return Estimate(seconds=seconds, basis=f"analytic: {steps} steps at {ASSUMED_SHARE_OF_BOUND:.0%} of the "
                        f"{spec.model} roofline, {ASSUMED_START_S:.0f} s start per run")  # fmt: skip
    if params.kind == "serve":
        bounds = serving_bounds(case, spec)
        if bounds is None:
            return None
        seconds = params.runs * (ENGINE_START_S + bounds.burst.seconds / ASSUMED_SHARE_OF_BOUND)
        return Estimate(seconds=seconds, basis=f"analytic: the burst at {ASSUMED_SHARE_OF_BOUND:.0%} of the "
                        f"{spec.model} roofline, {ENGINE_START_S:.0f} s engine start")  # fmt: skip
    return None


def estimate(case: Case, history: dict[str, list[float]], gpu_names: list[str]) -> Estimate:
    earlier = history.get(case.id)
    if earlier:
        return Estimate(seconds=statistics.median(earlier), basis=f"median of {len(earlier)} earlier run(s) of this case")
    return _analytic(case, gpu_names) or Estimate(seconds=None, basis="unknown: no earlier run, no analytic model here")


def estimates(cases: list[Case], history_root: Path, gpu_names: list[str]) -> dict[str, Estimate]:
    history = run_history(history_root)
    return {case.id: estimate(case, history, gpu_names) for case in cases}


def remaining_seconds(pending: list[str], predicted: dict[str, Estimate], actual: dict[str, float]) -> float | None:
    """What is left, corrected by how long the finished cases took against their estimates."""
    known = [predicted[case_id].seconds for case_id in pending if predicted[case_id].seconds is not None]
    if not known:
        return None
    done = [(actual[c], predicted[c].seconds) for c in actual if predicted.get(c) and predicted[c].seconds]
    correction = sum(a for a, _ in done) / sum(p for _, p in done) if done else 1.0
    return correction * sum(known)


def duration_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"
