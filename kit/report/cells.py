"""Measured values as the text of table cells: one rule for digits, units and status words."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TypeGuard

from kit.measure.throttling import throttling
from kit.reference.claims import Verdict
from kit.reference.expectation import ExpectationVerdict
from kit.report.model import Cell, Tone
from kit.rundir.schema import Metric, Result
from kit.rundir.signing import SignatureCheck
from kit.units import convert, format_value

if TYPE_CHECKING:
    from kit.plan.protocol import Case

STATUS_TONES: dict[str, Tone] = {
    "ok": "good",
    "oom": "warn",
    "unavailable": "muted",
    "skipped": "muted",
    "error": "bad",
    "timeout": "bad",
}
VERDICT_TONES: dict[Verdict, Tone] = {
    "consistent": "good",
    "deviates": "bad",
    "inconclusive": "unsure",  # measured, but too few runs or too wide a spread to decide
    "not measured": "warn",
    "not applicable": "muted",
}
# the verdicts' items: a dict of Verdict keys does not unpack into one of the wider ExpectationVerdict
EXPECTATION_TONES: dict[ExpectationVerdict, Tone] = {
    **dict(VERDICT_TONES.items()),
    "no expectation": "muted",
    "judged in another claim": "muted",
}
SIGNATURE_TONES: dict[str, Tone] = {
    "failed": "bad",
    "intact": "warn",
    "unsigned": "muted",
    "verified": "good",
}  # worst first


def _decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


def mean_std(metric: Metric, unit: str | None = None, runs: bool = True) -> str:
    """`mean ± std` in `unit` (default: the metric's), the std with the mean's decimals; one run's
    value said to be one run's, unless `runs` is False (a cell beside one that says it)."""
    factor = convert(1.0, metric.unit, unit) if unit else 1.0
    if factor is None:
        raise ValueError(f"{metric.unit} does not convert to {unit}")
    mean = format_value(metric.mean * factor)
    if metric.std is None:
        return f"{mean} (1 run)" if runs else mean
    return f"{mean} ± {metric.std * factor:.{_decimals(mean)}f}"


def with_unit(metric: Metric, unit: str, runs: bool = False) -> str:
    """`mean ± std unit`; for one run the value alone, said to be one run's where `runs`."""
    if metric.std is None:
        return f"{format_value(metric.mean)} {unit}" + (" (1 run)" if runs else "")
    return f"{mean_std(metric)} {unit}"


def percent(fraction: float) -> str:
    return f"{format_value(100 * fraction)} %"


def devices_text(case: Case) -> str:
    """What a case ran on: "8 GPUs", "1 GPU (fitted: 1 of 8 GPUs)", "2 CPU processes"."""
    if case.device != "cuda":
        return f"{case.gpus} CPU process{'es' * (case.gpus != 1)}"
    words = f"{case.gpus} GPU{'s' if case.gpus > 1 else ''}"
    return f"{words} ({case.fitted})" if case.fitted else words


def method_label(method: str) -> str:
    """The paper's notation: Naive, Z3+O, QL+Z2."""
    return "Naive" if method == "naive" else "+".join(token.upper() for token in method.split("+"))


def status_cell(result: Result | None, selected: bool, colspan: int = 1) -> Cell:
    if not selected:
        return Cell(text="not run", tone="muted", colspan=colspan)
    if result is None:
        return Cell(text="no result", tone="bad", colspan=colspan)
    return Cell(text=result.status, tone=STATUS_TONES.get(result.status, "plain"), colspan=colspan)


# The figure a throttled GPU lowers first: its cell says so (kit.measure.throttling).
THROUGHPUTS = ("tokens_per_s", "output_throughput", "bus_bandwidth_gb_s")


def throttle_marked(cell: Cell, result: Result) -> Cell:
    """A measured figure's cell, marked, with why under it, where a measured window of its case
    was throttled."""
    found = throttling(result.samples)
    if found is None:
        return cell
    return cell.model_copy(
        update={"tone": "warn", "detail": "; ".join(part for part in (found.short, cell.detail) if part)}
    )


def metric_cell(result: Result, name: str, unit: str | None = None) -> Cell:
    """A metric of a result as `mean ± std` (in `unit`), or the fact that the result lacks it; a
    throughput measured while throttled is marked."""
    metric = result.metrics.get(name)
    if not metric:
        return Cell(text=f"no {name}", tone="muted")
    cell = Cell(text=mean_std(metric, unit))
    return throttle_marked(cell, result) if name in THROUGHPUTS else cell


def has_metrics(result: Result | None, *names: str) -> TypeGuard[Result]:
    """An ok result that carries every metric named."""
    return result is not None and result.status == "ok" and all(result.metrics.get(name) for name in names)


def metric_of(result: Result, name: str) -> Metric:
    """A metric of a result that carries it (has_metrics said so, or its caller's filter)."""
    metric = result.metrics[name]
    if metric is None:
        raise KeyError(f"{result.case_id} has no {name}")
    return metric


def signature_cell(check: SignatureCheck) -> Cell:
    """Who signed a run and whether it verified, red where it fails."""
    return Cell(text=check.summary, tone=SIGNATURE_TONES[check.state])


CAUSE_LIMIT = 160  # characters: a cause is read in a sentence of the summary, the whole text under Deviations
SENTENCE_END = re.compile(r"(?<=[a-z0-9)])\. (?=[A-Z\[])")
KEY_VALUE_DUMP = re.compile(r"\((?:[\w()]+=[^,()]*(?:, )?){2,}\)")  # WorkNCCL(SeqNum=2418, OpType=ALLREDUCE, ...)


def one_line_cause(reason: str) -> str:
    """A failure's recorded reason as one line: its first sentence ("rank 5: RuntimeError: NCCL
    communicator was aborted on rank 5."), never the engine's raw dump after it nor a record's
    fields (WorkNCCL(SeqNum=..., OpType=...) becomes WorkNCCL(…)), cut at
    CAUSE_LIMIT characters; the whole text stays in the case's log and under Deviations."""
    whole = KEY_VALUE_DUMP.sub("(…)", " ".join(reason.split()))
    first = SENTENCE_END.split(whole, maxsplit=1)[0]
    if first != whole and not first.endswith("."):
        first += "."
    return first if len(first) <= CAUSE_LIMIT else first[: CAUSE_LIMIT - 1].rstrip() + "…"
