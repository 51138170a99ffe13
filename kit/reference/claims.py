"""The reference's claims evaluated on measured runs. Each gives one verdict, always with the
measured value next to the published one and the reason:

    consistent      every relation that could be measured holds
    deviates        a relation is outside its published bound (by how much, which way)
    inconclusive    a relation would deviate, but from fewer runs than MIN_RUNS
    not measured    a case or metric the claim needs is not in the run (which ones)
    not applicable  the claim is about other hardware, needs two platforms, or the run is not
                    comparable to the reference (smoke); the measured relation is still shown

A pure function of Results, so tests build runs in memory.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, NamedTuple, TypedDict

from pydantic import BaseModel

from kit.plan.protocol import Case
from kit.reference.measured_run import (
    MeasuredRun,
    parse_case_id,
    platform_mismatch,
    variant_case_id,
    variant_standing_for,
)
from kit.reference.published import (
    SCALING_METRIC,
    CaseMetric,
    Claim,
    OrderingRelation,
    PlatformRatioRelation,
    Published,
    Quantity,
    RatioRelation,
    Reference,
    ScalingEfficiencyRelation,
    ScalingOf,
    ShareRelation,
    ValueRelation,
    _Bounded,
    relation_platforms,
)
from kit.rundir.schema import Metric, Result
from kit.theory.analytic import scaling_efficiency
from kit.units import PERCENT, TIMES, Scale, convert, format_value, metric_label, unit_scale

Verdict = Literal["consistent", "deviates", "inconclusive", "not measured", "not applicable"]
VERDICTS: tuple[Verdict, ...] = ("consistent", "deviates", "inconclusive", "not measured", "not applicable")
MIN_RUNS = 3  # runs of each case a relation reads before it may deviate
SPREAD_FACTOR = 2.0  # a relation's margin, in standard errors of its value


class ReadingOutcome(BaseModel):
    """A relation's verdict under one reading of the paper's sentence."""

    label: str
    published: str
    verdict: Verdict
    finding: str


class RelationOutcome(BaseModel):
    """One relation of a claim, evaluated: the measured value beside the published bound.

    `finding` says what the numbers show (within the bound, how far outside it, or what is
    missing); `caveats` say why they are for information only; `stand_ins` name the cases of a
    non-comparable run that played the claim's cases."""

    relation: str
    verdict: Verdict
    published: str
    measured: str | None = None
    measured_value: float | None = None
    finding: str = ""
    caveats: list[str] = []
    stand_ins: dict[str, str] = {}
    runs: tuple[str, ...] = ()
    readings: list[ReadingOutcome] = []  # where the sentence admits several: the verdict under each
    # What the numbers alone say (consistent, deviates or inconclusive), also where the verdict is
    # not applicable (for information); None where nothing was measured.
    judged: Verdict | None = None


class ClaimOutcome(BaseModel):
    """A claim's verdict over its relations, with the reason in one line."""

    id: str
    statement: str
    source: str
    section: str
    platforms: str
    stages: tuple[str, ...]
    verdict: Verdict
    reason: str
    caveats: list[str] = []
    relations: list[RelationOutcome]
    note: str | None = None
    interpretation: str | None = None


class Reading(NamedTuple):
    """A measured value, or why there is none. `inapplicable`: no run can supply it at all;
    `caveats`: the value (or its absence) says nothing about the claim, it is information only."""

    value: float | None
    unit: str | None = None
    missing: str | None = None
    inapplicable: str | None = None
    caveats: tuple[str, ...] = ()
    stand_in: tuple[str, str] | None = None
    run: str | None = None
    case: str | None = None
    case_used: str | None = None
    result: Result | None = None
    metric: Metric | None = None


class ReadingSource(TypedDict):
    """The fields of a Reading that say where it comes from, whatever it found."""

    caveats: tuple[str, ...]
    stand_in: tuple[str, str] | None
    run: str
    case: str
    case_used: str


def known_value(reading: Reading) -> float:
    """The value of a reading of a relation whose evidence has no gap (`ClaimContext.gather`): a
    reading without one says why, as missing or inapplicable."""
    if reading.value is None:
        raise ValueError(f"a reading without a value: {reading.missing or reading.inapplicable}")
    return reading.value


