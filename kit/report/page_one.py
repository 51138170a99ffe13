"""Page one of the report, for a reviewer who reads one page and must decide: the verdict in three
lines, what the report cannot tell and what to run to learn it (kit/report/verdict.py); who signed
the run (kit.rundir.signing), the host's checks and the kit's provenance as pass, warn or fail, the host
(GPUs, interconnect, driver, images by digest); then the headline figures with their spread: per
model the fastest pre-training method of each kind (full-parameter and on a 4-bit base, ranked
apart; kit/report/ranking.py) and the fastest adapter fine-tuning, each engine's serving (its
burst, and its capacity within the latency objectives), the all-reduce bus bandwidth. Beside each figure: the physical bound the kit's model sets for this
host's GPUs, the paper's value, joules per token and the cost of 1M tokens; each links to its
section and names the case folder of its raw samples. A figure past its bound is shown as
invalid, never as a headline (kit.measure.validity); a legend says what each method letter means."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Collection, Sequence
from typing import NamedTuple

from kit.comm.link_bounds import sweep_bound
from kit.host.fingerprint import Calibration
from kit.measure.calibration import Achievable, achievable_mfu
from kit.measure.comm import sweep_of
from kit.measure.energy import cost_per_million_tokens
from kit.measure.slo import DEFAULT_SLO, Slo, SweepPoint, at_sweep_cap, capacity
from kit.plan.predictions import (
    ServingBounds,
    device_spec,
    serving_bounds,
    training_throughput_bound,
)
from kit.plan.protocol import Case, Protocol, TrainParams
from kit.reference.claims import ClaimOutcome
from kit.reference.expectation import ClaimExpectation, Expecting
from kit.reference.published import Reference, ValueRelation, reference_path
from kit.report.cells import (
    SIGNATURE_TONES,
    STATUS_TONES,
    devices_text,
    has_metrics,
    method_label,
    metric_of,
    percent,
    throttle_marked,
    with_unit,
)
from kit.report.loaded_run import LoadedRun
from kit.report.model import Cell, Fact, PageOne, Row, Section, Table
from kit.report.ranking import KINDS, method_kind, standing, workload
from kit.report.sections.ab import AbSection
from kit.report.sections.appendix import image_section
from kit.report.sections.capacity import Capacities, capacity_figure
from kit.report.sections.common import first_clause
from kit.report.sections.energy import ENERGY_UNIT, cost_cell, energy_cell
from kit.report.sections.environment import fingerprint_facts, peak_figures
from kit.report.sections.health import HEALTH_ANCHOR, HEALTH_TONES, output_checks
from kit.report.sections.host_state import (
    achievable,
    gpu_settings,
    measured_state_fact,
    run_calibration,
)
from kit.report.verdict import (
    cannot_tell,
    checks_fact,
    measured,
    provenance_fact,
    verdict_box,
)
from kit.rundir.schema import Metric, Result
from kit.rundir.serving import ServeDetails
from kit.theory.hardware import load_hardware
from kit.units import format_value, metric_label, unit_scale

# Per model, the fastest case of each kind of method of each training stage.
TRAINING_STAGES = {
    "pretrain": "Pre-training: per model, the fastest of the full-parameter methods and, ranked apart, of those on a 4-bit base",
    "finetune": "Fine-tuning: per model, the fastest of the adapter methods (LoRA, QLoRA)",
}
# Shown in their place when neither measured anything, as on a host of fewer GPUs than their cases
# need: the training a one-GPU host measures is the scaling stage's first count and the breakdown.
FALLBACK_STAGES = {
    "scaling": "Data-parallel scaling: the fastest GPU count per model",
    "profile": "Module breakdown: the fastest profiled step per model",
}
ENERGY_ANCHOR = "energy"  # the section of energy and cost, where the report has one
MOST_IMAGES_LISTED = 3  # on page one; more are counted, and listed in the appendix
COLUMNS = (
    7  # figure, measured, standing, bound, paper, energy, cost: cost where priced, paper where the reference has one
)
PAPER, COST = 4, 6
# The option sets whose letters make a training method's name (protocol.yaml option_sets).
METHOD_LETTERS = "training"


def _per_run(metric: Metric, values: Sequence[float], unit: str) -> Metric:
    """The same runs' spread of a figure derived run by run from `metric`."""
    values = list(values)
    return metric.model_copy(
        update={
            "mean": statistics.fmean(values),
            "std": statistics.stdev(values) if len(values) > 1 else None,
            "per_run": values,
            "unit": unit,
        }
    )


def _note_about(result: Result, *words: str) -> str | None:
    """The first of the result's notes that speaks of any of `words`."""
    return next((note for note in result.notes if any(word in note.casefold() for word in words)), None)


def _devices(result: Result) -> list[str]:
    return [rank.device_name for sample in result.samples for rank in sample.ranks]


