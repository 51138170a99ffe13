"""What each claim should show on this host's own GPUs, beside the paper's value and the measured one.

A claim is judged against the paper only on the paper's platforms, so a host of other GPUs
would learn nothing from most claims. For every relation of every claim this module gives the
value the kit expects on the reported run's GPUs, with its basis in words, and, where the host
is not the claim's platform, a verdict against that expectation ("measured 0.93 × expected"),
labelled as such so that it is never counted as agreement with the paper:

- a relation within one platform (a ratio of two configurations, a scaling efficiency, a share,
  an ordering) expects the paper's value on the paper's platform most like this host's GPUs,
  taken from this claim or from the same relation in another claim, assumed to carry over;
- an absolute figure, or a ratio of two platforms, scales the paper's number by this host's GPU
  against that platform's GPU in manifests/hardware.yaml: the dense bf16 peak for training, the
  memory bandwidth for serving, the link bandwidth for communication; this host's matmul and
  memory copy as the preflight measured them where they are below its datasheet (kit.measure.calibration);
- a relation between the same GPUs with and without NVLink is measured on this host by its
  NVLink cases against their p2p-off variants, as the paper's RTX3090 pair.

One measured quantity is judged once: where several claims state the same relation of one
platform for different platforms (C1-C3, a scaling efficiency on A800, RTX4090 and RTX3090), the
claim whose platform this host is judges it (its paper verdict), else the first of them against
the expectation, with that expectation's own tolerance; the others say they were judged there.

The expected relation is evaluated by kit.reference.published's own evaluators on the reported run alone,
so a verdict against the expectation reads its cases exactly as a paper verdict does.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel

from kit.measure.calibration import Achievable
from kit.reference.claims import EVALUATORS, ClaimContext, Reading, RelationOutcome, judge, median_spread, quantised
from kit.reference.measured_run import MeasuredRun, platform_mismatch
from kit.reference.published import (
    Claim,
    OrderingRelation,
    PlatformRatioRelation,
    Published,
    RatioRelation,
    Reference,
    Relation,
    ScalingEfficiencyRelation,
    ShareRelation,
    ValueRelation,
    relation_platforms,
)
from kit.theory.hardware import GpuSpec, HardwareTable, load_hardware
from kit.units import TIMES, convert, format_value, metric_label

# "paper verdict": the host is the claim's platform (or the claim is about any GPU), so the
# claim's own verdict is the judgement and the expectation is shown for information.
# "judged in another claim": the same quantity is judged once, by the claim `judged_in` names.
ExpectationVerdict = Literal[
    "consistent",
    "deviates",
    "inconclusive",
    "not measured",
    "judged in another claim",
    "no expectation",
    "not applicable",
    "paper verdict",
]
PRECEDENCE: tuple[ExpectationVerdict, ...] = (
    "deviates",
    "inconclusive",
    "consistent",
    "not measured",
    "judged in another claim",
    "no expectation",
    "not applicable",
)

# The GPU figure a stage's throughput follows, for scaling a published number to this host.
FIGURES = {
    "serve": ("memory_bandwidth_tb_per_s", "memory bandwidth", "TB/s"),
    "comm": ("interconnect_bidirectional_gb_per_s", "link bandwidth", "GB/s"),
}
COMPUTE = ("bf16_dense_tflops", "dense bf16 peak", "TFLOPS")
THROUGHPUTS = {"tokens_per_s", "output_throughput", "bus_bandwidth_gb_s", "achieved_tflops"}

KIND_WORDS = {
    RatioRelation: "a ratio of two configurations on the same GPUs",
    ScalingEfficiencyRelation: "a scaling efficiency of the same GPUs",
    ShareRelation: "a share of one step on the same GPUs",
    OrderingRelation: "an ordering of configurations on the same GPUs",
    ValueRelation: "a figure of one configuration",
}


class RelationExpectation(BaseModel):
    """One relation's expected value on this host, its basis, and the verdict against it."""

    expected: str | None = None
    basis: str
    verdict: ExpectationVerdict
    measured: str | None = None
    versus: str | None = None  # "measured 0.980 × expected"
    finding: str = ""
    judged_in: str | None = None  # the claim that judges this quantity, where another does