def stand_in_case(case_id: str, run: MeasuredRun) -> str | None:
    """The run's case that plays `case_id` in a run not comparable to the reference (smoke):
    same stage, method and batch; the stage's only model in place of a model the run lacks; its
    largest GPU count in place of a multi-GPU count it lacks. None when there is no such case."""
    wanted = parse_case_id(case_id)
    peers = {cid: parse_case_id(cid) for cid, result in run.results.items() if result.stage == wanted.stage}
    models = {parts.model for parts in peers.values()}
    if wanted.model in models:
        model = wanted.model
    elif len(models) == 1:
        model = next(iter(models))
    else:
        return None
    candidates = {
        parts.gpus: cid
        for cid, parts in peers.items()
        if (parts.model, parts.method, parts.batch, parts.variant)
        == (model, wanted.method, wanted.batch, wanted.variant)
    }
    if wanted.gpus in candidates:
        return candidates[wanted.gpus]
    multi = [gpus for gpus in candidates if gpus > 1]
    return candidates[max(multi)] if wanted.gpus > 1 and multi else None


def fitted_in_place_of(case_id: str, run: MeasuredRun) -> Result | None:
    """The run's case fitted to fewer GPUs than the protocol's `case_id` (the same cell on this
    host's GPUs; kit.plan.protocol.Case.fitted_from), or None."""
    wanted = parse_case_id(case_id)
    for cid, result in run.results.items():
        written = result.case.fitted_from
        if written is not None and (
            cid == case_id or (written == wanted.gpus and parse_case_id(cid)._replace(gpus=written) == wanted)
        ):
            return result
    return None


class ClaimContext:
    """Finds the run and the case behind each quantity a claim's relations read."""

    def __init__(self, claim: Claim, reference: Reference, runs: Sequence[MeasuredRun]):
        self.claim, self.reference, self.runs = claim, reference, list(runs)

    def platform_label(self, name: str) -> str:
        return self.reference.platforms[name].label

    def run_for(
        self, platforms: Sequence[str], cross_platform: bool
    ) -> tuple[MeasuredRun | None, str | None, str | None]:
        """The first run on one of `platforms` (the reported run when there are none), the
        caveat, and the variant whose cases stand for the platform on that run (None: the cases
        themselves). A run really on the platform comes before one that plays it by a variant.
        A single-platform relation falls back to the reported run for information, with the
        mismatch as its caveat; a cross-platform one needs the real platform."""
        if not platforms:
            return self.runs[0], None, None
        specs = [self.reference.platforms[name] for name in platforms]
        for run in self.runs:
            if any(platform_mismatch(spec, run) is None for spec in specs):
                return run, None, None
        for run in self.runs:
            variant = next((v for v in (variant_standing_for(spec, run) for spec in specs) if v), None)
            if variant is not None:
                return run, None, variant
        if cross_platform:
            return None, " or ".join(platforms), None
        mismatch = platform_mismatch(specs[0], self.runs[0])
        about = " or ".join(self.platform_label(name) for name in platforms)
        return self.runs[0], f"the claim is about {about}; {mismatch}", None

    def gather(self, readings: Sequence[Reading]) -> Evidence:
        """Caveats, stand-ins and gaps of a relation's readings. Two claim cases played by one run
        case would compare a case with itself, so that is a gap too."""
        absent = list(dict.fromkeys(r.inapplicable for r in readings if r.inapplicable))
        missing = [r.missing for r in readings if r.missing]
        plays: dict[tuple, set[str]] = {}
        for r in readings:
            if r.case_used:
                plays.setdefault((r.run, r.case_used), set()).add(r.case)  # type: ignore[arg-type]
        twice = [used for (_, used), cases in plays.items() if len(cases) > 1]
        if twice and not missing:
            missing = [f"a distinct case for each of the claim's cases ({twice[0]} would play two)"]
        return Evidence(
            caveats=list(dict.fromkeys(c for r in readings for c in r.caveats)),
            stand_ins=dict(r.stand_in for r in readings if r.stand_in),
            runs=tuple(dict.fromkeys(r.run for r in readings if r.run)),
            inapplicable=self.needs(absent) if absent else None,
            missing=", ".join(dict.fromkeys(missing)) or None,
        )

    def needs(self, platforms: Sequence[str]) -> str:
        """Why a cross-platform relation cannot be evaluated: the platforms no run is on."""
        return f"needs a run on {' and one on '.join(platforms)}, which no run of this report is on"

    def read(self, case: str, metric: str, platforms: Sequence[str], cross_platform: bool) -> Reading:
        run, platform_caveat, variant = self.run_for(platforms, cross_platform)
        if run is None:
            return Reading(None, inapplicable=platform_caveat)
        caveats = [platform_caveat] if platform_caveat else []
        if not run.comparable_to_reference:
            caveats.append(f"run {run.label} (profile {run.profile}) is not comparable to the reference")
        used, stand_in = variant_case_id(case, variant), None
        if case not in run.results and not run.comparable_to_reference:
            used = stand_in_case(case, run) or case
            stand_in = (case, used) if used != case else None
        found: ReadingSource = {
            "caveats": tuple(caveats),
            "stand_in": stand_in,
            "run": run.label,
            "case": case,
            "case_used": used,
        }
        result = run.results.get(used)
        fitted = fitted_in_place_of(used, run)
        if fitted is not None:  # the host's own figure, never a measure of the paper's GPU count
            return Reading(
                None,
                missing=f"{case} (run {run.label} has it {fitted.case.fitted} as {fitted.case_id}, "
                "never compared with the paper's figure)",
                **found,
            )
        if result is None:
            return Reading(None, missing=f"{case} (not in run {run.label})", **found)
        if result.status != "ok":  # a case this host could not attempt says why ("needs 8 GPUs, host has 4")
            said = (
                f"{result.status}: {result.reason}" if result.status == "skipped" and result.reason else result.status
            )
            return Reading(None, missing=f"{used} ({said})", **found)
        metric_value = result.metrics.get(metric)
        if metric_value is None:
            return Reading(None, missing=f"{metric} of {used}", **found)
        if used in run.invalid:  # a figure past its physical bound is no measurement to judge a claim on
            return Reading(None, missing=f"{used} (invalid: {run.invalid[used][0]})", **found)
        return Reading(metric_value.mean, metric_value.unit, result=result, metric=metric_value, **found)

    def platforms_of(self, relation_platform: str | None, item_platform: str | None = None) -> list[str]:
        if item_platform:
            return [item_platform]
        if relation_platform:
            return [relation_platform]
        return list(self.claim.platform_names)


