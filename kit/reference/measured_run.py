"""A run as claim evaluation sees it: its results by case, its platform, and which of its figures
are no measurement (kit.measure.validity); the variant of the host a claim of another platform is read on.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Literal, NamedTuple

from pydantic import BaseModel

from kit.host.fingerprint import Calibration, Fingerprint
from kit.host.health import HostHealth
from kit.measure.validity import invalid_reasons
from kit.reference.published import PlatformSpec
from kit.rundir.schema import Metric, Result, RunInfo


class MeasuredRun(BaseModel):
    """What claim evaluation needs of one run: its results, its hardware, its comparability."""

    label: str
    profile: str
    comparable_to_reference: bool
    gpu_names: tuple[str, ...]
    cpu_names: tuple[str, ...] = ()
    interconnect: Literal["nvlink", "pcie"] | None = None
    results: dict[str, Result]
    invalid: dict[str, list[str]] = {}  # case id -> why its figures are no measurement (kit.measure.validity)
    calibration: Calibration | None = None  # what the host achieved in preflight (the fingerprint's)
    health: HostHealth | None = None  # the host's health before the run (the fingerprint's)
    # case id -> figures computed from its files rather than written by its workload (a serving
    # sweep's capacity within `objectives`, kit.measure.capacity)
    derived: dict[str, dict[str, Metric]] = {}
    objectives: str | None = None  # the latency objectives the derived figures are held to

    def metric(self, case_id: str, name: str) -> Metric | None:
        """The case's figure `name`, as its result holds it or as derived from its files."""
        result = self.results.get(case_id)
        found = result.metrics.get(name) if result is not None else None
        return found if found is not None else self.derived.get(case_id, {}).get(name)

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
    gpus = set(info.host.gpus)
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
        health=fingerprint.health if fingerprint is not None else None,
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
