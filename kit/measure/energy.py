"""Energy per token and mean power per GPU from NVML's raw samples, and the cost of a million
tokens at a GPU-hour price the user gives.

Joules per token: the energy NVML's total-energy counter saw over the measured interval,
summed over the case's GPUs, divided by the tokens of that interval:
- train: the measured steps of every rank (kit/workloads/harness.py samples exactly those);
  the tokens are each rank's tokens per step times its measured steps, summed over ranks.
- serve: the burst, on every GPU the engine runs on (kit/serve/session.py); the tokens are the
  output tokens of the burst's completed requests, those `output_throughput` counts.
- profile: the breakdown's plain measured steps (kit/workloads/step_timeline.py); micro-batch x
  sequence x those steps.
Mean power per GPU: the mean over the case's GPUs of each GPU's mean power over the interval.
Each figure is computed per run and summarised over runs like every other metric. Where a run
has no reading (a CPU case, no NVML, a GPU without the energy counter, a collective, which
produces no tokens) the figures are absent and a note says why: never a zero.

Cost per 1M tokens is rental time, not electricity: the case's GPUs x the price of one
GPU-hour x the hours a million tokens take at the measured throughput.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.plan.protocol import Case
from kit.rundir.breakdown import Breakdown, MarkedBreakdown
from kit.rundir.schema import DeviceTelemetry, Metric, RankSample, RunSample
from kit.rundir.serving import ServeDetails

JOULES_PER_TOKEN = "joules_per_token"
MEAN_POWER_PER_GPU = "mean_power_per_gpu_w"
ENERGY_UNITS = {JOULES_PER_TOKEN: "J/token", MEAN_POWER_PER_GPU: "W"}
ENERGY_LABELS = {JOULES_PER_TOKEN: "joules per token", MEAN_POWER_PER_GPU: "mean power per GPU"}
SECONDS_PER_HOUR = 3600.0
MILLION = 1e6
COST_PER_MILLION_TOKENS = "cost_per_million_tokens"
DEFAULT_CURRENCY = "USD"  # of a price per GPU-hour, where `kit report --currency` names none
PRICE_HINT = "give a price per GPU-hour with `kit report --gpu-hour-price 2.50` (or $KIT_GPU_HOUR_PRICE)"


class NoReading(ValueError):
    """Why a run has no energy figures, in words for the case's notes."""


def train_interval_tokens(rank: RankSample) -> int:
    """The tokens a training rank processed in the measured steps NVML sampled."""
    return rank.tokens_per_step * len(rank.step_s)


def serve_interval_tokens(rank: RankSample) -> int:
    """The output tokens of the burst's completed requests (the driver's aggregates)."""
    details = rank.details_as(ServeDetails)
    aggregates = details.aggregates if details is not None else None
    if aggregates is None:
        raise NoReading("the burst's aggregates are not recorded")
    return aggregates.output_tokens


def profile_interval_tokens(rank: RankSample) -> int:
    """The tokens of a breakdown's plain measured steps (kit/workloads/step_timeline.py samples those)."""
    breakdown = rank.details
    if not isinstance(breakdown, (Breakdown, MarkedBreakdown)):
        raise NoReading("the breakdown's batch and steps are not recorded")
    return breakdown.micro_batch * breakdown.seq_len * len(breakdown.step_ms_per_step)


# Workload kind -> the tokens of the interval a rank's telemetry covers.
INTERVAL_TOKENS = {"train": train_interval_tokens, "serve": serve_interval_tokens, "profile": profile_interval_tokens}


def run_energy(ranks: Sequence[RankSample], interval_tokens) -> tuple[float, float]:
    """(joules per token, mean power per GPU) of one run from its ranks' telemetry. A serving
    driver's telemetry already sums energy over the engine's GPUs and averages their power."""
    readings: list[DeviceTelemetry] = []
    for rank in ranks:
        telemetry = rank.telemetry
        if telemetry is None:
            raise NoReading("a rank recorded no telemetry")
        if telemetry.unavailable:
            raise NoReading(telemetry.unavailable)
        readings.append(telemetry)
    energies = [t.energy_j for t in readings if t.energy_j is not None]
    if len(energies) < len(readings):
        raise NoReading("NVML gave no energy counter reading (a GPU older than Volta, or a driver without it)")
    powers = [t.mean_power_w for t in readings if t.mean_power_w is not None]
    if len(powers) < len(readings):
        raise NoReading("NVML gave no power reading")
    tokens = sum(interval_tokens(rank) for rank in ranks)
    if tokens <= 0:
        raise NoReading("the measured interval produced no tokens")
    energy = sum(energies)
    return energy / tokens, sum(powers) / len(readings)


def per_run_energy(case: Case, runs: Sequence[RunSample]) -> list[tuple[float, float]]:
    """(joules per token, mean power per GPU) of each run; NoReading says why there are none."""
    tokens_of = INTERVAL_TOKENS.get(case.workload)
    if tokens_of is None:
        raise NoReading(f"a {case.workload} case produces no tokens to divide its energy by")
    if case.max_batch_search is not None:
        raise NoReading("a max-batch search's trials differ in micro-batch")
    return [run_energy(run.ranks, tokens_of) for run in runs]


def energy_case_metrics(case: Case, runs: Sequence[RunSample]) -> tuple[dict[str, Metric], list[str]]:
    """Joules per token and mean power per GPU over the case's runs, or a note saying why not."""
    from kit.measure.metrics import (
        summarize,  # kit.measure.metrics joins these figures to every case's
    )

    try:
        per_run = per_run_energy(case, runs)
    except NoReading as reason:
        return {}, [
            f"{ENERGY_LABELS[JOULES_PER_TOKEN]} and {ENERGY_LABELS[MEAN_POWER_PER_GPU]}: not measured, {reason}"
        ]
    found = {
        JOULES_PER_TOKEN: summarize([joules for joules, _ in per_run], ENERGY_UNITS[JOULES_PER_TOKEN]),
        MEAN_POWER_PER_GPU: summarize([watts for _, watts in per_run], ENERGY_UNITS[MEAN_POWER_PER_GPU]),
    }
    return found, []


def cost_per_million_tokens(tokens_per_s: float, gpus: int, gpu_hour_price: float) -> float:
    """What a million tokens cost at the measured throughput on `gpus` GPUs rented at
    `gpu_hour_price` per GPU-hour."""
    if tokens_per_s <= 0:
        raise ValueError("a throughput must be positive to price a token")
    if gpus < 1:
        raise ValueError("a price per GPU-hour needs at least one GPU")
    return gpus * gpu_hour_price * MILLION / tokens_per_s / SECONDS_PER_HOUR


def cost_unit(currency: str) -> str:
    return f"{currency}/1M tokens"


def cost_metric(throughput: Metric, gpus: int, gpu_hour_price: float, currency: str = DEFAULT_CURRENCY) -> Metric:
    """Cost per 1M tokens of each run (from its throughput), in the price's currency, summarised
    like any metric."""
    from kit.measure.metrics import summarize

    costs = [cost_per_million_tokens(value, gpus, gpu_hour_price) for value in throughput.per_run]
    return summarize(costs, cost_unit(currency))
