"""The paper's published findings as typed relations: the reference manifest
(manifests/references/arxiv-2311.03687.yaml) states each claim (C1-C27 of PROTOCOL.md) as
relations between measured quantities (a ratio of two cases' metrics, a scaling efficiency, an
ordering...) with the published value beside a tolerance. Evaluating them is kit.reference.claims'.
"""

from __future__ import annotations

import math
import re
from itertools import product
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from kit.manifest import load_manifest, manifests_dir
from kit.plan.protocol import Strict
from kit.theory.hardware import HardwareTable, load_hardware, normalise_name
from kit.units import Scale, Unit

REFERENCE_FILE = Path("references") / "arxiv-2311.03687.yaml"


# `{stage}.{model}.{method}.g{gpus}[.b{batch}]`; comm cases have no model.
CASE_ID_PATTERN = r"^[a-z][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)?\.[a-z0-9_+-]+\.g[1-9][0-9]*(\.b[1-9][0-9]*)?$"
CaseId = Annotated[str, Field(pattern=CASE_ID_PATTERN)]
PLACEHOLDER = re.compile(r"\{(\w+)\}")
SCALING_METRIC = "tokens_per_s"  # a scaling efficiency divides throughputs (paper, Figure 4)
MAX_EXPANDED = 1000  # relations one claim's for_each may expand into (the largest claim has 9)


class PlatformSpec(Strict):
    """How a run's GPUs are recognised as one of the paper's platforms: exactly, by the names
    (NVML name and aliases) of its hardware.yaml entries, as the hardware table matches a GPU.
    A GPU whose name only contains one of `similar_names_contain` (an RTX 4090 D for the RTX
    4090, an A800 PCIe for the A800 SXM4) is a similar platform, which the mismatch says."""

    label: str
    gpus: tuple[str, ...] = Field(min_length=1)  # hardware.yaml keys
    similar_names_contain: tuple[str, ...] = ()
    interconnect: Literal["nvlink", "pcie", "any"] = "any"
    # A PCIe platform measured on an NVLink host of the same GPUs: each case's variant of this
    # name (protocol.yaml `variants`, e.g. p2p-off) stands for the case on this platform.
    variant_on_nvlink: str | None = None
    _names: frozenset[str] = PrivateAttr(default=frozenset())

    def resolve(self, hardware: HardwareTable) -> None:
        """Take the exact device names of the platform's GPUs from the hardware table."""
        unknown = [key for key in self.gpus if key not in hardware.gpus]
        if unknown:
            raise ValueError(f"GPU {unknown[0]!r} is not in hardware.yaml")
        self._names = frozenset(normalise_name(name) for key in self.gpus for name in hardware.gpus[key].names)

    def is_exactly(self, device_name: str) -> bool:
        return normalise_name(device_name) in self._names

    def is_similar(self, device_name: str) -> bool:
        return any(part.casefold() in device_name.casefold() for part in self.similar_names_contain)