class Evidence(NamedTuple):
    """What a relation's readings add up to before its bound is checked."""

    caveats: list[str]
    stand_ins: dict[str, str]
    runs: tuple[str, ...]
    inapplicable: str | None
    missing: str | None


DECISIVE_RUN = f"`kit run --all --runs {MIN_RUNS}` runs every case so often"


class Spread(NamedTuple):
    """How far a relation's runs let it be judged: the cases read with fewer than MIN_RUNS runs
    ("1 run of profile.llama2-7b.base.g1"), and the margin of its value (SPREAD_FACTOR standard
    errors; None where a case has a single run, which gives no spread)."""

    short: tuple[str, ...]
    margin: float | None

    @property
    def reason(self) -> str:
        return f"{', '.join(self.short)}; {MIN_RUNS} needed ({DECISIVE_RUN})"


def _runs_text(reading: Reading) -> str:
    runs = reading.metric.n if reading.metric is not None else 1
    return f"{runs} run{'s' * (runs != 1)} of {reading.case_used or reading.case}"


def relative_error(metric: Metric | None) -> float | None:
    """The standard error of a metric's mean over its runs, relative to the mean (None: one run)."""
    if metric is None or metric.n < 2:
        return None
    if not metric.std or not metric.mean:
        return 0.0
    return metric.std / math.sqrt(metric.n) / abs(metric.mean)


def spread_of(
    readings: Sequence[Reading], value: float | None, relative: Sequence[float | None] | None = None
) -> Spread:
    """The spread of a value computed as a product or quotient of the readings' means (relative
    errors add in quadrature): a value of one reading, a ratio, a share, a scaling efficiency.
    `relative` gives the relative errors where they are not the readings' own."""
    short = tuple(dict.fromkeys(_runs_text(r) for r in readings if r.metric is None or r.metric.n < MIN_RUNS))
    errors = list(relative) if relative is not None else [relative_error(r.metric) for r in readings]
    known = [error for error in errors if error is not None]
    if value is None or len(known) < len(errors):
        return Spread(short, None)
    return Spread(short, SPREAD_FACTOR * abs(value) * math.sqrt(sum(error**2 for error in known)))


