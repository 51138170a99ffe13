"""The paper's published findings as typed relations, and their evaluation on measured runs.

manifests/references/arxiv-2311.03687.yaml states each claim (C1-C27 of PROTOCOL.md) as
relations between measured quantities (a ratio of two cases' metrics, a scaling efficiency,
an ordering...) with the published value beside a tolerance. Evaluating a claim on a run gives
one of four verdicts, always with the measured value next to the published one and the reason:

    consistent      every relation that could be measured holds
    deviates        a relation is outside its published bound (by how much, which way)
    not measured    a case or metric the claim needs is not in the run (which ones)
    not applicable  the claim is about other hardware, needs two platforms, or the run is not
                    comparable to the reference (smoke); the measured relation is still shown

Everything below the manifest models is a pure function of Results, so tests build runs in memory.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from itertools import product
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from kit.analysis import scaling_efficiency
from kit.fingerprint import Calibration, Fingerprint
from kit.hardware import HardwareTable, load_hardware, normalise_name
from kit.manifest import load_manifest, manifests_dir
from kit.protocol import Case
from kit.results import Metric, Result, RunInfo
from kit.validity import invalid_reasons

REFERENCE_FILE = Path("references") / "arxiv-2311.03687.yaml"

Verdict = Literal["consistent", "deviates", "inconclusive", "not measured", "not applicable"]
VERDICTS: tuple[Verdict, ...] = ("consistent", "deviates", "inconclusive", "not measured", "not applicable")
MIN_RUNS = 3  # runs of each case a relation reads before it may deviate
SPREAD_FACTOR = 2.0  # a relation's margin, in standard errors of its value

# `{stage}.{model}.{method}.g{gpus}[.b{batch}]`; comm cases have no model.
CASE_ID_PATTERN = r"^[a-z][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)?\.[a-z0-9_+-]+\.g[1-9][0-9]*(\.b[1-9][0-9]*)?$"
CaseId = Annotated[str, Field(pattern=CASE_ID_PATTERN)]
PLACEHOLDER = re.compile(r"\{(\w+)\}")
SCALING_METRIC = "tokens_per_s"  # a scaling efficiency divides throughputs (paper, Figure 4)
MAX_EXPANDED = 1000  # relations one claim's for_each may expand into (the largest claim has 9)

# Units a published value may be written in: each is (dimension, factor to the dimension's base).
UNITS: dict[str, tuple[str, float]] = {
    "tokens/s": ("throughput", 1.0),
    "10^3 tokens/s": ("throughput", 1e3),
    "GB": ("memory", 1e9),
    "GiB": ("memory", 2.0**30),
    "s": ("time", 1.0),
    "ms": ("time", 1e-3),
    "us": ("time", 1e-6),
    "TFLOP/s": ("flops", 1e12),
    "GB/s": ("bandwidth", 1e9),
    "fraction": ("fraction", 1.0),
    "%": ("fraction", 0.01),
}


def _known_unit(unit: str) -> str:
    if unit not in UNITS:
        raise ValueError(f"unknown unit {unit!r} (known: {', '.join(UNITS)})")
    return unit


Unit = Annotated[str, AfterValidator(_known_unit)]


# ---------------------------------------------------------------------------------------------
# Showing numbers
# ---------------------------------------------------------------------------------------------


def format_value(value: float, significant: int = 3, trim: bool = False) -> str:
    """A number with about `significant` digits and no exponent in the usual range; `trim`
    drops trailing zeros (for published values, which carry no measurement precision)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 7 or magnitude < -3:
        return f"{value:.{significant - 1}e}"
    text = f"{value:.{max(0, significant - 1 - magnitude)}f}"
    return text.rstrip("0").rstrip(".") if trim and "." in text else text


class Scale(NamedTuple):
    """How a relation's numbers are shown: fractions as per cent, ratios with x, else a unit."""

    factor: float
    suffix: str
    difference_suffix: str

    def show(self, value: float, trim: bool = False) -> str:
        return f"{format_value(value * self.factor, trim=trim)}{self.suffix}"

    def show_difference(self, value: float, trim: bool = False) -> str:
        return f"{format_value(abs(value) * self.factor, trim=trim)}{self.difference_suffix}"


TIMES = Scale(1.0, " ×", "")
PERCENT = Scale(100.0, " %", " points")


def unit_scale(unit: str | None) -> Scale:
    if unit in ("fraction", "%"):
        return PERCENT
    if unit is None:
        return Scale(1.0, "", "")
    return Scale(1.0, f" {unit}", f" {unit}")


METRIC_LABELS = {
    "tokens_per_s": "tokens/s",
    "step_time_s": "step time",
    "peak_memory_gib": "peak memory",
    "achieved_tflops": "achieved TFLOP/s",
    "mfu": "MFU",
    "output_throughput": "output tokens/s",
    "latency_median_s": "median request latency",
    "duration_s": "burst duration",
}