def _ratio(measured_value: float, bound: float) -> str:
    return f"{format_value(measured_value / bound)} × bound"


# --- Beside each figure -------------------------------------------------------------------------


def paper_cell(reference: Reference | None, case: Case, metrics: Sequence[str]) -> Cell:
    """The value the reference file records for this case and metric (a transcribed table value
    or a claim's published value), labelled with where and on which platform. A case fitted to
    fewer GPUs than the paper's is not compared with it."""
    if reference is None:
        return Cell(text="not compared", tone="muted")
    if case.fitted:  # the figure's label says it is fitted
        return Cell(text="not compared", tone="muted")
    case_id = case.id
    found = []
    for value in reference.tables:
        if value.case == case_id and value.metric in metrics:
            spread = f" ± {format_value(value.std, trim=True)}" if value.std else ""
            found.append(
                (
                    value.metric,
                    f"{format_value(value.mean, trim=True)}{spread} {value.unit}",
                    f"{value.table}, on {value.platform}",
                )
            )
    for claim in reference.claims:  # the platforms by name: the claims section describes them
        platforms = ", ".join(claim.platform_names) or "any platform"
        for relation in claim.relations:
            if (
                isinstance(relation, ValueRelation)
                and relation.measure.case == case_id
                and relation.measure.metric in metrics
            ):
                published = relation.published.describe(unit_scale(relation.published.unit))
                found.append((relation.measure.metric, published, f"{claim.id}, on {platforms}"))
    if not found:
        return Cell(text="none", tone="muted")
    prefix = len({metric for metric, _, _ in found}) > 1
    return Cell(
        text="; ".join(f"{metric_label(metric)} {text}" if prefix else text for metric, text, _ in found),
        detail="; ".join(dict.fromkeys(where for _, _, where in found)),
    )


def figure_cell(text: str, case: Case, section: str) -> Cell:
    """The figure's name, linked to its section, over the folder of its raw samples in the run
    directory (result.json, runs/<k>/rank-<r>.json), which the raw-data index lists with its digest."""
    return Cell(text=text, detail=f"cases/{case.id}/", tone="strong", link=f"#{section}")


def shown_case_ids(table: Table) -> set[str]:
    """The cases whose figures a headline table shows: each row's figure_cell names its folder."""
    details = (row.cells[0].detail or "" for row in table.rows if not row.heading)
    return {detail.removeprefix("cases/").rstrip("/") for detail in details if detail.startswith("cases/")}


def _across(label: Cell, status: Cell) -> Row:
    return Row(cells=[label, status.model_copy(update={"colspan": COLUMNS - 1})])


def _without_measurement(label: Cell, result: Result | None) -> Row:
    """A figure whose case ended without one: its status and reason across the row."""
    if result is None:
        return _across(label, Cell(text="no result", detail="the run ended before this case finished", tone="bad"))
    return _across(label, Cell(text=result.status, detail=result.reason, tone=STATUS_TONES.get(result.status, "plain")))


def _invalid(label: Cell, reasons: list[str]) -> Row:
    """A figure the kit does not stand behind (kit.measure.validity): why, across the row, unpriced."""
    return _across(label, Cell(text="invalid: not a measurement, not priced", detail="; ".join(reasons), tone="bad"))


# --- The bounds ---------------------------------------------------------------------------------


def headline_bound(result: Result) -> float | None:
    """The physical bound of a case's headline figure on this host's GPUs: the training roofline
    (kit.plan.predictions), the serving roofline its driver recorded, the link's rate."""
    if result.stage == "serve":
        bound = result.metrics.get("output_throughput_bound")
        return bound.mean if bound else None
    if result.stage == "comm":
        found = sweep_bound(sweep_of(result.samples[0]), result.case.device, load_hardware())
        return found.gbps if found.known else None
    return training_throughput_bound(result.case, device_spec(result.case, _devices(result), load_hardware()))


HEADLINE = {"serve": "output_throughput", "comm": "bus_bandwidth_gb_s"}  # else tokens_per_s


def fraction_of_bound(result: Result) -> float | None:
    """A headline figure over its physical bound (None where no bound is known)."""
    bound = headline_bound(result)
    return metric_of(result, HEADLINE.get(result.stage, "tokens_per_s")).mean / bound if bound else None


# --- The headline figures -----------------------------------------------------------------------


def _training_gap(result: Result) -> str:
    """Why the model gives no throughput bound (nor MFU) for a training case."""
    case = result.case
    if case.device != "cuda":
        return "no peak FLOPS is known for a CPU"
    params = case.params_as(TrainParams)
    if params.quantization != "none" or params.peft != "none":
        return "FLOPs model: full training only"
    if params.tensor_parallel > 1:
        return "the bound does not model tensor parallelism"
    return f"no {params.dtype} peak in manifests/hardware.yaml for {', '.join(sorted(set(_devices(result))))}"