def median_spread(pairs: Sequence[Sequence[Reading]], median: float | None) -> Spread:
    """The spread of a median of per-case ratios: each case's runs count, and the median of the
    per-case relative errors stands for the median's."""
    readings = [r for pair in pairs for r in pair]
    errors = [spread_of(pair, 1.0).margin for pair in pairs]
    if median is None or not errors or any(error is None for error in errors):
        return spread_of(readings, None)
    relative = statistics.median(errors) / SPREAD_FACTOR  # type: ignore[type-var, operator]
    return spread_of(readings, median, [relative])


def judge(published: Published, value: float, spread: Spread, scale: Scale) -> tuple[Verdict, str]:
    """A value against a published bound, as its runs allow (the module's rule)."""
    inside = published.holds(value)
    margin = f"± {scale.show_difference(spread.margin)}" if spread.margin is not None else None
    if spread.short:
        if inside and spread.margin is not None and published.holds_beyond(value, spread.margin):
            return "consistent", f"within the published bound by more than its runs' spread ({margin})"
        found = "within the published bound" if inside else published.deviation(value, scale)
        if inside and spread.margin is not None:
            found += f", by less than its runs' spread ({margin})"
        return "inconclusive", f"{found}; {spread.reason}"
    if inside:
        return "consistent", "within the published bound"
    if spread.margin is None or published.outside_beyond(value, spread.margin):
        return "deviates", published.deviation(value, scale)
    return (
        "inconclusive",
        f"{published.deviation(value, scale)}, but within its runs' spread ({margin}, {SPREAD_FACTOR:g} standard errors)",
    )


def outcome(
    relation: str,
    published: str,
    evidence: Evidence,
    measured: str | None = None,
    value: float | None = None,
    verdict: Verdict | None = None,
    finding: str = "",
) -> RelationOutcome:
    """The verdict of one relation: not applicable before not measured before the numbers' own
    (`verdict`: consistent, deviates or inconclusive), which a not applicable relation keeps as
    `judged`, for information."""
    common = {
        "relation": relation,
        "published": published,
        "caveats": evidence.caveats,
        "stand_ins": evidence.stand_ins,
        "runs": evidence.runs,
    }
    if evidence.inapplicable:
        return RelationOutcome(verdict="not applicable", finding="", **{**common, "caveats": [evidence.inapplicable]})
    if evidence.missing:
        missing: Verdict = "not applicable" if evidence.caveats else "not measured"
        return RelationOutcome(verdict=missing, finding=f"missing: {evidence.missing}", **common)
    shown: Verdict = "not applicable" if evidence.caveats else verdict  # type: ignore[assignment]
    if evidence.caveats and verdict == "inconclusive":
        finding = f"inconclusive: {finding}"
    return RelationOutcome(
        verdict=shown, measured=measured, measured_value=value, finding=finding, judged=verdict, **common
    )


def bounded(
    relation: str, bound: _Bounded, scale: Scale, evidence: Evidence, value: float | None, spread: Spread
) -> RelationOutcome:
    """A relation whose measured value is checked against its published bound, under every
    reading of the sentence: it holds when one reading holds, deviates only when all do, and is
    inconclusive otherwise (as its runs allow: `judge`)."""
    readings = bound.readings
    shown = " or ".join(
        published.describe(scale) + (f" (read as {label})" if len(readings) > 1 else "")
        for label, published in readings
    )
    if value is None and not (evidence.missing or evidence.inapplicable):
        evidence = evidence._replace(missing="a computable value (a denominator is 0)")
    if value is None or evidence.missing or evidence.inapplicable:
        return outcome(relation, shown, evidence)
    judged = [(label, published, *judge(published, value, spread, scale)) for label, published in readings]
    verdicts = {verdict for _, _, verdict, _ in judged}
    verdict: Verdict = next(v for v in ("consistent", "inconclusive", "deviates") if v in verdicts)
    if len(judged) == 1:
        finding = judged[0][3]
    else:
        finding = "; ".join(f"read as {label}: {text}" for label, _, _, text in judged)
        finding += {
            "consistent": "; consistent under one reading",
            "deviates": "; deviates under every reading",
            "inconclusive": "; inconclusive: no reading holds and not every reading deviates",
        }[verdict]
    result = outcome(relation, shown, evidence, scale.show(value), value, verdict, finding)
    if len(judged) > 1:
        per_reading = [
            ReadingOutcome(
                label=label or "",
                published=published.describe(scale),
                finding=text,
                verdict="not applicable" if result.verdict == "not applicable" else each,
            )
            for label, published, each, text in judged
        ]
        result = result.model_copy(update={"readings": per_reading})
    return result