class ClaimExpectation(BaseModel):
    """A claim's verdict against the expectation over its relations ("paper verdict": none of
    its relations is judged against an expectation, the claim's own verdict stands)."""

    id: str
    verdict: ExpectationVerdict
    relations: list[RelationExpectation]

    @property
    def judged(self) -> bool:
        return self.verdict != "paper verdict"


class ReportedGpu(BaseModel):
    """The reported run's GPU model as hardware.yaml knows it (spec None: not listed)."""

    name: str | None
    key: str | None = None
    spec: GpuSpec | None = None

    @property
    def model(self) -> str:
        return self.spec.model if self.spec else (self.name or "no GPU")


def host_of(run: MeasuredRun, hardware: HardwareTable) -> ReportedGpu:
    """The run's GPU model with its hardware.yaml entry where it has one. Where a run mixes models,
    the one a synchronous step waits for: one not in hardware.yaml (nothing to scale by, so no
    expectation is made up), else the lowest dense bf16 peak; the basis names it."""
    if not run.gpu_names:
        return ReportedGpu(name=None)

    def speed(name: str) -> tuple[bool, float]:
        spec = hardware.lookup(name)
        return spec is not None, (spec.bf16_dense_tflops.value or 0.0) if spec else 0.0

    name = min(dict.fromkeys(run.gpu_names), key=speed)
    spec = hardware.lookup(name)
    key = next((key for key, entry in hardware.gpus.items() if entry is spec), None)
    return ReportedGpu(name=name, key=key, spec=spec)


def _memory_gb(spec: GpuSpec) -> float | None:
    value = spec.memory.value
    return None if value is None else value * (2**30 / 1e9 if spec.memory.unit == "GiB" else 1.0)


def unlikeness(a: GpuSpec, b: GpuSpec) -> float:
    """How far apart two GPUs are: the sum of the log ratios of their compute peak, memory
    bandwidth and memory size (0: alike), over the figures both have."""
    pairs = [
        (a.bf16_dense_tflops.value, b.bf16_dense_tflops.value),
        (a.memory_bandwidth_tb_per_s.value, b.memory_bandwidth_tb_per_s.value),
        (_memory_gb(a), _memory_gb(b)),
    ]
    return sum(abs(math.log(x / y)) for x, y in pairs if x and y)


def _platform_gpu(reference: Reference, hardware: HardwareTable, platform: str) -> GpuSpec:
    return hardware.gpus[reference.platforms[platform].gpus[0]]


def most_like(host: ReportedGpu, platforms: Sequence[str], reference: Reference, hardware: HardwareTable) -> str:
    """The platform whose GPU is most like the host's; the first when the host's is not listed."""
    if host.spec is None:
        return platforms[0]
    return min(platforms, key=lambda name: unlikeness(host.spec, _platform_gpu(reference, hardware, name)))  # type: ignore[arg-type]


def scope(claim: Claim, relation: Relation) -> list[str]:
    """The platforms a relation within one platform is about (empty: any GPU)."""
    named = getattr(relation, "platform", None)
    return [named] if named else list(claim.platform_names)


def crosses_platforms(relation: Relation) -> bool:
    return (
        isinstance(relation, PlatformRatioRelation)
        or len(relation_platforms(relation) - {getattr(relation, "platform", None)}) > 1
    )


def signature(relation: Relation) -> tuple:
    """What a relation measures, whatever its platform, bound or (for an ordering) order: the
    same relation made of several platforms in several claims (C1-C3, C22, C24) shares it."""
    if isinstance(relation, OrderingRelation):
        items = frozenset((item.case, item.metric, item.platform) for tier in relation.tiers for item in tier)
        return ("ordering", relation.direction, items)
    return (
        type(relation).__name__,
        relation.model_dump_json(exclude={"platform", "published", "reading", "other_readings"}),
    )


def _scaled(bound: Published, factor: float) -> Published:
    """A bound with every number multiplied by a positive factor (a relative tolerance kept)."""
    values = {key: getattr(bound, key) for key in ("value", "tolerance", "at_least", "at_most")}
    update = {key: value * factor for key, value in values.items() if value is not None}
    if bound.between is not None:
        update["between"] = (bound.between[0] * factor, bound.between[1] * factor)
    return bound.model_copy(update=update)


def centre(bound: Published) -> float:
    """The number a measured value is divided by for "measured 0.93 × expected"."""
    if bound.value is not None:
        return bound.value
    if bound.between is not None:
        return sum(bound.between) / 2
    return bound.at_least if bound.at_least is not None else bound.at_most  # type: ignore[return-value]