def claimed_on_this_host(expecting: Expecting | None, case_id: str, metrics: Sequence[str]) -> list[tuple[str, str]]:
    """Each claim's published figure of this case scaled to this host's GPUs, as (value, the
    measurement against it): "C21 on this host: ...: measured 1.09 × expected, consistent"; the
    claims section says how it was scaled."""
    if expecting is None:
        return []
    return [
        (
            found.expected,
            f"{claim_id} on this host: {found.expected}"
            + (f": {found.versus}, {found.verdict}" if found.versus else ""),
        )
        for claim_id, found in expecting.figure(case_id, metrics)
        if found.expected
    ]


class Pricing(NamedTuple):
    """How page one prices a token: the price per GPU-hour given (or None), its currency, and
    the anchor of the energy section its cells link to ("" where the report has none)."""

    gpu_hour_price: float | None
    currency: str
    energy_anchor: str

    def cells(self, result: Result, throughput: str) -> list[Cell]:
        """Energy and cost of a figure, without "(1 run)": the figure's own cell says how many."""
        link = self.energy_anchor or f"#{result.stage}"
        return [
            energy_cell(result, link, runs=False),
            cost_cell(result, throughput, self.gpu_hour_price, self.currency, link, runs=False),
        ]


def mfu_words(result: Result, calibration: Calibration | None) -> str | None:
    """MFU run by run (of the datasheet peak), and the achieved FLOPS as a share of the matmul the
    preflight measured on this host (or why not); None where there is neither (the bound's cell
    says why there is no MFU)."""
    mfu, tflops, dtype = result.metrics.get("mfu"), result.metrics.get("achieved_tflops"), result.case.params.dtype
    parts = [f"MFU {with_unit(_per_run(mfu, [100 * v for v in mfu.per_run], '%'), '%')}"] if mfu else []
    if calibration is not None and tflops is not None:
        if calibration.matmul_dtype == dtype:
            shares = achievable_mfu(tflops.per_run, result.case.gpus, calibration)
            parts.append(f"preflight {with_unit(_per_run(tflops, [100 * v for v in shares], '%'), '%')}")
        else:
            parts.append(f"preflight: not comparable ({calibration.matmul_dtype} matmul, {dtype} case)")
    return "; ".join(parts) or None


def _bound_cell(measured_value: float, bound: float, reachable: float | None, unit: str, *also: str) -> Cell:
    """The physical bound of a figure, in its unit, and the figure's share of it; where the
    preflight measured the GPUs below their datasheet, two: the roofline at its figures / at the
    datasheet's (the table's note names the figures)."""
    if reachable is None:
        return Cell(text=f"≤ {format_value(bound)} {unit}", detail="; ".join([_ratio(measured_value, bound), *also]))
    shares = f"{format_value(measured_value / reachable)} / {format_value(measured_value / bound)} × bound"
    above = ": above the first" if measured_value > reachable else ""
    return Cell(
        text=f"≤ {format_value(reachable)} / {format_value(bound)} {unit}", detail="; ".join([shares + above, *also])
    )


# MFU and the share of the bound differ on one row: each counts a step's FLOPs its own way.
MFU_AGAINST_BOUND = "MFU counts the model's FLOPs, the bound what the GPUs run"


def preflight_figures(run: LoadedRun) -> str | None:
    """The figures the preflight measured below the datasheet of the host's GPUs, which stand in
    for it in the first of two bounds ("bf16 matmul 250 TFLOPS and memory copy 1.70 TB/s")."""
    calibration = run_calibration(run)
    spec = load_hardware().lookup(calibration.device_names[0]) if calibration and calibration.device == "cuda" else None
    return (Achievable(spec, calibration).which or None) if spec else None


def training_row(
    result: Result,
    ranked: str,
    reference: Reference | None,
    pricing: Pricing,
    expecting: Expecting | None = None,
    calibration: Calibration | None = None,
) -> Row:
    case, throughput = result.case, metric_of(result, "tokens_per_s")
    measured_cell = throttle_marked(
        Cell(text=with_unit(throughput, "tokens/s", runs=True), detail=mfu_words(result, calibration)), result
    )
    spec = device_spec(case, _devices(result), load_hardware())
    bound = training_throughput_bound(case, spec)
    measured_gpu = achievable(result, spec, calibration)
    reachable = training_throughput_bound(case, measured_gpu.spec) if measured_gpu else None
    claimed = claimed_on_this_host(expecting, case.id, ("tokens_per_s",))
    said = [words for _, words in claimed]
    if bound:
        expected = _bound_cell(throughput.mean, bound, reachable, "tokens/s", *said)
    elif claimed:
        expected = Cell(text=claimed[0][0], detail="; ".join([*said, f"no bound: {_training_gap(result)}"]))
    else:
        expected = Cell(text="no bound", detail=_training_gap(result), tone="muted")
    label = figure_cell(f"{case.model} {method_label(case.method)}, {devices_text(case)}", case, result.stage)
    return Row(
        cells=[
            label,
            measured_cell,
            Cell(text=ranked, detail=workload(case)),  # the workload it is ranked within, on the row
            expected,
            paper_cell(reference, case, ("tokens_per_s", "mfu")),
            *pricing.cells(result, "tokens_per_s"),
        ]
    )