def _scaling(
    context: ClaimContext, base: str, target: str, platforms: list[str], cross: bool
) -> tuple[float | None, list[Reading]]:
    readings = [context.read(case, SCALING_METRIC, platforms, cross) for case in (base, target)]
    base_reading, target_reading = readings
    if base_reading.value is None or target_reading.value is None or not base_reading.value:
        return None, readings
    gpus = target_reading.result.case.gpus  # type: ignore[union-attr]
    return scaling_efficiency(target_reading.value, base_reading.value, gpus), readings


def _quantity(
    context: ClaimContext, quantity: Quantity, relation_platform: str | None, cross: bool
) -> tuple[float | None, list[Reading], str]:
    platforms = context.platforms_of(relation_platform, quantity.platform)
    where = f" on {quantity.platform}" if quantity.platform else ""
    if isinstance(quantity, ScalingOf):
        value, readings = _scaling(context, quantity.base, quantity.target, platforms, cross)
        return value, readings, f"scaling efficiency of {quantity.target}{where}"
    reading = context.read(quantity.case, quantity.metric, platforms, cross)
    return reading.value, [reading], f"{metric_label(quantity.metric)} of {quantity.case}{where}"


def _evaluate_value(context: ClaimContext, relation: ValueRelation) -> RelationOutcome:
    measure = relation.measure
    text = f"{metric_label(measure.metric)} of {measure.case}"
    platforms = context.platforms_of(relation.platform, measure.platform)
    reading = context.read(measure.case, measure.metric, platforms, False)
    evidence = context.gather([reading])
    value = reading.value
    if value is not None and relation.published.unit is not None:
        value = convert(value, reading.unit or "", relation.published.unit)
        if value is None:
            evidence = evidence._replace(
                missing=f"{measure.metric} in {relation.published.unit} (the run has {reading.unit})"
            )
    return bounded(text, relation, unit_scale(relation.published.unit), evidence, value, spread_of([reading], value))


def _evaluate_ratio(context: ClaimContext, relation: RatioRelation) -> RelationOutcome:
    cross = len(relation_platforms(relation) - {relation.platform}) > 1
    top, top_readings, top_text = _quantity(context, relation.numerator, relation.platform, cross)
    bottom, bottom_readings, bottom_text = _quantity(context, relation.denominator, relation.platform, cross)
    evidence = context.gather(top_readings + bottom_readings)
    ratio = top / bottom if top is not None and bottom else None
    spread = spread_of(top_readings + bottom_readings, ratio)
    return bounded(f"{top_text} / {bottom_text}", relation, TIMES, evidence, ratio, spread)


def _evaluate_scaling(context: ClaimContext, relation: ScalingEfficiencyRelation) -> RelationOutcome:
    text = f"tokens/s of {relation.target} / (N × tokens/s of {relation.base})"
    value, readings = _scaling(context, relation.base, relation.target, context.platforms_of(relation.platform), False)
    return bounded(text, relation, PERCENT, context.gather(readings), value, spread_of(readings, value))


def _evaluate_share(context: ClaimContext, relation: ShareRelation) -> RelationOutcome:
    text = f"{metric_label(relation.part)} / {metric_label(relation.whole)} of {relation.case}"
    platforms = context.platforms_of(relation.platform)
    part, whole = (context.read(relation.case, metric, platforms, False) for metric in (relation.part, relation.whole))
    share = part.value / whole.value if part.value is not None and whole.value else None
    return bounded(text, relation, PERCENT, context.gather([part, whole]), share, spread_of([part, whole], share))


def quantised(case: Case) -> bool:
    """Whether a case's weights are quantised (QLoRA, the paper's Q)."""
    return case.train is not None and case.train.quantization != "none"