class Published(Strict):
    """The published value as a bound: value +- tolerance, a range, or a one-sided limit."""

    value: float | None = None
    tolerance: float | None = Field(default=None, ge=0)
    between: tuple[float, float] | None = None
    at_least: float | None = None
    at_most: float | None = None
    unit: Unit | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Published:
        forms = [self.value is not None, self.between is not None, self.at_least is not None, self.at_most is not None]
        if sum(forms) != 1:
            raise ValueError("give exactly one of value (with tolerance), between, at_least, at_most")
        if (self.value is None) != (self.tolerance is None):
            raise ValueError("value and tolerance go together")
        if self.between is not None and self.between[0] > self.between[1]:
            raise ValueError("between: the lower bound comes first")
        return self

    @property
    def low(self) -> float:
        if self.value is not None:
            return self.value - self.tolerance  # type: ignore[operator]
        if self.between is not None:
            return self.between[0]
        return self.at_least if self.at_least is not None else -math.inf

    @property
    def high(self) -> float:
        if self.value is not None:
            return self.value + self.tolerance  # type: ignore[operator]
        if self.between is not None:
            return self.between[1]
        return self.at_most if self.at_most is not None else math.inf

    def holds(self, measured: float) -> bool:
        return self.low <= measured <= self.high

    def _centre_half(self) -> tuple[float, float] | None:
        if self.value is not None:
            return self.value, self.tolerance or 0.0
        if self.between is not None:
            return (self.between[0] + self.between[1]) / 2, (self.between[1] - self.between[0]) / 2
        return None

    def holds_beyond(self, measured: float, margin: float) -> bool:
        """Inside the bound by more than `margin` (on every side the bound has)."""
        return self.low + margin < measured < self.high - margin

    def outside_beyond(self, measured: float, margin: float) -> bool:
        """Further from the published value than the wider of `margin` and the stated tolerance
        (a range: its half-width); of a one-sided bound, further outside it than `margin`."""
        two_sided = self._centre_half()
        if two_sided is not None:
            centre, half = two_sided
            return abs(measured - centre) > max(half, margin)
        return measured < self.low - margin or measured > self.high + margin

    def describe(self, scale: Scale) -> str:
        if self.value is not None:
            return f"{scale.show(self.value, trim=True)} ± {scale.show_difference(self.tolerance or 0, trim=True)}"
        if self.between is not None:
            return f"{scale.show(self.between[0], trim=True)} to {scale.show(self.between[1], trim=True)}"
        if self.at_least is not None:
            return f"at least {scale.show(self.at_least, trim=True)}"
        return f"at most {scale.show(self.at_most, trim=True)}"  # type: ignore[arg-type]

    def deviation(self, measured: float, scale: Scale) -> str:
        """How far outside the bound a measured value lies, and in which direction."""
        above = measured > self.high
        edge = self.high if above else self.low
        direction = "above" if above else "below"
        if self.value is not None:
            relative = (measured - self.value) / self.value if self.value else math.nan
            share = f" ({relative:+.0%})".replace("-", "−").replace("%", " %") if math.isfinite(relative) else ""
            return (
                f"{scale.show_difference(measured - self.value)} {direction} the published "
                f"{scale.show(self.value, trim=True)}{share}, outside "
                f"± {scale.show_difference(self.tolerance or 0, trim=True)}"
            )
        return f"{scale.show_difference(measured - edge)} {direction} the published bound {scale.show(edge, trim=True)}"


class CaseMetric(Strict):
    """One metric of one case, on the run of a given platform (default: the claim's)."""

    case: CaseId
    metric: str = "tokens_per_s"
    platform: str | None = None


def _base_is_one_gpu(case: str) -> None:
    if not re.search(r"\.g1(\.b\d+)?$", case):
        raise ValueError(f"the base of a scaling efficiency runs on one GPU (g1), not {case!r}")


class ScalingOf(Strict):
    """throughput(target) / (N x throughput(base)) with N the target's GPUs (paper, Figure 4)."""

    base: CaseId
    target: CaseId
    platform: str | None = None

    @model_validator(mode="after")
    def _base_one_gpu(self) -> ScalingOf:
        _base_is_one_gpu(self.base)
        return self


Quantity = CaseMetric | ScalingOf


class OtherReading(Strict):
    """Another way the paper's sentence can be read, with the bound that reading gives."""

    label: str
    published: Published


class _Bounded(Strict):
    """A relation checked against a published bound. Where the sentence admits more than one
    reading ("34.9 % faster": 34.9 % less time, or 1.349 × the speed), `reading` names the
    first and `other_readings` the rest; each is judged, and only when every reading deviates
    does the relation deviate."""

    published: Published
    reading: str | None = None
    other_readings: tuple[OtherReading, ...] = ()

    @model_validator(mode="after")
    def _readings_are_named(self) -> _Bounded:
        if self.other_readings and self.reading is None:
            raise ValueError("a relation with other_readings names its own with `reading`")
        return self

    @property
    def readings(self) -> list[tuple[str | None, Published]]:
        return [(self.reading, self.published), *((other.label, other.published) for other in self.other_readings)]


class _Relation(_Bounded):
    platform: str | None = None


class ValueRelation(_Relation):
    kind: Literal["value"]
    measure: CaseMetric


class RatioRelation(_Relation):
    kind: Literal["ratio"]
    numerator: Quantity
    denominator: Quantity


class ScalingEfficiencyRelation(_Relation):
    kind: Literal["scaling_efficiency"]
    base: CaseId
    target: CaseId

    @model_validator(mode="after")
    def _base_one_gpu(self) -> ScalingEfficiencyRelation:
        _base_is_one_gpu(self.base)
        return self


class ShareRelation(_Relation):
    kind: Literal["share"]
    case: CaseId
    part: str
    whole: str