def _statuses(results: Sequence[Result | None]) -> str:
    counted = Counter(result.status if result else "no result" for result in results)
    return ", ".join(f"{count} {status}" for status, count in counted.items())


def training_rows(run: LoadedRun, stage: str, reference: Reference | None, pricing: Pricing) -> list[Row]:
    """Per model and kind of method (kit.report.ranking), the case of the stage with the highest
    mean tokens/s, and how it stands to the next; a model and kind without a measurement in one
    line; none where the stage measured nothing (the section's reason then stands for them)."""
    cases = [c for c in run.info.plan.cases if c.stage == stage and c.variant is None and c.id in run.info.selected]
    results = [run.results.get(case.id) for case in cases]
    if not measured(run, [r for r in results if r], "tokens_per_s") and not any(run.invalid.get(c.id) for c in cases):
        return []
    expecting = Expecting(reference, [run.measured]) if reference is not None else None
    rows = []
    for model in dict.fromkeys(case.model for case in cases):
        for kind in KINDS:
            members = [run.results.get(c.id) for c in cases if c.model == model and method_kind(c) == kind]
            if not members:
                continue
            best = standing(measured(run, [r for r in members if r], "tokens_per_s"), "tokens_per_s")
            if best is not None:
                rows.append(training_row(best.best, best.words, reference, pricing, expecting, run_calibration(run)))
                continue
            label = Cell(
                text=f"{model}, {KINDS[kind]}", detail=f"cases/{stage}.{model}.*/", tone="strong", link=f"#{stage}"
            )
            invalid = [reason for r in members if r for reason in run.invalid.get(r.case_id, [])]
            rows.append(
                _invalid(label, invalid)
                if invalid
                else _across(label, Cell(text="no measurement", detail=_statuses(members), tone="bad"))
            )
    return rows


def _burst_bounds(result: Result) -> list[ServingBounds | None]:
    """The roofline each run's driver recorded of its burst; None for a run without one."""
    found = [rank.details_as(ServeDetails) for sample in result.samples for rank in sample.ranks if rank.rank == 0]
    return [
        details.bounds if details is not None and isinstance(details.bounds, ServingBounds) else None
        for details in found
    ]


def serving_reachable(result: Result, calibration: Calibration | None) -> float | None:
    """The burst's bound on output tokens/s at what the preflight measured of the engine's GPUs
    (kit.plan.predictions.serving_bounds with the measured figures where lower); None where nothing
    measured lies below the datasheet."""
    names = [name.strip() for name in _devices(result) for name in name.split(",")]
    measured_gpu = achievable(result, device_spec(result.case, names, load_hardware()), calibration)
    tokens = [bound.output_tokens if bound else None for bound in _burst_bounds(result)]
    if measured_gpu is None or not tokens or None in tokens:
        return None
    found = [serving_bounds(result.case, measured_gpu.spec, count) for count in tokens]
    known = [bound for bound in found if bound is not None]
    if len(known) < len(found):
        return None
    return statistics.fmean(bound.max_output_tokens_per_s for bound in known)


def serving_row(
    run: LoadedRun,
    result: Result,
    ranked: str,
    reference: Reference | None,
    pricing: Pricing,
    points: Sequence[SweepPoint] = (),
) -> Row:
    """The burst's throughput and TTFT, the share of its requests that failed where some did; how
    it stands to the other engines, and the capacity of the case's sweep (`points`) within the
    objectives, with its concurrency."""
    case = result.case
    label = figure_cell(f"{case.model} {case.method}, {devices_text(case)}", case, "serve")
    throughput, median, p99 = (metric_of(result, name) for name in ("output_throughput", "ttft_median_s", "ttft_p99_s"))
    said = [
        "1 run" if throughput.std is None else None,
        f"TTFT median {with_unit(median, 's')}, p99 {with_unit(p99, 's')}",
    ]
    failed = result.metrics.get("error_rate")
    if failed and failed.mean > 0:
        said.append(f"{percent(failed.mean)} failed")
    measured_cell = throttle_marked(
        Cell(text=with_unit(throughput, "tokens/s"), detail="; ".join(filter(None, said))), result
    )
    best = capacity(points)
    unjudged = (
        "no sweep point judged: each was cut short or client-limited" if all(p.not_judged for p in points) else None
    )
    standing_cell = Cell(
        text=ranked,
        detail=(
            f"capacity {capacity_figure(points, best)} (N={best.concurrency}"
            + (", the most tried)" if at_sweep_cap(points, best) else ")")
            if best
            else unjudged or "no sweep point within the objectives"
        )
        if points
        else None,
    )
    bound = headline_bound(result)
    reachable = serving_reachable(result, run_calibration(run)) if bound is not None else None
    if bound is None:
        expected = Cell(text="no bound", detail=_note_about(result, "bound") or "no roofline bound", tone="muted")
    else:  # no TTFT ratio: a burst's queueing against one prompt's prefill says nothing of the GPU
        expected = _bound_cell(throughput.mean, bound, reachable, "tokens/s")
    energy, cost = pricing.cells(result, "output_throughput")
    if best and pricing.gpu_hour_price is not None and case.device == "cuda":
        at_capacity = cost_per_million_tokens(best.figures.output_throughput, case.gpus, pricing.gpu_hour_price)
        cost = cost.model_copy(update={"detail": f"at capacity {format_value(at_capacity)}"})
    return Row(
        cells=[
            label,
            measured_cell,
            standing_cell,
            expected,
            paper_cell(reference, case, ("output_throughput", "ttft_median_s", "ttft_p99_s")),
            energy,
            cost,
        ]
    )


