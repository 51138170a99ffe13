"""The quantities an acceptance spec can require and a baseline records: which cases' metric each
reads, whether it is counted per GPU, and which way is better. One table, read by the spec, the
baseline and the decision, so that all three mean the same figure by one name."""

from __future__ import annotations

from typing import Literal, NamedTuple

from kit.measure.capacity import CAPACITY_METRIC
from kit.plan.protocol import Case
from kit.rundir.schema import Metric

QuantityName = Literal[
    "training_tokens_per_s",
    "serving_output_tokens_per_s",
    "serving_capacity_tokens_per_s",
    "all_reduce_bus_bandwidth",
    "max_micro_batch",
    "joules_per_token",
]


class Quantity(NamedTuple):
    label: str  # as a decision line names it
    stages: tuple[str, ...]
    metric: str  # the result's metric (kit/measure/)
    per_gpu: bool  # the case's total divided by its GPUs (on CPU: its processes)
    higher_is_better: bool
    method: str | None = None  # only the cases of this method (the collective)
    # A figure of noise, judged on the spec's least number of runs; False for one found by a search
    # (the largest micro-batch that fits is a property of memory, one search finds it)
    sampled: bool = True
    # A figure of the rows held to latency objectives (a sweep's capacity): a baseline's and a run's
    # are alike only where both were held to the same ones
    held_to_objectives: bool = False

    def reads(self, case: Case) -> bool:
        return case.stage in self.stages and (self.method is None or case.method == self.method)

    def unit(self, metric: Metric) -> str:
        return f"{metric.unit}/GPU" if self.per_gpu else metric.unit

    def values(self, case: Case, metric: Metric) -> list[float]:
        """The metric's value of each of the case's runs, per GPU where the quantity is."""
        divisor = case.gpus if self.per_gpu else 1
        return [value / divisor for value in metric.per_run]


QUANTITIES: dict[QuantityName, Quantity] = {
    "training_tokens_per_s": Quantity(
        "training tokens/s per GPU", ("pretrain", "finetune", "scaling"), "tokens_per_s", True, True
    ),
    "serving_output_tokens_per_s": Quantity(
        "serving output tokens/s per GPU (burst)", ("serve",), "output_throughput", True, True
    ),
    "serving_capacity_tokens_per_s": Quantity(
        "serving output tokens/s per GPU within the latency objectives",
        ("serve",),
        CAPACITY_METRIC,
        True,
        True,
        held_to_objectives=True,
    ),
    "all_reduce_bus_bandwidth": Quantity(
        "all-reduce bus bandwidth", ("comm",), "bus_bandwidth_gb_s", False, True, method="all_reduce"
    ),
    "max_micro_batch": Quantity("largest micro-batch", ("maxbatch",), "max_micro_batch", False, True, sampled=False),
    "joules_per_token": Quantity(
        "energy per token", ("pretrain", "finetune", "scaling", "serve"), "joules_per_token", False, False
    ),
}