class PlatformRatioRelation(_Bounded):
    """One metric of the same case (so the same method) on two platforms, the median of the
    per-case ratios. Without a list of cases it takes every case of `stage` both runs
    completed, of one kind only: quantised methods (`quantised: true`) or the rest (`false`),
    never a mix, since quantisation changes what a GPU's throughput is bound by."""

    kind: Literal["platform_ratio"]
    numerator_platform: str
    denominator_platform: str
    stage: str
    metric: str
    cases: tuple[CaseId, ...] | None = None
    quantised: bool | None = None

    @model_validator(mode="after")
    def _one_kind_of_case(self) -> PlatformRatioRelation:
        if self.cases is None and self.quantised is None:
            raise ValueError(
                "a platform ratio over a whole stage says `quantised: true` or `false`; the two are not mixed"
            )
        return self


class OrderingRelation(Strict):
    kind: Literal["ordering"]
    platform: str | None = None
    metric: str | None = None
    direction: Literal["descending", "ascending"]
    tiers: tuple[tuple[CaseMetric, ...], ...] = Field(min_length=2)

    @model_validator(mode="before")
    @classmethod
    def _items_take_the_relation_metric(cls, data: Any) -> Any:
        """Items may be bare case ids; they measure the relation's metric."""
        if not isinstance(data, dict) or not isinstance(data.get("tiers"), (list, tuple)):
            return data
        metric = data.get("metric")

        def item(entry: Any) -> Any:
            if isinstance(entry, str):
                entry = {"case": entry}
            if isinstance(entry, dict) and "metric" not in entry and metric is not None:
                entry = {**entry, "metric": metric}
            return entry

        tiers = tuple(
            tuple(item(entry) for entry in tier) if isinstance(tier, (list, tuple)) else tier for tier in data["tiers"]
        )
        return {**data, "tiers": tiers}


Relation = Annotated[
    ValueRelation
    | RatioRelation
    | ScalingEfficiencyRelation
    | ShareRelation
    | PlatformRatioRelation
    | OrderingRelation,
    Field(discriminator="kind"),
]


def _substitute(data: Any, values: dict[str, str]) -> Any:
    if isinstance(data, str):
        return PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), data)
    if isinstance(data, (list, tuple)):
        return type(data)(_substitute(item, values) for item in data)
    if isinstance(data, dict):
        return {key: _substitute(item, values) for key, item in data.items()}
    return data


def _placeholders(data: Any) -> set[str]:
    if isinstance(data, str):
        return set(PLACEHOLDER.findall(data))
    if isinstance(data, (list, tuple)):
        return set().union(*(_placeholders(item) for item in data)) if data else set()
    if isinstance(data, dict):
        return set().union(*(_placeholders(item) for item in data.values())) if data else set()
    return set()


def relation_cases(relation: Relation) -> list[str]:
    """Every case id a relation reads (a platform ratio without a list reads its whole stage)."""
    if isinstance(relation, ValueRelation):
        return [relation.measure.case]
    if isinstance(relation, RatioRelation):
        return [case for q in (relation.numerator, relation.denominator) for case in _quantity_cases(q)]
    if isinstance(relation, ScalingEfficiencyRelation):
        return [relation.base, relation.target]
    if isinstance(relation, ShareRelation):
        return [relation.case]
    if isinstance(relation, PlatformRatioRelation):
        return list(relation.cases or ())
    return [item.case for tier in relation.tiers for item in tier]


def relation_metrics(relation: Relation) -> set[tuple[str, str]]:
    """Every (stage, metric name) a relation reads: what a real result of that stage must carry."""

    def stage(case: str) -> str:
        return case.split(".")[0]

    if isinstance(relation, ValueRelation):
        return {(stage(relation.measure.case), relation.measure.metric)}
    if isinstance(relation, RatioRelation):
        return {
            (stage(case), q.metric if isinstance(q, CaseMetric) else SCALING_METRIC)
            for q in (relation.numerator, relation.denominator)
            for case in _quantity_cases(q)
        }
    if isinstance(relation, ScalingEfficiencyRelation):
        return {(stage(relation.base), SCALING_METRIC), (stage(relation.target), SCALING_METRIC)}
    if isinstance(relation, ShareRelation):
        return {(stage(relation.case), relation.part), (stage(relation.case), relation.whole)}
    if isinstance(relation, PlatformRatioRelation):
        return {(relation.stage, relation.metric)} | {(stage(case), relation.metric) for case in relation.cases or ()}
    return {(stage(item.case), item.metric) for tier in relation.tiers for item in tier}


def _quantity_cases(quantity: Quantity) -> list[str]:
    return [quantity.case] if isinstance(quantity, CaseMetric) else [quantity.base, quantity.target]