def serving_rows(
    run: LoadedRun, cases: Sequence[Case], reference: Reference | None, pricing: Pricing, capacities: Capacities
) -> list[Row]:
    """Per model, the engine of the highest output throughput and how it stands to the next
    (kit.report.ranking), with the engines that failed named; a model without a valid figure in
    one line; the cases of an engine that did not run, for one reason, in one line (an engine's
    image missing is one fact, not three rows)."""
    rows: list[Row] = []
    unmeasured: dict[tuple[str, str, str], list[Case]] = {}  # by engine, status and reason
    by_model: dict[str | None, list[Case]] = {}
    for case in cases:
        result = run.results.get(case.id)
        if result is not None and result.status in ("skipped", "unavailable"):
            unmeasured.setdefault((case.method, result.status, first_clause(result.reason)), []).append(case)
        else:
            by_model.setdefault(case.model, []).append(case)
    for model, members in by_model.items():
        results = [run.results.get(case.id) for case in members]
        best = standing(
            measured(run, [r for r in results if r], "output_throughput"),
            "output_throughput",
            kind="engine",
            name=lambda r: r.case.method,
        )
        failed = [
            f"{case.method}: "
            + (
                f"invalid: {invalid_in_brief(run.invalid[case.id][0])}"
                if run.invalid.get(case.id)
                else f"{r.status}: {first_clause(r.reason)}"
                if r
                else "no result"
            )
            for case, r in zip(members, results)
            if r is None or r.status != "ok" or run.invalid.get(case.id)
        ]
        if best is not None:
            rows.append(
                serving_row(
                    run,
                    best.best,
                    "; ".join([best.words, *failed]),
                    reference,
                    pricing,
                    capacities.get(best.best.case_id, []),
                )
            )
            continue
        label = Cell(text=f"{model}, every engine", detail=f"cases/serve.{model}.*/", tone="strong", link="#serve")
        rows.append(_across(label, Cell(text="no valid figure, none priced", detail="; ".join(failed), tone="bad")))
    for (engine, status, reason), members in unmeasured.items():
        models = members[0].model if len(members) == 1 else f"{len(members)} models"
        label = Cell(text=f"{engine}, {models}", detail=f"cases/serve.*.{engine}.*/", tone="strong", link="#serve")
        rows.append(_across(label, Cell(text=status, detail=reason, tone=STATUS_TONES.get(status, "plain"))))
    return rows


def comm_row(run: LoadedRun, case: Case, reference: Reference | None) -> Row:
    result = run.results.get(case.id)
    label = figure_cell(f"all-reduce, {devices_text(case)}", case, "comm")
    if run.invalid.get(case.id):
        return _invalid(label, run.invalid[case.id])
    if not has_metrics(result, "bus_bandwidth_gb_s"):
        return _without_measurement(label, result)
    busbw = metric_of(result, "bus_bandwidth_gb_s")
    bound = sweep_bound(sweep_of(result.samples[0]), case.device, load_hardware())
    calibration = run_calibration(run)
    preflight = calibration.all_reduce_busbw if calibration is not None else None
    also = f"; preflight {format_value(preflight.value)} GB/s" if preflight else ""  # how: the Calibration fact
    expected = (
        Cell(
            text=f"≤ {format_value(bound.gbps)} GB/s",
            detail=f"{_ratio(busbw.mean, bound.gbps)} ({(bound.link or '').split(':')[0]}){also}",
        )
        if bound.gbps is not None  # known: a known bound names its link, an unknown one its reason
        else Cell(text="no bound", detail=(bound.reason or "") + also, tone="muted")
    )
    measured_cell = throttle_marked(Cell(text=with_unit(busbw, "GB/s", runs=True)), result)
    return Row(
        cells=[
            label,
            measured_cell,
            Cell(text="bus bandwidth, peak over the sizes"),
            expected,
            paper_cell(reference, case, ("bus_bandwidth_gb_s",)),
            Cell(text="not a token figure", tone="muted", colspan=2),
        ]
    )