def _evaluate_platform_ratio(context: ClaimContext, relation: PlatformRatioRelation) -> RelationOutcome:
    kind = "quantised" if relation.quantised else "non-quantised"
    scope = "the listed cases" if relation.cases else f"every {kind} {relation.stage} case both runs completed"
    text = (
        f"median over {scope} of {metric_label(relation.metric)} on "
        f"{relation.numerator_platform} / on {relation.denominator_platform}"
    )
    published = relation.published.describe(TIMES)
    top_run, top_gap, top_variant = context.run_for([relation.numerator_platform], True)
    bottom_run, bottom_gap, bottom_variant = context.run_for([relation.denominator_platform], True)
    if top_run is None or bottom_run is None:
        return outcome(
            text, published, Evidence([], {}, (), context.needs([g for g in (top_gap, bottom_gap) if g]), None)
        )
    if top_run is bottom_run and top_variant == bottom_variant:
        return outcome(text, published, Evidence([], {}, (), f"both platforms resolve to run {top_run.label}", None))

    def completed(run: MeasuredRun, cid: str) -> bool:
        return cid in run.results and run.results[cid].status == "ok"

    cases = list(
        relation.cases
        or sorted(
            cid
            for cid, result in top_run.results.items()
            if result.stage == relation.stage
            and result.case.variant is None
            and quantised(result.case) == relation.quantised
            and completed(top_run, variant_case_id(cid, top_variant))
            and completed(bottom_run, variant_case_id(cid, bottom_variant))
        )
    )
    ratios, readings, gaps, used, measured_pairs = [], [], [], [], []
    for case in cases:
        pair = [
            context.read(case, relation.metric, [platform], True)
            for platform in (relation.numerator_platform, relation.denominator_platform)
        ]
        readings += pair
        if pair[0].value is None or not pair[1].value:
            gaps += [r.missing for r in pair if r.missing]
            continue
        ratios.append(pair[0].value / pair[1].value)
        used.append(case)
        measured_pairs.append(pair)
    evidence = context.gather(readings)._replace(
        missing=None if ratios else (", ".join(gaps) or f"a {relation.stage} case on both")
    )
    median = statistics.median(ratios) if ratios else None
    result = bounded(text, relation, TIMES, evidence, median, median_spread(measured_pairs, median))
    if ratios:
        spread = (
            f"{len(ratios)} cases, the same case on both: {', '.join(used)}; "
            f"ratios {format_value(min(ratios))} to {format_value(max(ratios))}"
        )
        skipped = f"; missing: {', '.join(gaps)}" if gaps else ""
        result = result.model_copy(update={"finding": f"{result.finding} ({spread}{skipped})"})
    return result


def _evaluate_ordering(context: ClaimContext, relation: OrderingRelation) -> RelationOutcome:
    items = [item for tier in relation.tiers for item in tier]
    metrics = {item.metric for item in items}
    cases = {item.case for item in items}
    cross = len({item.platform for item in items if item.platform}) > 1

    def label(item: CaseMetric) -> str:
        parts = [item.case] if len(cases) > 1 else []
        if len(metrics) > 1:
            parts.append(metric_label(item.metric))
        if item.platform:
            parts.append(f"on {item.platform}")
        return " ".join(parts)

    sign = " > " if relation.direction == "descending" else " < "
    published = sign.join(", ".join(label(item) for item in tier) for tier in relation.tiers)
    subject = metric_label(next(iter(metrics))) if len(metrics) == 1 else "time"
    of_case = f" of {next(iter(cases))}" if len(cases) == 1 else ""
    text = f"{subject}{of_case}, " + ("largest first" if relation.direction == "descending" else "smallest first")
    readings = [
        [
            context.read(item.case, item.metric, context.platforms_of(relation.platform, item.platform), cross)
            for item in tier
        ]
        for tier in relation.tiers
    ]
    evidence = context.gather([r for tier in readings for r in tier])
    if evidence.missing or evidence.inapplicable:
        return outcome(text, published, evidence)
    shown = sign.join(
        ", ".join(f"{label(item)} {format_value(known_value(r))}" for item, r in zip(tier, values))
        for tier, values in zip(relation.tiers, readings)
    )
    spread = spread_of([r for tier in readings for r in tier], None)
    violations, undecided = [], []
    for upper, lower, upper_items, lower_items in zip(readings, readings[1:], relation.tiers, relation.tiers[1:]):
        for a, item_a in zip(upper, upper_items):
            for b, item_b in zip(lower, lower_items):
                a_value, b_value = known_value(a), known_value(b)
                gap = a_value - b_value if relation.direction == "descending" else b_value - a_value
                a_error, b_error = relative_error(a.metric), relative_error(b.metric)
                margin = (
                    None
                    if a_error is None or b_error is None
                    else SPREAD_FACTOR * math.hypot(a_value * a_error, b_value * b_error)
                )
                if gap > 0 and (not spread.short or margin is None or gap > margin):
                    continue  # in order (from a single run: the runs it lacks are said once, below)
                pair = (
                    f"{label(item_a)} ({format_value(a_value)}) is{'' if gap > 0 else ' not'}{sign.rstrip()} "
                    f"{label(item_b)} ({format_value(b_value)})"
                )
                if spread.short:
                    undecided.append(pair if gap <= 0 else f"{pair}, by less than their runs' spread")
                elif margin is None or -gap > margin:
                    violations.append(pair)
                else:
                    undecided.append(f"{pair}, but within their runs' spread ({SPREAD_FACTOR:g} standard errors)")
    # from fewer runs, in order by more than the margin two runs give is consistent; one run gives none
    every = [r for tier in readings for r in tier]
    settled = not undecided and (not spread.short or all(relative_error(r.metric) is not None for r in every))
    verdict: Verdict = "deviates" if violations else ("consistent" if settled else "inconclusive")
    finding = "; ".join(violations + undecided) or "in the published order"
    if spread.short and verdict == "inconclusive":
        finding += f"; {spread.reason}"
    return outcome(text, published, evidence, shown, None, verdict, finding)