def relation_platforms(relation: Relation) -> set[str]:
    """Platform names a relation names itself (the claim's platforms come on top)."""
    if isinstance(relation, PlatformRatioRelation):
        return {relation.numerator_platform, relation.denominator_platform}
    named = {relation.platform} if relation.platform else set()
    if isinstance(relation, RatioRelation):
        named |= {q.platform for q in (relation.numerator, relation.denominator) if q.platform}
    if isinstance(relation, ValueRelation) and relation.measure.platform:
        named.add(relation.measure.platform)
    if isinstance(relation, OrderingRelation):
        named |= {item.platform for tier in relation.tiers for item in tier if item.platform}
    return named


class Claim(Strict):
    """One published finding: its statement, where it comes from, and the relations it makes."""

    id: str = Field(pattern=r"^C[0-9]+$")
    statement: str
    source: Literal["seed", "2nd-hand", "seed + 2nd-hand"]
    section: str
    platforms: Literal["any"] | tuple[str, ...]
    stages: tuple[str, ...] = Field(min_length=1)
    relations: tuple[Relation, ...] = Field(min_length=1)
    for_each: dict[str, tuple[str, ...]] = {}
    note: str | None = None
    interpretation: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _expand_for_each(cls, data: Any) -> Any:
        """A relation that uses {placeholders} stands for one relation per combination of values,
        up to MAX_EXPANDED relations a claim (a few lists of values would otherwise multiply
        into millions, validated for hours)."""
        if not isinstance(data, dict) or not isinstance(data.get("relations"), (list, tuple)):
            return data
        values = data.get("for_each") or {}
        if not isinstance(values, dict):
            return data
        expanded: list[Any] = []  # the relations as written, before validation
        for relation in data["relations"]:
            used = sorted(_placeholders(relation))
            unknown = [name for name in used if name not in values]
            if unknown:
                raise ValueError(f"placeholder {{{unknown[0]}}} has no for_each values")
            lists = [values[name] for name in used]
            if not all(
                isinstance(items, (list, tuple)) and all(isinstance(item, str) for item in items) for items in lists
            ):
                raise ValueError("for_each gives each placeholder a list of names")
            if len(expanded) + math.prod(len(items) for items in lists) > MAX_EXPANDED:
                raise ValueError(f"for_each expands the claim into more than {MAX_EXPANDED} relations")
            expanded += [_substitute(relation, dict(zip(used, combination))) for combination in product(*lists)]
        return {**data, "relations": tuple(expanded)}

    @model_validator(mode="after")
    def _cases_in_stages(self) -> Claim:
        for relation in self.relations:
            stages = {case.split(".")[0] for case in relation_cases(relation)}
            if isinstance(relation, PlatformRatioRelation):
                stages.add(relation.stage)
            stray = sorted(stages - set(self.stages))
            if stray:
                raise ValueError(f"relation reads stage {stray[0]!r}, not among the claim's stages")
        return self

    @property
    def platform_names(self) -> tuple[str, ...]:
        return () if self.platforms == "any" else self.platforms


class TableValue(Strict):
    """One number transcribed from a table of the paper, for a case on a platform."""

    table: str
    platform: str
    case: CaseId
    metric: str
    mean: float
    std: float | None = Field(default=None, ge=0)
    unit: Unit
    tolerance: float | None = Field(default=None, gt=0)
    note: str | None = None


class Reference(Strict):
    """manifests/references/arxiv-2311.03687.yaml."""

    paper: str
    title: str
    platforms: dict[str, PlatformSpec] = Field(min_length=1)
    claims: tuple[Claim, ...]
    table_tolerance: float = Field(gt=0)
    tables: tuple[TableValue, ...] = ()

    @model_validator(mode="after")
    def _names_resolve(self) -> Reference:
        hardware = load_hardware()
        for name, spec in self.platforms.items():
            try:
                spec.resolve(hardware)
            except ValueError as exc:
                raise ValueError(f"platform {name}: {exc}") from None
        seen: set[str] = set()
        for claim in self.claims:
            if claim.id in seen:
                raise ValueError(f"claim {claim.id} is listed twice")
            seen.add(claim.id)
            named = set(claim.platform_names).union(*(relation_platforms(r) for r in claim.relations))
            unknown = sorted(named - set(self.platforms))
            if unknown:
                raise ValueError(f"claim {claim.id} names unknown platform {unknown[0]!r}")
        for value in self.tables:
            if value.platform not in self.platforms:
                raise ValueError(f"table value for {value.case} names unknown platform {value.platform!r}")
        return self


def reference_path() -> Path:
    return manifests_dir() / REFERENCE_FILE


def load_reference(path: Path | None = None) -> Reference:
    """The reference claims and table values; a malformed file raises a one-line ManifestError."""
    return load_manifest(path or reference_path(), Reference)
