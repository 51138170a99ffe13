"""Sustained against first minutes (`kit run --soak MINUTES`): one training case and the serving
burst of the plan, each measured on end for that long, in windows whose throughput, SM clock,
temperature and power are kept one by one (kit/measure/soak.py compares the first minute with the
last): what a buyer accepting a new server asks, whether it holds its speed once warm.

A command-line option rather than a profile: how long to soak is the buyer's question of the day,
not a fact of the protocol, and it goes with any profile (its cases are the profile's own).
"""

from __future__ import annotations

import math

from kit.host.this_host import Host
from kit.plan.fit import skip_reason
from kit.plan.protocol import Case, Plan, Soak, unavailable_by_design

STAGE = "soak"
MINUTE_S = 60.0  # windows are at most a minute long: the first and the last minute are windows of their own
WINDOWS_AT_LEAST = 10  # a soak shorter than ten minutes still draws a curve of ten points


def soak_case(case: Case, seconds: float) -> Case:
    """`case` measured for `seconds` on end: one run, its own id (`soak.<model>.<method>.g<N>`)."""
    window_s = min(MINUTE_S, seconds / WINDOWS_AT_LEAST)
    update = {
        "soak": Soak(seconds=seconds, window_s=window_s),
        "runs": 1,
        "timeout_s": case.params.timeout_s + math.ceil(seconds),
    }
    if case.params.kind == "train":
        update["launch"] = "per_run"
    else:
        # its windows are bursts; the sweep, the rate search, shared prefixes and start-up are the serving case's own
        update.update(sweep=None, rates=None, prefix=None, startup=False)
    said = (
        f"{case.id} measured for {seconds / 60:g} min on end (kit run --soak), in windows of {window_s:g} s, each with its "
        "throughput and NVML's SM clock, temperature and power: the first minute against the last"
    )
    return case.model_copy(
        update={
            "id": ".".join([STAGE, *case.id.split(".")[1:]]),
            "stage": STAGE,
            "params": case.params.model_copy(update=update),
            "interpretation": {**case.interpretation, "soak": said},
        }
    )


def soaked(plan: Plan, host: Host, cases: list[Case] | None = None) -> list[Case]:
    """The cases a soak repeats: the first pre-training case the host can run (DeepSpeed, not
    predicted to run out of memory; else the first of the scaling stage), and the first serving
    case it can run; of `cases` (default: the plan's)."""
    runnable = [
        case
        for case in (cases if cases is not None else plan.cases)
        if case.variant is None
        and skip_reason(case, host, skip_predicted_oom=True) is None
        and unavailable_by_design(case) is None
    ]

    def first(stage: str) -> Case | None:
        return next(
            (
                case
                for case in runnable
                if case.stage == stage
                and case.params.kind == "train"
                and case.params.framework == "deepspeed"
                and case.params.max_batch_search is None
            ),
            None,
        )

    training = first("pretrain") or first("scaling")
    serving = next((case for case in runnable if case.params.kind == "serve"), None)
    return [case for case in (training, serving) if case is not None]


def with_soak(plan: Plan, host: Host, minutes: float) -> tuple[Plan, list[Case]]:
    """The plan with its soak cases added at its end, and those cases."""
    added = [soak_case(case, minutes * MINUTE_S) for case in soaked(plan, host)]
    return plan.model_copy(update={"cases": [*plan.cases, *added]}), added
