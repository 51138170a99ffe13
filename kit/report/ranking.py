"""Like with like: which method of a model is the fastest, among methods that do the same work.

Full-parameter training, training over a frozen 4-bit base (Q: its NF4 linears take no weight
gradients) and adapters (LoRA, QLoRA: only the adapters train) do different work per token, so
each kind is ranked apart. A method is the fastest of its kind only where its interval (mean ±
one standard deviation over its runs) clears the next one's; where they overlap, they are tied,
and single runs, which have no spread, cannot tell a tie from a lead. Only cases of one workload (the
same micro-batch, sequence and precision) are set side by side: a step of 16 sequences is not
faster than a step of one in any sense a buyer can quote, and the row says which workload it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from kit.plan.protocol import Case
from kit.report.cells import mean_std, method_label, metric_of
from kit.rundir.schema import Metric, Result
from kit.units import format_value

KINDS = {"full": "full-parameter", "quantized": "4-bit base", "adapter": "adapter"}  # LoRA, QLoRA


def method_kind(case: Case) -> str:
    """The kind of training a case's method does (a key of KINDS)."""
    if case.train is not None and case.train.peft != "none":
        return "adapter"
    return "quantized" if case.train is not None and case.train.quantization != "none" else "full"


def workload(case: Case) -> str | None:
    """What one step of a training case processes, in words ("micro-batch 16 × 350 tokens, bf16");
    None for a case without steps (serving, communication)."""
    step = case.step
    if step is None:
        return None
    return f"micro-batch {step.micro_batch} × {step.seq_len} tokens, {step.dtype}"


def overlap(a: Metric, b: Metric) -> bool:
    """Whether the intervals mean ± std of two figures meet."""
    return a.mean - (a.std or 0) <= b.mean + (b.std or 0) and b.mean - (b.std or 0) <= a.mean + (a.std or 0)


class Standing(NamedTuple):
    """The method with the highest mean of its kind, and how it stands to the others, in words."""

    best: Result
    words: str


def standing(results: Iterable[Result], metric: str, kind: str | None = None, name=None) -> Standing | None:
    """The highest mean of `metric` among `results` (one model, one kind, each valid and ok),
    "fastest" only where its interval clears the next one's; overlapping intervals are a tie, and
    single runs, which have none, only give the highest. `kind` names what they are (default: their
    kind of method), `name` each one (default: its method's letters)."""
    ranked = sorted(results, key=lambda result: metric_of(result, metric).mean, reverse=True)
    if not ranked:
        return None
    best, name = ranked[0], name or (lambda result: method_label(result.case.method))
    kind = kind or KINDS[method_kind(best.case)]
    apart = [result for result in ranked if workload(result.case) != workload(best.case)]
    if apart:  # like with like: the others of its workload, those of another named as not ranked
        within = standing([r for r in ranked if r not in apart], metric, kind, name)
        assert within is not None  # best is of its own workload
        more = f"{len(apart)} of another workload not ranked ({', '.join(name(r) for r in apart[:3])})"
        return Standing(best, f"{within.words}; {more}")
    if len(ranked) == 1:
        return Standing(best, f"the only {kind} measured")
    top, runner = metric_of(best, metric), ranked[1]
    if any(metric_of(result, metric).std is None for result in ranked[:2]):
        return Standing(
            best, f"highest {kind} of single runs; next {name(runner)} {format_value(metric_of(runner, metric).mean)}"
        )
    tied = [result for result in ranked[1:] if overlap(top, metric_of(result, metric))]
    if tied:
        named = ", ".join(f"{name(r)} {mean_std(metric_of(r, metric))}" for r in tied[:2])
        more = f" and {len(tied) - 2} more" if len(tied) > 2 else ""
        return Standing(best, f"{kind}, tied with {named}{more}")
    return Standing(best, f"fastest {kind}; next {name(runner)} {mean_std(metric_of(runner, metric))}")


def by_model_and_kind(results: Iterable[Result]) -> dict[tuple[str | None, str], list[Result]]:
    """Results grouped by model, then by kind of method, in the order they come."""
    groups: dict[tuple[str | None, str], list[Result]] = {}
    for result in results:
        groups.setdefault((result.case.model, method_kind(result.case)), []).append(result)
    return groups