EVALUATORS: dict[type, Callable[[ClaimContext, Any], RelationOutcome]] = {
    ValueRelation: _evaluate_value,
    RatioRelation: _evaluate_ratio,
    ScalingEfficiencyRelation: _evaluate_scaling,
    ShareRelation: _evaluate_share,
    PlatformRatioRelation: _evaluate_platform_ratio,
    OrderingRelation: _evaluate_ordering,
}


def claim_verdict(relations: Sequence[RelationOutcome]) -> Verdict:
    """A deviation anywhere decides; else a relation the runs cannot decide makes the claim
    inconclusive; else one consistent relation suffices (the others are listed as not measured or
    not applicable); else the claim is not measured, or not applicable."""
    verdicts = {relation.verdict for relation in relations}
    for verdict in ("deviates", "inconclusive", "consistent", "not measured"):
        if verdict in verdicts:
            return verdict
    return "not applicable"


def _claim_reason(verdict: Verdict, relations: Sequence[RelationOutcome]) -> str:
    counted = verdict_counts(r.verdict for r in relations)
    total = len(relations)
    if verdict == "deviates":
        return f"{counted['deviates']} of {total} relations outside the published bound"
    if verdict == "inconclusive":
        reasons = list(dict.fromkeys(_short_reason(r.finding) for r in relations if r.verdict == "inconclusive"))
        return f"{counted['inconclusive']} of {total} relations inconclusive: " + "; ".join(reasons)
    if verdict == "consistent":
        rest = total - counted["consistent"]
        return f"{counted['consistent']} of {total} relations hold" + (f"; {rest} not evaluated" if rest else "")
    if verdict == "not measured":
        return f"{counted['not measured']} of {total} relations lack a measurement"
    return "; ".join(_claim_caveats(relations))


def _short_reason(finding: str) -> str:
    """Why a relation is inconclusive, in a few words: the runs it lacks, where that is why."""
    needed = f"; {MIN_RUNS} needed"
    if needed in finding:
        return finding[: finding.index(needed)].rsplit("; ", 1)[-1] + needed
    return "outside the bound by less than the runs' spread"


def _claim_caveats(relations: Sequence[RelationOutcome]) -> list[str]:
    return list(dict.fromkeys(c for r in relations for c in r.caveats))


def _without_repeated_stand_ins(relations: list[RelationOutcome]) -> list[RelationOutcome]:
    """In a smoke run one tiny model stands in for 7B, 13B and 70B alike; its figure is shown
    once per claim, not once per model."""
    shown: set[tuple] = set()
    kept = []
    for relation in relations:
        key = (tuple(sorted(set(relation.stand_ins.values()))), relation.measured, relation.finding)
        if relation.stand_ins and key in shown:
            relation = relation.model_copy(
                update={
                    "measured": None,
                    "measured_value": None,
                    "finding": "the same stand-in cases as an earlier relation of this claim",
                }
            )
        shown.add(key)
        kept.append(relation)
    return kept