def _any_ok(run: LoadedRun, cases: Sequence[Case]) -> bool:
    return any(run.results[c.id].status == "ok" for c in cases if c.id in run.results)


def workload_once(title: str, rows: list[Row]) -> tuple[str, list[Row]]:
    """A group of training rows that share one workload says it once, in its heading; rows of
    several keep it each under its standing (training_row)."""
    workloads = {row.cells[2].detail for row in rows if len(row.cells) > 2}
    if len(workloads) != 1 or None in workloads or len(rows) != len([r for r in rows if len(r.cells) > 2]):
        return title, rows
    said = [
        row.model_copy(
            update={"cells": [*row.cells[:2], row.cells[2].model_copy(update={"detail": None}), *row.cells[3:]]}
        )
        for row in rows
    ]
    return f"{title}; each at {workloads.pop()}", said


def headline_table(
    run: LoadedRun,
    reference: Reference | None,
    sections: Sequence[Section],
    pricing: Pricing,
    capacities: Capacities,
    slo: Slo,
) -> Table:
    selected = [case for case in run.info.plan.cases if case.variant is None and case.id in run.info.selected]
    not_run = {section.anchor: section.not_run for section in sections if section.not_run}
    training = {
        stage: workload_once(title, training_rows(run, stage, reference, pricing))
        for stage, title in TRAINING_STAGES.items()
    }
    if not any(rows for _, rows in training.values()):
        training |= {
            stage: workload_once(title, rows)
            for stage, title in FALLBACK_STAGES.items()
            if (rows := training_rows(run, stage, reference, pricing))
        }
    served = [c for c in selected if c.stage == "serve"]
    reduced = [c for c in selected if c.stage == "comm" and c.method == "all_reduce"]
    groups = {
        **training,  # a group none of whose cases ran ok is one line, its section's reason (below)
        "serve": (
            f"Serving: a burst per engine and model; its capacity, N requests in flight, within {slo.short()}",
            serving_rows(run, served, reference, pricing, capacities) if _any_ok(run, served) else [],
        ),
        "comm": (
            "Communication: all-reduce between the GPUs",
            [comm_row(run, c, reference) for c in reduced] if _any_ok(run, reduced) else [],
        ),
    }
    rows = []
    for anchor, (title, members) in groups.items():
        rows.append(Row(heading=True, cells=[Cell(text=title, tone="strong", link=f"#{anchor}", colspan=COLUMNS)]))
        rows += members or [
            Row(
                cells=[
                    Cell(text=not_run.get(anchor) or "No case of this kind in the run.", tone="muted", colspan=COLUMNS)
                ]
            )
        ]
    price = pricing.gpu_hour_price
    paper_given = any(
        len(row.cells) == COLUMNS and row.cells[PAPER].text not in ("none", "not compared") for row in rows
    )
    table = Table(
        caption="Headline figures: measured on this host, how each stands, its physical bound"
        + (" and the paper's" if paper_given else ""),
        header=[
            "Figure (raw samples)",
            "Measured (mean ± std)",
            "Standing among its kind",
            "Bound on this host",
            "Paper",
            f"Energy ({ENERGY_UNIT})",
            f"{pricing.currency}/1M tokens",
        ],
        widths=[27, 18, 18, 14, 9, 6, 8],
        rows=rows,
        notes=[  # one paragraph: page one has no line to spare
            "Measured: mean ± sample std over the case's runs (under each figure, its raw samples). Standing: the "
            "fastest of its kind only where its interval clears the next one's, else tied. Bound: kit.plan.predictions' "
            "roofline at the GPUs' datasheet peaks (a link's rate), in the unit measured; a figure past it is invalid"
            + (
                f"; two where the preflight measured the GPUs below their datasheet: at its {figures} / at the datasheet's"
                if (figures := preflight_figures(run))
                else ""
            )
            + ". MFU: of the datasheet peak"
            + ("; preflight: of the preflight's matmul. " if run_calibration(run) else ". ")
            + f"{MFU_AGAINST_BOUND}. "
            + (
                f"Paper: the value {reference_path().name} records for the case and metric. "
                if paper_given
                else "Paper: not compared (rendered without --compare reference). "
                if reference is None
                else f"Paper: no value of these cases in {reference_path().name}. "
            )
            + "Energy: NVML's energy counter over the measured interval, all the case's GPUs. Cost: GPUs × price per "
            "GPU-hour × hours per 1M tokens"
            + (
                f", at {format_value(price, trim=True)} {pricing.currency} per GPU-hour."
                if price is not None
                else "; not priced: no price given (`kit report --gpu-hour-price 2.50 --currency USD`)."
            ),
        ],
    )
    for column in [column for column, kept in ((COST, price is not None), (PAPER, paper_given)) if not kept]:
        table = without_column(table, column)
    return table


