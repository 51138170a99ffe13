"""A named baseline an acceptance spec holds a host to (`kit baseline RUN... --out FILE`): per
quantity and case, the median and spread per GPU over the runs of accepted hosts of one GPU model
(as SuperBench's `sb result generate-baseline` builds one from a fleet), with what they ran on
(GPU model, driver, images by digest, kit version) and each run's evidence digest and signer.

A baseline is evidence: its `digest` is the SHA-256 of its content, checked whenever it is read,
and where its runs were signed it is signed too (FILE.sig, kit.rundir.signing). Where no baseline
exists, the kit's own expectation for the host's GPU stands in, named as such (kit.reference.expected_baseline)."""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from kit.files.regular import RUN_FILE_LIMIT, read_regular
from kit.manifest import ManifestError
from kit.plan.protocol import Strict
from kit.plan.workload_phrase import workload_phrase
from kit.reference.measured_run import MeasuredRun
from kit.reference.quantities import QUANTITIES, QuantityName

FORMAT: Literal["kit-baseline/1"] = "kit-baseline/1"


class BaselineRun(Strict):
    """A run the baseline was made from, as a reviewer finds it again."""

    run_id: str
    hostname: str
    profile: str
    evidence_digest: str  # SHA-256 of its SHA256SUMS
    signer: str  # its signature's summary (kit.rundir.signing), "unsigned (...)" where it has none


class BaselineFigure(Strict):
    """One quantity of one case: its value per run (per GPU where the quantity is), over every run
    and node the baseline was made from, and their median and spread."""

    quantity: QuantityName
    case_id: str
    workload: str
    unit: str
    values: tuple[float, ...] = Field(min_length=1)
    median: float = Field(gt=0)
    spread: float = Field(ge=0)  # (max - min) / median of the values
    objectives: str | None = None  # the latency objectives a figure of them was held to (a capacity)


class Baseline(Strict):
    format: Literal["kit-baseline/1"] = FORMAT
    name: str = Field(min_length=1)
    kind: Literal["runs", "expectation"]  # made from runs, or the kit's expectation standing in for them
    gpu_model: str
    driver: str | None
    kit_version: str
    images: dict[str, str]  # each image the runs' cases ran in -> its digest
    made_at: str
    runs: tuple[BaselineRun, ...]
    figures: tuple[BaselineFigure, ...]
    digest: str = ""  # sha256: of the baseline's JSON without this field

    def content_digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.model_copy(update={"digest": ""}).model_dump_json().encode()).hexdigest()

    def sealed(self) -> Baseline:
        return self.model_copy(update={"digest": self.content_digest()})


class BaselineSource(Strict):
    """One run as a baseline reads it: what it measured, and what identifies it."""

    measured: MeasuredRun
    run: BaselineRun
    driver: str | None
    kit_version: str
    images: dict[str, str]


def figure(quantity: QuantityName, case_id: str, sources: Sequence[BaselineSource]) -> BaselineFigure | None:
    """The case's quantity over every source that measured it validly; None where none did."""
    reading = QUANTITIES[quantity]
    values: list[float] = []
    found = None
    for source in sources:
        result = source.measured.results.get(case_id)
        metric = (
            source.measured.metric(case_id, reading.metric) if result is not None and result.status == "ok" else None
        )
        if result is None or metric is None or source.measured.invalid.get(case_id) or not reading.reads(result.case):
            continue
        values += reading.values(result.case, metric)
        found = (result.case, reading.unit(metric), source.measured.objectives if reading.held_to_objectives else None)
    if found is None or not values or statistics.median(values) <= 0:
        return None
    median = statistics.median(values)
    return BaselineFigure(
        quantity=quantity,
        case_id=case_id,
        workload=workload_phrase(found[0]),
        unit=found[1],
        values=tuple(values),
        median=median,
        spread=(max(values) - min(values)) / median,
        objectives=found[2],
    )


def make_baseline(name: str | None, sources: Sequence[BaselineSource], made_at: str) -> Baseline:
    """The baseline of runs of one GPU model (ValueError naming the models where they differ),
    named by its GPU model and runs unless `name` is given."""
    models = {", ".join(source.measured.gpu_names) or source.measured.devices for source in sources}
    if len(models) > 1:
        raise ValueError(f"a baseline is of one GPU model; these runs have {' and '.join(sorted(models))}")
    case_ids = list(dict.fromkeys(case_id for source in sources for case_id in source.measured.results))
    figures = [
        found
        for quantity in QUANTITIES
        for case_id in case_ids
        if (found := figure(quantity, case_id, sources)) is not None
    ]
    if not figures:
        raise ValueError("the runs measured none of the quantities a baseline records (none finished ok)")
    gpu_names = sources[0].measured.gpu_names
    gpu_model = gpu_names[0] if gpu_names else sources[0].measured.devices
    return Baseline(
        name=name or f"{gpu_model}: " + ", ".join(source.run.run_id for source in sources),
        kind="runs",
        gpu_model=gpu_model,
        driver=", ".join(sorted({source.driver for source in sources if source.driver})) or None,
        kit_version=", ".join(sorted({source.kit_version for source in sources})),
        images={image: digest for source in sources for image, digest in source.images.items()},
        made_at=made_at,
        runs=tuple(source.run for source in sources),
        figures=tuple(figures),
    ).sealed()


def load_baseline(path: Path) -> Baseline:
    """A baseline file, strictly and checked against its digest (ManifestError: one line naming the
    file, the key and why)."""
    try:
        text = read_regular(path, RUN_FILE_LIMIT)
    except FileNotFoundError:
        raise ManifestError(path, "", "file not found") from None
    except OSError as exc:
        raise ManifestError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    try:
        baseline = Baseline.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ManifestError(path, ".".join(str(part) for part in first["loc"]), first["msg"]) from None
    if baseline.digest != baseline.content_digest():
        raise ManifestError(
            path,
            "digest",
            f"the content's digest is {baseline.content_digest()}: the baseline changed after it was made",
        )
    return baseline