def metric_sign(metric: str) -> int:
    """+1 for a throughput (faster GPUs give more), -1 for a time (less), 0 for the rest
    (memory, shares), which a faster GPU leaves as it is."""
    if metric in THROUGHPUTS:
        return 1
    return -1 if metric.endswith("_s") else 0


class GpuRatio(BaseModel):
    """This host's GPU against a platform's on the figure a stage follows."""

    factor: float
    basis: str


def gpu_ratio(
    host: ReportedGpu, platform_gpu: GpuSpec, stage: str, measured: Achievable | None = None
) -> GpuRatio | str:
    """The ratio, or why there is none. This host's figure is what the preflight measured where
    that is below its datasheet (`measured`), and the basis says so; the platform's is its
    datasheet's, so such a ratio expects less of this host than the datasheets would."""
    attribute, words, unit = FIGURES.get(stage, COMPUTE)
    if host.spec is None:
        return f"{host.name} is not in manifests/hardware.yaml: no peak figures to scale by"
    spec = measured.spec if measured is not None else host.spec
    mine, theirs = getattr(spec, attribute).value, getattr(platform_gpu, attribute).value
    if not mine or not theirs:
        lacking = host.spec.model if not mine else platform_gpu.model
        return f"manifests/hardware.yaml gives no {words} for {lacking}"
    replaced = measured.replaced.get(attribute) if measured is not None else None
    return GpuRatio(
        factor=mine / theirs,
        basis=f"{host.spec.model}/{platform_gpu.model} {words} {format_value(mine) if replaced else f'{mine:g}'}/{theirs:g} {unit}"
        + (" (this host's measured in preflight, below its datasheet's)" if replaced else ""),
    )


def _judge(claim: Claim, reference: Reference, run: MeasuredRun, relation: Relation) -> RelationOutcome:
    """The relation evaluated on the reported run alone, as if the claim were about any GPU."""
    anywhere = claim.model_copy(update={"platforms": "any"})
    return EVALUATORS[type(relation)](ClaimContext(anywhere, reference, [run]), relation)


def _against(
    judged: RelationOutcome, bound: Published | None, basis: str, word: str = "expected"
) -> RelationExpectation:
    """A judged relation as a verdict against the expectation, with "measured r × expected"
    (the evaluator's word for the bound, "published", said as what the bound is here)."""
    finding, versus = judged.finding.replace("published", word), None
    if judged.measured_value is not None and bound is not None and centre(bound):
        versus = f"measured {format_value(judged.measured_value / centre(bound))} × {word}"
        finding = f"{versus}; {finding}"
    verdict: ExpectationVerdict = judged.verdict
    if verdict == "not applicable":
        finding = "; ".join(judged.caveats) + (f"; for information: {finding}" if finding else "")
    return RelationExpectation(
        expected=judged.published,
        basis=basis,
        verdict=verdict,
        measured=judged.measured,
        versus=versus,
        finding=finding,
    )


def _paper(judged: RelationOutcome, bound: Published | None, basis: str) -> RelationExpectation:
    """Where the paper's own verdict judges the relation: the expectation is shown, not counted."""
    return _against(judged, bound, basis, "published").model_copy(update={"verdict": "paper verdict"})