def without_column(table: Table, column: int) -> Table:
    """The table less one column: its header, the cell of each row there, or one column less of a
    cell that spans it; the other columns share its width."""
    rows = []
    for row in table.rows:
        cells, at = [], 0
        for cell in row.cells:
            start, at = at, at + cell.colspan
            if start <= column < at:
                if cell.colspan == 1:
                    continue
                cell = cell.model_copy(update={"colspan": cell.colspan - 1})
            cells.append(cell)
        rows.append(row.model_copy(update={"cells": cells}))
    kept = [width for index, width in enumerate(table.widths) if index != column]
    return table.model_copy(
        update={
            "rows": rows,
            "widths": [round(100 * width / sum(kept)) for width in kept],
            "header": [label for index, label in enumerate(table.header) if index != column],
        }
    )


def method_legend(run: LoadedRun, protocol: Protocol) -> str:
    """What each letter of the run's training methods means, as protocol.yaml labels it."""
    options = protocol.option_sets.get(METHOD_LETTERS, {})
    letters = dict.fromkeys(
        token
        for case in run.info.plan.cases
        if case.id in run.info.selected
        for token in case.method.split("+")
        if token in options
    )
    said = []
    for token in letters:  # a label's name, before its colon ("Offload: with ZeRO-2 ..."), or the whole
        letter, label = method_label(token), options[token].label
        said.append(label if label.startswith(f"{letter}:") else f"{letter}: {label.split(': ')[0]}")
    return "Methods: " + "; ".join(said) + "." if said else ""


def short_digest(reference: str) -> str:
    """`sha256:` and the digest's first 12 hex digits, as a reader compares them (the full
    reference, its repository included, is in the appendix)."""
    _, _, digest = reference.rpartition("sha256:")
    return f"sha256:{digest[:12]}…" if len(digest) > 12 else reference


def host_facts(run: LoadedRun) -> list[Fact]:
    """Who signed the run, the host's checks and the kit's provenance, the machine as its
    fingerprint describes it, the peaks the kit holds it to, and the images its cases ran in."""
    info = run.info
    facts = [
        Fact(
            label="Run",
            value=f"{info.run_id}, profile {info.profile}, {info.started_at} to "
            f"{info.finished_at or 'not recorded'} (UTC), on {run.hostname}",
        ),
        Fact(label="Signature", value=run.signature.summary, tone=SIGNATURE_TONES[run.signature.state]),
        checks_fact(run),
        provenance_fact(run),
    ]
    fingerprint = run.before.fingerprint
    gpu_names = [gpu.name for gpu in fingerprint.gpus.gpus if gpu.name] if fingerprint else run.measured.gpu_names
    models = sorted(set(gpu_names))
    named = f"{models[0]}: " if len(models) == 1 else ""  # one model is named at the fact's start, not again
    peaks = f"; peaks {peak_figures(models, load_hardware()).removeprefix(named)}" if models else ""
    if fingerprint is None:
        facts.append(
            Fact(label="GPUs", value=f"{run.measured.devices} (run.json; fingerprint {run.before.missing}){peaks}")
        )
    else:
        described = dict(fingerprint_facts(fingerprint, run.hostname))
        settings = gpu_settings(fingerprint)
        facts.append(
            Fact(
                label="GPUs, link" + (", power" if settings else ""),
                value=f"{described['GPUs']}; {described['GPU topology']}; driver, CUDA {described['Driver, CUDA (driver)']}"
                + (f"; {settings}" if settings else "")
                + peaks,
            )
        )
    facts.append(measured_state_fact(run))
    images = image_section(run)
    if images.not_run:
        facts.append(Fact(label="Images", value=images.not_run, tone="muted"))
    else:
        listed = [f"{row.cells[0].text} {short_digest(row.cells[1].text)}" for row in images.tables[0].rows]
        if len(listed) > MOST_IMAGES_LISTED:  # page one has no lines to spare: the appendix lists them
            said = f"{len(listed)} images, each by digest (Appendix, Image digests)"
        else:
            said = "; ".join(listed) + " (full digests: Appendix, Image digests)"
        facts.append(Fact(label="Images", value=said))
    return facts


def invalid_in_brief(reason: str) -> str:
    """Why a figure is invalid, as a line of page one has room for ("1.97 × the roofline bound"; the
    section says the rest)."""
    return (
        first_clause(reason).split(" of its GPUs")[0].split(" (")[0].removeprefix("output ").removeprefix("tokens/s ")
    )