def evaluate_claim(claim: Claim, reference: Reference, runs: Sequence[MeasuredRun]) -> ClaimOutcome:
    """Evaluate one claim on the runs of a report: the first is the run reported on; the others
    (compared runs) supply the platforms that cross-platform relations need."""
    context = ClaimContext(claim, reference, runs)
    relations = _without_repeated_stand_ins(
        [EVALUATORS[type(relation)](context, relation) for relation in claim.relations]
    )
    verdict = claim_verdict(relations)
    platforms = ", ".join(reference.platforms[n].label for n in claim.platform_names) or "any"
    return ClaimOutcome(
        id=claim.id,
        statement=claim.statement,
        source=claim.source,
        section=claim.section,
        platforms=platforms,
        stages=claim.stages,
        verdict=verdict,
        reason=_claim_reason(verdict, relations),
        relations=relations,
        caveats=_claim_caveats(relations) if verdict == "not applicable" else [],
        note=claim.note,
        interpretation=claim.interpretation,
    )


def evaluate_claims(reference: Reference, runs: Sequence[MeasuredRun]) -> list[ClaimOutcome]:
    if not runs:
        raise ValueError("claims are evaluated on at least one run")
    return [evaluate_claim(claim, reference, runs) for claim in reference.claims]


def verdict_counts(verdicts: Iterable[Verdict]) -> dict[Verdict, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for verdict in verdicts:
        counts[verdict] += 1
    return counts


class TableComparison(BaseModel):
    """A transcribed table value next to the same case measured on the same platform."""

    table: str
    platform: str
    case: str
    metric: str
    published: str
    measured: str | None = None
    ratio: str | None = None
    verdict: Verdict
    detail: str


def evaluate_tables(reference: Reference, runs: Sequence[MeasuredRun]) -> list[TableComparison]:
    """Each table value against the run on its platform: measured / published within tolerance."""
    comparisons = []
    for entry in reference.tables:
        spec = reference.platforms[entry.platform]
        std = f" ± {format_value(entry.std)}" if entry.std is not None else ""
        row = {
            "table": entry.table,
            "platform": spec.label,
            "case": entry.case,
            "metric": entry.metric,
            "published": f"{format_value(entry.mean)}{std} {entry.unit}",
        }
        run = next((r for r in runs if platform_mismatch(spec, r) is None), None)
        if run is None:
            reasons = "; ".join(platform_mismatch(spec, r) or "" for r in runs)
            comparisons.append(TableComparison(**row, verdict="not applicable", detail=reasons))
            continue
        result = run.results.get(entry.case)
        metric = result.metrics.get(entry.metric) if result and result.status == "ok" else None
        if metric is None:
            why = (
                "not in the run"
                if result is None
                else (result.status if result.status != "ok" else f"no {entry.metric}")
            )
            comparisons.append(TableComparison(**row, verdict="not measured", detail=f"{entry.case}: {why}"))
            continue
        published = convert(entry.mean, entry.unit, metric.unit)
        if published is None or published == 0:
            comparisons.append(
                TableComparison(
                    **row, verdict="not measured", detail=f"{entry.unit} does not convert to the measured {metric.unit}"
                )
            )
            continue
        ratio = metric.mean / published
        tolerance = entry.tolerance or reference.table_tolerance
        bound = Published(value=1.0, tolerance=tolerance)
        reading = Reading(metric.mean, metric.unit, run=run.label, case=entry.case, case_used=entry.case, metric=metric)
        verdict, found = judge(bound, ratio, spread_of([reading], ratio), PERCENT)
        detail = (
            found.replace("within the published bound", f"within ± {tolerance:.0%}")
            if bound.holds(ratio)
            else f"{abs(ratio - 1):.0%} {'above' if ratio > 1 else 'below'} the published value, "
            f"outside ± {tolerance:.0%}" + (f"; {found.split('; ', 1)[1]}" if "; " in found else "")
        )
        if not run.comparable_to_reference:
            detail = (
                f"run {run.label} (profile {run.profile}) is not comparable to the reference; for information: {detail}"
            )
            verdict = "not applicable"
        comparisons.append(
            TableComparison(
                **row,
                measured=f"{format_value(metric.mean)} {metric.unit}",
                ratio=f"{format_value(ratio)} ×",
                verdict=verdict,
                detail=detail,
            )
        )
    return comparisons