def metric_label(metric: str) -> str:
    """The kit's own metrics in words; metrics of stages still to come keep their names."""
    return METRIC_LABELS.get(metric, metric)


def convert(value: float, from_unit: str, to_unit: str) -> float | None:
    """`value` in `from_unit` expressed in `to_unit`; None when the two measure different things."""
    if from_unit == to_unit:
        return value
    if from_unit not in UNITS or to_unit not in UNITS:
        return None
    (from_dim, from_factor), (to_dim, to_factor) = UNITS[from_unit], UNITS[to_unit]
    return value * from_factor / to_factor if from_dim == to_dim else None


# ---------------------------------------------------------------------------------------------
# The reference manifest
# ---------------------------------------------------------------------------------------------


class Strict(BaseModel):
    """Reference data rejects unknown keys: a misspelt bound must not silently vanish."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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


Quantity = Union[CaseMetric, ScalingOf]


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
            raise ValueError("a platform ratio over a whole stage says `quantised: true` or `false`; the two are not mixed")
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

        tiers = tuple(tuple(item(entry) for entry in tier) if isinstance(tier, (list, tuple)) else tier for tier in data["tiers"])
        return {**data, "tiers": tiers}


Relation = Annotated[
    Union[
        ValueRelation, RatioRelation, ScalingEfficiencyRelation, ShareRelation, PlatformRatioRelation, OrderingRelation
    ],
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
            for q in (relation.numerator, relation.denominator) for case in _quantity_cases(q)
        }  # fmt: skip
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
        expanded = []
        for relation in data["relations"]:
            used = sorted(_placeholders(relation))
            unknown = [name for name in used if name not in values]
            if unknown:
                raise ValueError(f"placeholder {{{unknown[0]}}} has no for_each values")
            lists = [values[name] for name in used]
            if not all(isinstance(items, (list, tuple)) and all(isinstance(item, str) for item in items) for items in lists):
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


# ---------------------------------------------------------------------------------------------
# A run as claim evaluation sees it
# ---------------------------------------------------------------------------------------------


class MeasuredRun(BaseModel):
    """What claim evaluation needs of one run: its results, its hardware, its comparability."""

    label: str
    profile: str
    comparable_to_reference: bool
    gpu_names: tuple[str, ...]
    cpu_names: tuple[str, ...] = ()
    interconnect: Literal["nvlink", "pcie"] | None = None
    results: dict[str, Result]
    invalid: dict[str, list[str]] = {}  # case id -> why its figures are no measurement (kit.validity)
    calibration: Calibration | None = None  # what the host achieved in preflight (the fingerprint's)

    @property
    def gpus(self) -> str:
        """The GPUs by model and count ("8 × NVIDIA A800-SXM4-80GB"), each model once."""
        return ", ".join(f"{count} × {name}" if count > 1 else name for name, count in Counter(self.gpu_names).items())

    @property
    def devices(self) -> str:
        if self.gpu_names:
            return self.gpus + (f" ({self.interconnect})" if self.interconnect else "")
        return f"CPU only ({', '.join(self.cpu_names) or 'model not recorded'})"


INTERCONNECT_OF_TOPOLOGY = {"nvlink-all-pairs": "nvlink", "nvlink-partial": "nvlink", "pcie-only": "pcie"}


def measured_run(info: RunInfo, results: Iterable[Result], fingerprint: Fingerprint | None = None) -> MeasuredRun:
    """GPU names from run.json, from every rank sample (a serving process names all its GPUs,
    comma-separated) and from the fingerprint; the interconnect from the fingerprint's topology
    class (unknown without a fingerprint)."""
    results = list(results)
    ranks = [rank for result in results for run in result.samples for rank in run.ranks]
    gpus = set(info.host.get("gpus") or [])
    gpus |= {name.strip() for rank in ranks if rank.device != "cpu" for name in rank.device_name.split(",")}
    interconnect = None
    if fingerprint is not None:
        gpus |= {gpu.name for gpu in fingerprint.gpus.gpus if gpu.name}
        topology = fingerprint.topology.topology_class
        interconnect = INTERCONNECT_OF_TOPOLOGY.get(topology.interconnect) if topology else None
    return MeasuredRun(
        label=info.run_id,
        profile=info.profile,
        comparable_to_reference=info.plan.comparable_to_reference,
        gpu_names=tuple(sorted(gpus)),
        cpu_names=tuple(sorted({rank.device_name for rank in ranks if rank.device == "cpu"})),
        interconnect=interconnect,
        results={result.case_id: result for result in results},
        invalid={result.case_id: found for result in results if (found := invalid_reasons(result))},
        calibration=fingerprint.calibration if fingerprint is not None else None,
    )


def variant_standing_for(spec: PlatformSpec, run: MeasuredRun) -> str | None:
    """The variant whose cases stand for the platform on this run: a PCIe platform that names
    one, on a run of its GPUs linked by NVLink; else None."""
    if spec.variant_on_nvlink is None or run.interconnect != "nvlink":
        return None
    same_gpus = platform_mismatch(spec.model_copy(update={"interconnect": "nvlink"}), run) is None
    return spec.variant_on_nvlink if same_gpus else None


def variant_case_id(case_id: str, variant: str | None) -> str:
    """The case that stands for `case_id` under `variant`: its variant, or the case itself on
    one GPU, where there is no peer-to-peer traffic to change (no variant is planned)."""
    if variant is None or parse_case_id(case_id).gpus < 2:
        return case_id
    return f"{case_id}.{variant}"


def platform_mismatch(spec: PlatformSpec, run: MeasuredRun) -> str | None:
    """Why a run is not on the platform, or None when it is."""
    if not run.gpu_names:
        return f"run {run.label} has {run.devices}"
    strangers = [name for name in run.gpu_names if not spec.is_exactly(name)]
    if strangers and all(spec.is_exactly(name) or spec.is_similar(name) for name in run.gpu_names):
        return f"run {run.label} has {run.gpus}: a similar platform, not the paper's {spec.label}"
    if strangers:
        return f"run {run.label} has {run.gpus}"
    if spec.interconnect != "any":
        if run.interconnect is None:
            return f"run {run.label}'s interconnect is not recorded (no fingerprint.json)"
        if run.interconnect != spec.interconnect:
            return f"run {run.label}'s GPUs are linked by {run.interconnect}, not {spec.interconnect}"
    return None


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


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


class CaseParts(NamedTuple):
    stage: str
    model: str | None
    method: str
    gpus: int
    batch: int | None
    variant: str | None = None


def parse_case_id(case_id: str) -> CaseParts:
    parts = case_id.split(".")
    variant = parts.pop() if not re.fullmatch(r"[bg]\d+", parts[-1]) else None
    batch = int(parts.pop()[1:]) if re.fullmatch(r"b\d+", parts[-1]) else None
    gpus = int(parts.pop()[1:])
    method = parts.pop()
    return CaseParts(parts[0], parts[1] if len(parts) > 1 else None, method, gpus, batch, variant)


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
        if (parts.model, parts.method, parts.batch, parts.variant) == (model, wanted.method, wanted.batch, wanted.variant)
    }
    if wanted.gpus in candidates:
        return candidates[wanted.gpus]
    multi = [gpus for gpus in candidates if gpus > 1]
    return candidates[max(multi)] if wanted.gpus > 1 and multi else None


def fitted_in_place_of(case_id: str, run: MeasuredRun) -> Result | None:
    """The run's case fitted to fewer GPUs than the protocol's `case_id` (the same cell on this
    host's GPUs; kit.protocol.Case.fitted_from), or None."""
    wanted = parse_case_id(case_id)
    for cid, result in run.results.items():
        written = result.case.fitted_from
        if written is not None and (cid == case_id or (written == wanted.gpus and parse_case_id(cid)._replace(gpus=written) == wanted)):
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
        found = dict(caveats=tuple(caveats), stand_in=stand_in, run=run.label, case=case, case_used=used)
        result = run.results.get(used)
        fitted = fitted_in_place_of(used, run)
        if fitted is not None:  # the host's own figure, never a measure of the paper's GPU count
            return Reading(None, missing=f"{case} (run {run.label} has it {fitted.case.fitted} as {fitted.case_id}, "
                                         "never compared with the paper's figure)", **found)  # fmt: skip
        if result is None:
            return Reading(None, missing=f"{case} (not in run {run.label})", **found)
        if result.status != "ok":  # a case this host could not attempt says why ("needs 8 GPUs, host has 4")
            said = f"{result.status}: {result.reason}" if result.status == "skipped" and result.reason else result.status
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


class Spread(NamedTuple):
    """How far a relation's runs let it be judged: the cases read with fewer than MIN_RUNS runs
    ("1 run of profile.llama2-7b.base.g1"), and the margin of its value (SPREAD_FACTOR standard
    errors; None where a case has a single run, which gives no spread)."""

    short: tuple[str, ...]
    margin: float | None

    @property
    def reason(self) -> str:
        return f"{', '.join(self.short)}; {MIN_RUNS} needed"


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


def spread_of(readings: Sequence[Reading], value: float | None, relative: Sequence[float | None] | None = None) -> Spread:
    """The spread of a value computed as a product or quotient of the readings' means (relative
    errors add in quadrature): a value of one reading, a ratio, a share, a scaling efficiency.
    `relative` gives the relative errors where they are not the readings' own."""
    short = tuple(dict.fromkeys(_runs_text(r) for r in readings if r.metric is None or r.metric.n < MIN_RUNS))
    errors = list(relative) if relative is not None else [relative_error(r.metric) for r in readings]
    if value is None or any(error is None for error in errors):
        return Spread(short, None)
    return Spread(short, SPREAD_FACTOR * abs(value) * math.sqrt(sum(error**2 for error in errors)))  # type: ignore[operator]


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
    return "inconclusive", f"{published.deviation(value, scale)}, but within its runs' spread ({margin}, {SPREAD_FACTOR:g} standard errors)"


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
    common = dict(
        relation=relation,
        published=published,
        caveats=evidence.caveats,
        stand_ins=evidence.stand_ins,
        runs=evidence.runs,
    )
    if evidence.inapplicable:
        return RelationOutcome(verdict="not applicable", finding="", **{**common, "caveats": [evidence.inapplicable]})
    if evidence.missing:
        missing: Verdict = "not applicable" if evidence.caveats else "not measured"
        return RelationOutcome(verdict=missing, finding=f"missing: {evidence.missing}", **common)
    shown: Verdict = "not applicable" if evidence.caveats else verdict  # type: ignore[assignment]
    if evidence.caveats and verdict == "inconclusive":
        finding = f"inconclusive: {finding}"
    return RelationOutcome(verdict=shown, measured=measured, measured_value=value, finding=finding, judged=verdict, **common)


def bounded(relation: str, bound: _Bounded, scale: Scale, evidence: Evidence, value: float | None,
            spread: Spread) -> RelationOutcome:  # fmt: skip
    """A relation whose measured value is checked against its published bound, under every
    reading of the sentence: it holds when one reading holds, deviates only when all do, and is
    inconclusive otherwise (as its runs allow: `judge`)."""
    readings = bound.readings
    shown = " or ".join(
        published.describe(scale) + (f" (read as {label})" if len(readings) > 1 else "") for label, published in readings
    )
    if value is None and not (evidence.missing or evidence.inapplicable):
        evidence = evidence._replace(missing="a computable value (a denominator is 0)")
    if value is None or evidence.missing or evidence.inapplicable:
        return outcome(relation, shown, evidence)
    judged = [(label, published, *judge(published, value, spread, scale)) for label, published in readings]
    verdicts = {verdict for _, _, verdict, _ in judged}
    verdict: Verdict = next(v for v in ("consistent", "inconclusive", "deviates") if v in verdicts)  # type: ignore[assignment]
    if len(judged) == 1:
        finding = judged[0][3]
    else:
        finding = "; ".join(f"read as {label}: {text}" for label, _, _, text in judged)
        finding += {"consistent": "; consistent under one reading", "deviates": "; deviates under every reading",
                    "inconclusive": "; inconclusive: no reading holds and not every reading deviates"}[verdict]  # fmt: skip
    result = outcome(relation, shown, evidence, scale.show(value), value, verdict, finding)
    if len(judged) > 1:
        per_reading = [
            ReadingOutcome(label=label or "", published=published.describe(scale), finding=text,
                           verdict="not applicable" if result.verdict == "not applicable" else each)
            for label, published, each, text in judged
        ]  # fmt: skip
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
    return getattr(case.params, "quantization", "none") != "none"


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
        spread = (f"{len(ratios)} cases, the same case on both: {', '.join(used)}; "
                  f"ratios {format_value(min(ratios))} to {format_value(max(ratios))}")  # fmt: skip
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
        ", ".join(f"{label(item)} {format_value(r.value)}" for item, r in zip(tier, values))  # type: ignore[arg-type]
        for tier, values in zip(relation.tiers, readings)
    )
    spread = spread_of([r for tier in readings for r in tier], None)
    violations, undecided = [], []
    for upper, lower, upper_items, lower_items in zip(readings, readings[1:], relation.tiers, relation.tiers[1:]):
        for a, item_a in zip(upper, upper_items):
            for b, item_b in zip(lower, lower_items):
                gap = a.value - b.value if relation.direction == "descending" else b.value - a.value  # type: ignore[operator]
                errors = [relative_error(a.metric), relative_error(b.metric)]
                margin = (None if None in errors else  # type: ignore[operator]
                          SPREAD_FACTOR * math.hypot(a.value * errors[0], b.value * errors[1]))  # fmt: skip
                if gap > 0 and (not spread.short or margin is None or gap > margin):
                    continue  # in order (from a single run: the runs it lacks are said once, below)
                pair = (f"{label(item_a)} ({format_value(a.value)}) is{'' if gap > 0 else ' not'}{sign.rstrip()} "  # type: ignore[arg-type]
                        f"{label(item_b)} ({format_value(b.value)})")  # type: ignore[arg-type]  # fmt: skip
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
            return verdict  # type: ignore[return-value]
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