class Expecting:
    """Works out each relation's expectation for the reported run (runs[0]); the other runs of
    the report may supply a platform a ratio of two platforms divides by."""

    def __init__(self, reference: Reference, runs: Sequence[MeasuredRun], hardware: HardwareTable | None = None):
        self.reference, self.runs = reference, list(runs)
        self.hardware = hardware or load_hardware()
        self.run = self.runs[0]
        self.host = host_of(self.run, self.hardware)
        # What the preflight measured of this host's GPUs, where it is below their datasheet.
        self.measured = (
            Achievable(self.host.spec, self.run.calibration) if self.host.spec and self.run.calibration else None
        )
        # Every relation of one platform, by what it measures: where a relation looks for the
        # same one on the platform most like this host.
        self.one_platform: dict[tuple, list[tuple[str, Relation, str]]] = {}
        for source in reference.claims:
            for other in source.relations:
                if not crosses_platforms(other):
                    found = self.one_platform.setdefault(signature(other), [])
                    found += [(name, other, source.id) for name in scope(source, other)]

    def label(self, platform: str) -> str:
        return self.reference.platforms[platform].label

    def on(self, platform: str) -> bool:
        return platform_mismatch(self.reference.platforms[platform], self.run) is None

    def claim(self, claim: Claim) -> ClaimExpectation:
        relations = [self.relation(claim, relation) for relation in claim.relations]
        verdicts = {r.verdict for r in relations}
        verdict = next((v for v in PRECEDENCE if v in verdicts), "paper verdict")
        return ClaimExpectation(id=claim.id, verdict=verdict, relations=relations)

    def figure(self, case_id: str, metrics: Sequence[str]) -> list[tuple[str, RelationExpectation]]:
        """The claims' published figures of this case and metric (C21's tokens/s), each as expected
        on this host, by claim id: what page one sets beside a headline figure."""
        return [
            (claim.id, self.relation(claim, relation))
            for claim in self.reference.claims
            for relation in claim.relations
            if isinstance(relation, ValueRelation)
            and relation.measure.case == case_id
            and relation.measure.metric in metrics
        ]

    def relation(self, claim: Claim, relation: Relation) -> RelationExpectation:
        if not self.run.gpu_names:
            return RelationExpectation(
                basis=f"run {self.run.label} has {self.run.devices}: no GPU to expect of, so "
                "the paper's verdict stands alone",
                verdict="paper verdict",
            )
        if not crosses_platforms(relation):
            return self.within(claim, relation)
        if any(self.on(name) for name in relation_platforms(relation)):
            judged = _judge(claim, self.reference, self.run, relation)
            return RelationExpectation(
                expected=judged.published,
                verdict="paper verdict",
                basis="this host is one of the claim's platforms: the paper's value itself",
            )
        if len({self.reference.platforms[name].gpus for name in relation_platforms(relation)}) == 1:
            return self.nvlink_pair(claim, relation)
        if isinstance(relation, PlatformRatioRelation):
            return self.platform_ratio(claim, relation)
        return RelationExpectation(
            verdict="no expectation",
            basis=f"relates {' and '.join(sorted(relation_platforms(relation)))}, two GPU models this host "
            f"({self.host.model}) is neither of, and the reference transcribes no value of either to hold it against",
        )

    # --- One platform ------------------------------------------------------------------------

    def within(self, claim: Claim, relation: Relation) -> RelationExpectation:
        platforms = scope(claim, relation)
        if not platforms:
            judged = _judge(claim, self.reference, self.run, relation)
            basis = (
                f"the paper's value, which the claim makes of any GPU: {KIND_WORDS.get(type(relation), 'a figure')}, "
                f"expected to carry over to {self.host.model}"
            )
            return _paper(judged, _bound_of(relation), basis)
        if any(self.on(name) for name in platforms):
            judged = _judge(claim, self.reference, self.run, relation)
            basis = f"this host is the claim's platform ({self.label(next(n for n in platforms if self.on(n)))}): the paper's value itself"
            return _paper(judged, _bound_of(relation), basis)
        if isinstance(relation, ValueRelation):
            return self.absolute(claim, relation, platforms)
        candidates = self.one_platform[signature(relation)]
        platform = most_like(self.host, [name for name, _, _ in candidates], self.reference, self.hardware)
        _, model, source = next(c for c in candidates if c[0] == platform)
        expected = model.model_copy(update={"platform": None})  # its bound, its tolerance: one expectation
        judged = _judge(claim, self.reference, self.run, expected)
        where = self.label(platform) + (f", from {source}" if source != claim.id else "")
        basis = (
            f"the paper's value on {where}, {KIND_WORDS[type(relation)]}, assumed to carry over; "
            f"{self._likeness({name for name, _, _ in candidates})}"
        )
        found = _against(judged, _bound_of(expected), basis)
        owner = self.judge_of(candidates)
        if owner == claim.id:
            return found
        return found.model_copy(
            update={
                "verdict": "judged in another claim",
                "judged_in": owner,
                "finding": f"{owner}: the same measurement, judged there once",
            }
        )

    def judge_of(self, candidates: Sequence[tuple[str, Relation, str]]) -> str:
        """The claim that judges a quantity several claims state: the one on this host's platform
        (its paper verdict), else the first in the reference's order."""
        return next((source for name, _, source in candidates if self.on(name)), candidates[0][2])

    def _likeness(self, platforms: set[str]) -> str:
        """Why the platform was taken."""
        if len(platforms) == 1:
            return "the only platform the paper gives it on"
        if self.host.spec is None:
            return f"{self.host.name} is not in manifests/hardware.yaml, so the claim's own platform is taken"
        return f"of {', '.join(sorted(platforms))}, the one most like {self.host.model} (dense bf16 peak, memory bandwidth and size)"

    def absolute(self, claim: Claim, relation: ValueRelation, platforms: list[str]) -> RelationExpectation:
        platform = most_like(self.host, platforms, self.reference, self.hardware)
        measure = relation.measure
        sign = metric_sign(measure.metric)
        ratio = gpu_ratio(
            self.host, _platform_gpu(self.reference, self.hardware, platform), measure.case.split(".")[0], self.measured
        )
        if isinstance(ratio, str):
            return RelationExpectation(
                basis=f"the paper's value on {self.label(platform)} cannot be scaled: {ratio}", verdict="no expectation"
            )
        bound = _scaled(relation.published, ratio.factor**sign)
        scaled = {
            1: f"× {ratio.basis}",
            -1: f"÷ {ratio.basis}",
            0: f"not scaled ({metric_label(measure.metric)} does not follow the GPU's speed)",
        }
        basis = f"the paper's value on {self.label(platform)} {scaled[sign]}"
        expected = relation.model_copy(
            update={"platform": None, "published": bound, "measure": measure.model_copy(update={"platform": None})}
        )
        return _against(_judge(claim, self.reference, self.run, expected), bound, basis)

    # --- Two platforms -----------------------------------------------------------------------

    def platform_ratio(self, claim: Claim, relation: PlatformRatioRelation) -> RelationExpectation:
        """This host in place of the ratio's platform most like it, the paper's ratio scaled by
        the GPUs' figures; the other platform from a run of this report or a transcribed table."""
        pair = [relation.numerator_platform, relation.denominator_platform]
        replaced = most_like(self.host, pair, self.reference, self.hardware)
        other = pair[1] if replaced == pair[0] else pair[0]
        ratio = gpu_ratio(
            self.host, _platform_gpu(self.reference, self.hardware, replaced), relation.stage, self.measured
        )
        if isinstance(ratio, str):
            return RelationExpectation(
                basis=f"this host cannot stand in for {replaced}: {ratio}", verdict="no expectation"
            )
        factor = ratio.factor ** metric_sign(relation.metric)
        factor = factor if replaced == pair[0] else 1 / factor
        bound = _scaled(relation.published, factor)
        ordered = ["this host", other] if replaced == pair[0] else [other, "this host"]
        basis = (
            f"the paper's {pair[0]}/{pair[1]} ratio with this host in place of {replaced}: "
            f"{'×' if replaced == pair[0] else '÷'} {ratio.basis}; {ordered[0]}/{ordered[1]}"
        )
        expected = bound.describe(TIMES)
        ratios, used, sources, measured = [], [], set(), []
        for case in self._ratio_cases(relation):
            mine = self._host_value(case, relation.metric)
            theirs = self._other_value(claim, case, relation.metric, other, mine)
            if mine is None or theirs is None or not theirs[0] or not mine[0]:
                continue
            ratios.append(mine[0] / theirs[0] if replaced == pair[0] else theirs[0] / mine[0])
            used.append(case)
            sources.add(theirs[1])
            measured.append([mine[2], *theirs[2:]])
        if not ratios:
            why = (
                f"no {other} {metric_label(relation.metric)} of the cases this host measured: no run of this "
                f"report is on {other}, and {self._tables_say(other)}"
            )
            return RelationExpectation(expected=expected, basis=basis, verdict="no expectation", finding=why)
        median = statistics.median(ratios)
        verdict, judged = judge(bound, median, median_spread(measured, median), TIMES)
        versus = f"measured {format_value(median / centre(bound))} × expected"
        finding = (
            f"{versus}; {len(ratios)} case{'s' * (len(ratios) > 1)} "
            f"({', '.join(used)}), {other} from {', '.join(sorted(sources))}; "
            + judged.replace("published", "expected")
        )
        return RelationExpectation(
            expected=expected, basis=basis, verdict=verdict, measured=TIMES.show(median), versus=versus, finding=finding
        )

    def _tables_say(self, platform: str) -> str:
        if any(t.platform == platform for t in self.reference.tables):
            return f"the reference's tables hold no {platform} value of these cases"
        where = "" if self.reference.tables else " (tables: none)"
        return f"the reference transcribes no table value of it{where}"

    def _ratio_cases(self, relation: PlatformRatioRelation) -> list[str]:
        if relation.cases:
            return list(relation.cases)
        return sorted(
            cid
            for cid, result in self.run.results.items()
            if result.stage == relation.stage
            and result.case.variant is None
            and quantised(result.case) == relation.quantised
        )

    def _host_value(self, case: str, metric: str) -> tuple[float, str, Reading] | None:
        """The host's value of a case, its unit, and the reading its runs' spread is taken from."""
        result = self.run.results.get(case)
        found = result.metrics.get(metric) if result is not None and result.status == "ok" else None
        if found is None:
            return None
        return (
            found.mean,
            found.unit,
            Reading(found.mean, found.unit, run=self.run.label, case=case, case_used=case, metric=found),
        )

    def _other_value(self, claim: Claim, case: str, metric: str, platform: str, mine: tuple | None) -> tuple | None:
        """The platform's value of a case and where it comes from: measured by another run of the
        report on it (with that reading, whose runs count too), else transcribed from the paper's
        tables (in this run's unit)."""
        if mine is None:
            return None
        if len(self.runs) > 1:
            reading = ClaimContext(claim, self.reference, self.runs[1:]).read(case, metric, [platform], True)
            if reading.value is not None:
                return reading.value, f"run {reading.run}", reading
        for entry in self.reference.tables:
            if (entry.platform, entry.case, entry.metric) == (platform, case, metric):
                value = convert(entry.mean, entry.unit, mine[1])
                if value is not None:
                    return value, f"the paper's Table {entry.table}"
        return None

    def nvlink_pair(self, claim: Claim, relation: Relation) -> RelationExpectation:
        """A relation between platforms of one GPU model with and without NVLink (C4, C8, C27)
        holds on this host's GPUs by their NVLink cases against their p2p-off variants."""
        platforms = sorted(relation_platforms(relation))
        if self.host.key is None or self.run.interconnect != "nvlink":
            linked = self.run.interconnect or "not recorded (no fingerprint)"
            return RelationExpectation(
                verdict="no expectation",
                basis=f"with and without NVLink on one GPU model: needs this host's GPUs in hardware.yaml and linked "
                f"by NVLink (their p2p-off variants stand for PCIe); the link is {linked}",
            )
        retargeted = self.reference.model_copy(
            update={
                "platforms": {
                    name: self._on_host_gpus(name) if name in platforms else spec
                    for name, spec in self.reference.platforms.items()
                }
            }
        )
        judged = EVALUATORS[type(relation)](ClaimContext(claim, retargeted, [self.run]), relation)
        basis = (
            f"the paper's value on {' and '.join(platforms)}, the same GPUs with and without NVLink, assumed to "
            f"carry over: this host's {self.host.model} NVLink cases against their p2p-off variants"
        )
        return _against(judged, _bound_of(relation), basis)

    def _on_host_gpus(self, platform: str):
        spec = self.reference.platforms[platform].model_copy(update={"gpus": (self.host.key,)})
        spec.resolve(self.hardware)
        return spec


def _bound_of(relation: Relation) -> Published | None:
    """What a measured value is divided by for "measured r × expected": the first reading of the
    sentence that gives a value (C25's "about 13.3 ×", not its "up to 14 ×"), else the bound."""
    readings = getattr(relation, "readings", None)
    if not readings:
        return None
    return next((published for _, published in readings if published.value is not None), readings[0][1])


def expect_claims(
    reference: Reference, runs: Sequence[MeasuredRun], hardware: HardwareTable | None = None
) -> list[ClaimExpectation]:
    """Every claim's expectation on the reported run's GPUs (runs[0])."""
    expecting = Expecting(reference, runs, hardware)
    return [expecting.claim(claim) for claim in reference.claims]


def expectation_counts(expectations: Sequence[ClaimExpectation]) -> dict[ExpectationVerdict, int]:
    """Verdicts against the expectation, of the claims judged so (never the paper's verdicts)."""
    counts: dict[ExpectationVerdict, int] = dict.fromkeys(PRECEDENCE, 0)
    for expectation in expectations:
        if expectation.judged:
            counts[expectation.verdict] += 1
    return counts