def health_lines(run: LoadedRun) -> list[Fact]:
    """Health and correctness as pass, warn or fail lines: the host's (and each Slurm node's) GPU
    health, the silent-data-corruption check, and the serving cases' output (the Health section
    says each check's observation, threshold and source)."""
    link = f" (#{HEALTH_ANCHOR})"
    fingerprint = run.before.fingerprint
    health = fingerprint.health if fingerprint else None
    unhealthy_nodes = [
        f"node {node}: {found.unhealthy_because}"
        for node, loaded in sorted(run.nodes.items())
        if loaded.fingerprint and (found := loaded.fingerprint.health) and found.verdict == "unhealthy"
    ]
    if health is None:  # a fingerprint of a kit before the health gate: one line says both are unknown
        said = "warn: not recorded (no health section in the fingerprint: GPU health and silent data corruption)"
        return [Fact(label="Health", value=said, tone="warn"), *serving_output_lines(run)]
    elif health.verdict == "unhealthy" or unhealthy_nodes:
        because = [health.unhealthy_because] if health.unhealthy_because else []
        host = Fact(label="Health", value=f"fail: unhealthy: {'; '.join(because + unhealthy_nodes)}", tone="bad")
    elif health.verdict == "warnings":
        names = ", ".join(sorted({check.name for check in health.warnings}))
        host = Fact(label="Health", value=f"warn: {len(health.warnings)} warning(s): {names}{link}", tone="warn")
    elif health.verdict == "not_applicable":
        host = Fact(label="Health", value=f"not applicable: {health.not_applicable}", tone="muted")
    elif health.verdict == "unknown":
        host = Fact(label="Health", value="warn: no health reading could be taken", tone="warn")
    else:
        host = Fact(label="Health", value=f"pass: {len(health.checks)} checks of {health.catalog}", tone="good")
    corruption = health.silent_data_corruption if health else None
    facts = [
        host,
        Fact(label="Silent data corruption", value="not checked (no preflight ran it)", tone="muted")
        if corruption is None
        else Fact(
            label="Silent data corruption",
            value=f"{corruption.status}: {corruption.summary}",
            tone=HEALTH_TONES[corruption.status],
        ),
    ]
    return [*facts, *serving_output_lines(run)]


def serving_output_lines(run: LoadedRun) -> list[Fact]:
    """The serving cases' output checked against transformers': a line where a serve case made one."""
    checks = output_checks(run)
    if not checks:
        return []
    wrong = [case for case, found in checks.items() if any(check.status == "fail" for check in found)]
    checked = [case for case, found in checks.items() if any(check.status == "pass" for check in found)]
    if wrong:
        value, tone = f"fail: output wrong in {', '.join(sorted(wrong))}; their figures are invalid", "bad"
    elif checked:
        value, tone = f"pass: {len(checked)} of {len(checks)} serving cases' greedy output equals transformers'", "good"
    else:
        value, tone = "not checked (see the Health and correctness section)", "muted"
    return [Fact(label="Serving output", value=value, tone=tone)]


def page_one(
    run: LoadedRun,
    reference: Reference | None,
    sections: Sequence[Section],
    protocol: Protocol,
    *,
    outcomes: Sequence[ClaimOutcome] | None = None,
    expectations: Sequence[ClaimExpectation] = (),
    gpu_hour_price: float | None = None,
    currency: str = "USD",
    capacities: Capacities | None = None,
    slo: Slo = DEFAULT_SLO,
    comparisons: Sequence[AbSection] = (),
) -> PageOne:
    """Page one of the report of `run`; `sections` are the report's, whose anchors its figures link to;
    `capacities` the serve cases' sweeps held to `slo` (kit.report.sections.capacity); `comparisons`
    the runs it is compared with (A/B), each said in a line of the verdict, linked to its section."""
    anchors: Collection[str] = {section.anchor for section in sections}
    pricing = Pricing(gpu_hour_price, currency, f"#{ENERGY_ANCHOR}" if ENERGY_ANCHOR in anchors else "")
    table = headline_table(run, reference, sections, pricing, capacities or {}, slo)
    shown = shown_case_ids(table)  # the range the verdict gives is that of the figures on the page
    headline = [result for case_id in run.info.selected if case_id in shown and (result := run.results.get(case_id))]
    fractions = [
        found
        for result in measured(run, headline, "tokens_per_s")
        + measured(run, headline, "output_throughput")
        + measured(run, [r for r in headline if r.stage == "comm"], "bus_bandwidth_gb_s")
        if (found := fraction_of_bound(result)) is not None
    ]
    return PageOne(
        verdict=verdict_box(run, outcomes, expectations, fractions)
        + [Fact(label="A/B", value=comparison.summary, tone="strong") for comparison in comparisons],
        cannot_tell=cannot_tell(run),
        host=[*health_lines(run), *host_facts(run)],
        headline=table,
        legend=method_legend(run, protocol),
    )
