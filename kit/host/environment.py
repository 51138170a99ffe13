"""Judging fingerprints: is this host fit to measure on, did it change during the run, and may
two numbers be compared?

The expectations and the comparability rules live in manifests/environment.yaml; this module
holds what each named check and aspect means. Everything here is a pure function of
fingerprints, so it is tested on recorded data.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.host.clock_events import PERFORMANCE_LIMITING_REASONS
from kit.host.fingerprint import Fingerprint, Gpu, GpuProcess
from kit.manifest import load_manifest, manifests_dir
from kit.units import counted

T = TypeVar("T")

Severity = Literal["fail", "warn"]
CheckName = Literal[
    "gpus_same_model",
    "gpu_count_matches_profile",
    "gpus_healthy",
    "mig_off",
    "ecc_enabled",
    "no_foreign_processes",
    "driver_supports_images",
    "cpu_governor_performance",
    "nvidia_container_toolkit_present",
]
Aspect = Literal[
    "gpu_model",
    "gpu_count",
    "topology_class",
    "driver_branch",
    "cpu_model",
    "rdma_network",
    "workload_sources",
    "python",
    "torch",
    "cuda_runtime",
    "cudnn",
    "nccl",
    "deepspeed",
    "transformers",
    "peft",
    "bitsandbytes",
    "flash-attn",
    "vllm",
]


class Expectation(BaseModel):
    """One named check of manifests/environment.yaml, how bad a violation is, and the fix."""

    model_config = ConfigDict(extra="forbid")

    name: CheckName
    severity: Severity
    remedy: str
    minimum_driver_by_cuda_major: dict[int, str] = Field(default_factory=dict)
    assumed_cuda_major: int | None = None

    @model_validator(mode="after")
    def _driver_check_has_its_table(self) -> Expectation:
        if self.name == "driver_supports_images" and (
            not self.minimum_driver_by_cuda_major or self.assumed_cuda_major is None
        ):
            raise ValueError("driver_supports_images needs minimum_driver_by_cuda_major and assumed_cuda_major")
        return self


class ComparabilityRules(BaseModel):
    """Aspects that must be equal for any two fingerprints, and the extra ones per stage."""

    model_config = ConfigDict(extra="forbid")

    always: tuple[Aspect, ...]
    stages: dict[str, tuple[Aspect, ...]]


class Expectations(BaseModel):
    """manifests/environment.yaml."""

    model_config = ConfigDict(extra="forbid")

    version: int
    expectations: tuple[Expectation, ...]
    comparability: ComparabilityRules

    @model_validator(mode="after")
    def _names_unique(self) -> Expectations:
        repeated = [name for name, n in Counter(e.name for e in self.expectations).items() if n > 1]
        if repeated:
            raise ValueError(f"expectation listed more than once: {', '.join(repeated)}")
        return self


class Check(BaseModel):
    """One row of `kit doctor`: what was expected, what was seen, and what to do about it."""

    name: str
    severity: Severity
    status: Literal["pass", "warn", "fail", "skip"]
    observed: str
    expected: str
    remedy: str


class Finding(BaseModel):
    """Something that changed between the fingerprints taken before and after a run."""

    kind: Literal["driver_changed", "gpu_missing", "ecc_errors_appeared", "clocks_limited", "foreign_process_appeared"]
    severity: Severity
    gpu: str | None = None
    detail: str


class Comparability(BaseModel):
    """Whether two fingerprints may be compared for a stage, and every reason they may not."""

    stage: str
    comparable: bool
    reasons: list[str] = Field(default_factory=list)


def load_expectations(path: Path | str | None = None) -> Expectations:
    """manifests/environment.yaml, or the file given."""
    return load_manifest(Path(path) if path else manifests_dir() / "environment.yaml", Expectations)


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------


class CheckAnswer(NamedTuple):
    """A check's answer: passed True/False, or None when it could not be evaluated here."""

    passed: bool | None
    observed: str
    expected: str
    severity: str | None = None  # a milder one than the expectation's, for this violation


def _label(gpu: Gpu) -> str:
    return f"GPU{gpu.index}"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _gib(n_bytes: int | None) -> str:
    return "memory unknown" if n_bytes is None else f"{n_bytes / 2**30:.1f} GiB"


def _no_gpu_reason(fingerprint: Fingerprint) -> str:
    return fingerprint.gpus.unavailable or "no GPUs visible to NVML"


def _per_gpu(
    fingerprint: Fingerprint,
    read: Callable[[Gpu], T | None],
    unreadable_field: str,
    is_wrong: Callable[[T], bool],
    describe: Callable[[Gpu, T], str],
    fine: str,
    expected: str,
) -> CheckAnswer:
    """Apply one per-GPU test; GPUs that do not report the value are named, not guessed."""
    gpus = fingerprint.gpus.gpus
    if not gpus:
        return CheckAnswer(None, _no_gpu_reason(fingerprint), expected)
    values = [(gpu, read(gpu)) for gpu in gpus]
    known = [(gpu, value) for gpu, value in values if value is not None]
    if not known:
        reasons = {gpu.unreadable.get(unreadable_field, "not reported") for gpu in gpus}
        return CheckAnswer(None, f"not reported by any GPU ({'; '.join(sorted(reasons))})", expected)
    wrong = [describe(gpu, value) for gpu, value in known if is_wrong(value)]
    silent = len(gpus) - len(known)
    note = f"; {counted(silent, 'GPU')} did not report it" if silent else ""
    if wrong:
        return CheckAnswer(False, "; ".join(wrong) + note, expected)
    return CheckAnswer(True, f"{fine} on {len(known)} of {len(gpus)} GPUs{note}", expected)


def _gpus_same_model(fp: Fingerprint, _: Expectation, __: int | None) -> CheckAnswer:
    expected = "every GPU the same model"
    if not fp.gpus.gpus:
        return CheckAnswer(None, _no_gpu_reason(fp), expected)
    models = Counter(gpu.name or "unknown model" for gpu in fp.gpus.gpus)
    observed = ", ".join(f"{count} x {name}" for name, count in models.most_common())
    return CheckAnswer(len(models) == 1, observed, expected)


def _gpu_count_matches_profile(fp: Fingerprint, _: Expectation, expected_gpus: int | None) -> CheckAnswer:
    if expected_gpus is None:
        return CheckAnswer(None, "the profile names no GPU count", "the profile's GPU count")
    count = len(fp.gpus.gpus)
    observed = counted(count, "GPU") + (f" ({fp.gpus.unavailable})" if fp.gpus.unavailable else "")
    expected = f"{counted(expected_gpus, 'GPU')}, as the profile's largest case is written for"
    if 0 < count < expected_gpus:  # the plan is fitted to the host's GPUs, each such case saying so
        return CheckAnswer(
            False,
            f"{observed}: the plan is fitted to them (cases marked 'fitted', never compared with the paper's figures)",
            expected,
            severity="warn",
        )
    return CheckAnswer(count >= expected_gpus, observed, expected)


def _gpus_healthy(fp: Fingerprint, _: Expectation, __: int | None) -> CheckAnswer:
    """The health section's verdict (kit.host.health) as one check: a critical check of the catalog
    past its threshold fails the host, a warning warns, nothing to check skips."""
    health = fp.health
    expected = "no critical check of manifests/health.yaml past its threshold"
    if health is None:
        return CheckAnswer(None, "no health section in this fingerprint", expected)
    if health.verdict == "not_applicable":
        return CheckAnswer(None, health.not_applicable or "nothing to check", expected)
    if health.verdict == "unknown":
        return CheckAnswer(None, "no health reading could be taken (see the health section)", expected)
    if health.verdict == "unhealthy":
        return CheckAnswer(False, f"unhealthy: {health.unhealthy_because}", expected)
    if health.verdict == "warnings":
        names = sorted({check.name for check in health.warnings})
        return CheckAnswer(False, f"{len(health.warnings)} warning(s): {', '.join(names)}", expected, "warn")
    return CheckAnswer(True, f"{len(health.checks)} health checks pass", expected)


def _mig_off(fp: Fingerprint, _: Expectation, __: int | None) -> CheckAnswer:
    # A GPU without MIG support refuses the query: for this check that is "off".
    return _per_gpu(
        fp,
        lambda gpu: bool(gpu.mig_enabled),
        "mig_enabled",
        lambda on: on,
        lambda gpu, _: f"{_label(gpu)}: MIG enabled",
        "MIG off or unsupported",
        "MIG off on every GPU (whole GPUs only)",
    )


def _ecc_enabled(fp: Fingerprint, _: Expectation, __: int | None) -> CheckAnswer:
    return _per_gpu(
        fp,
        lambda gpu: gpu.ecc_enabled,
        "ecc_enabled",
        lambda on: not on,
        lambda gpu, _: f"{_label(gpu)}: ECC off",
        "ECC on",
        "ECC on for every GPU that supports it",
    )


def _describe_processes(processes: list[GpuProcess]) -> str:
    return ", ".join(f"pid {p.pid} ({p.name or 'name unknown'}, {_gib(p.used_memory_bytes)})" for p in processes)


def _no_foreign_processes(fp: Fingerprint, _: Expectation, __: int | None) -> CheckAnswer:
    return _per_gpu(
        fp,
        lambda gpu: gpu.processes,
        "processes",
        bool,
        lambda gpu, processes: f"{_label(gpu)}: {_describe_processes(processes)}",
        "no processes",
        "no process on any GPU before the run",
    )


class CudaNeed(NamedTuple):
    """A CUDA version something on this host was built with, and where that was read."""

    what: str  # "image train", "this Python's torch"
    cuda: str  # "13.0.1"
    source: str


def _cuda_needs(fp: Fingerprint) -> list[CudaNeed]:
    needs = [
        CudaNeed(f"image {image.name}", image.cuda_version, image.source)
        for image in fp.images_cuda
        if image.cuda_version
    ]
    if fp.image and fp.image.cuda_runtime:
        needs.append(CudaNeed("this Python's torch", fp.image.cuda_runtime, "the probe of this Python"))
    return needs


def _major_minor(version: str) -> tuple[int, int]:
    parts = _version_key(version) + (0,)
    return parts[0], parts[1]


def driver_shortfall(
    need: CudaNeed, host_cuda: str | None, driver: str | None, minimum_by_major: dict[int, str]
) -> str | None:
    """Why the host's driver cannot run what `need` was built with, naming both versions and
    the fix; None when it can. The driver's own CUDA version (NVML) decides: NVIDIA's images
    refuse to start below their CUDA major.minor (NVIDIA_REQUIRE_CUDA), whatever minor-version
    compatibility would allow. Without it, the minimum driver of the CUDA major decides."""
    major, minor = _major_minor(need.cuda)
    minimum = minimum_by_major.get(major)
    fix = (
        f"install an NVIDIA driver >= {minimum} (the minimum for CUDA {major}.x)"
        if minimum
        else f"install an NVIDIA driver that supports CUDA {major}.{minor}"
    )
    if host_cuda is not None:
        if _major_minor(host_cuda) >= (major, minor):
            return None
        if _major_minor(host_cuda)[0] == major:
            fix = (
                f"install an NVIDIA driver that supports CUDA {major}.{minor} or later (nvidia-smi shows "
                f"the CUDA version a driver supports)"
            )
        return (
            f"{need.what} was built with CUDA {need.cuda} ({need.source}); driver {driver or 'unknown'} "
            f"supports CUDA up to {host_cuda}: {fix}"
        )
    if driver is None or minimum is None:
        return None
    if _version_key(driver) >= _version_key(minimum):
        return None
    return f"{need.what} was built with CUDA {need.cuda} ({need.source}); driver {driver} is below {minimum}: {fix}"


def _driver_supports_images(fp: Fingerprint, expectation: Expectation, _: int | None) -> CheckAnswer:
    needs = _cuda_needs(fp)
    if not needs:
        major = expectation.assumed_cuda_major
        needs = [CudaNeed(f"CUDA {major}.x images", f"{major}.0", "assumed: no image was read")]
    expected = "a driver that supports " + ", ".join(f"CUDA {n.cuda} ({n.what})" for n in needs)
    driver, host_cuda = fp.gpus.driver_version, fp.gpus.cuda_driver_version
    if driver is None and host_cuda is None:
        reason = fp.gpus.unavailable or fp.gpus.unreadable.get("driver_version", "not reported")
        return CheckAnswer(None, f"driver version unknown ({reason})", expected)
    problems = [
        problem
        for need in needs
        if (problem := driver_shortfall(need, host_cuda, driver, expectation.minimum_driver_by_cuda_major))
    ]
    observed = f"driver {driver or 'unknown'}, CUDA {host_cuda or 'unknown'}"
    if problems:
        return CheckAnswer(False, "; ".join(problems), expected)
    return CheckAnswer(True, observed, expected)


def _cpu_governor_performance(fp: Fingerprint, _: Expectation, __: int | None) -> CheckAnswer:
    governor = fp.host.cpu.frequency_governor
    expected = "CPU frequency governor 'performance'"
    if governor is None:
        return CheckAnswer(None, fp.host.unreadable.get("cpu.frequency_governor", "not reported"), expected)
    return CheckAnswer(governor == "performance", f"governor {governor}", expected)


def _nvidia_container_toolkit_present(fp: Fingerprint, _: Expectation, __: int | None) -> CheckAnswer:
    runtime = fp.container_runtime
    expected = "NVIDIA container toolkit installed, so containers can be given the GPUs"
    if not fp.gpus.gpus:
        return CheckAnswer(None, _no_gpu_reason(fp), expected)
    if runtime.nvidia_container_toolkit or "nvidia" in runtime.runtimes:
        found = runtime.nvidia_container_toolkit or "version unknown"
        return CheckAnswer(True, f"toolkit {found}; runtimes: {', '.join(runtime.runtimes) or 'none'}", expected)
    return CheckAnswer(False, runtime.unreadable.get("nvidia_container_toolkit", "not found"), expected)


CHECKS: dict[str, Callable[[Fingerprint, Expectation, int | None], CheckAnswer]] = {
    "gpus_same_model": _gpus_same_model,
    "gpu_count_matches_profile": _gpu_count_matches_profile,
    "gpus_healthy": _gpus_healthy,
    "mig_off": _mig_off,
    "ecc_enabled": _ecc_enabled,
    "no_foreign_processes": _no_foreign_processes,
    "driver_supports_images": _driver_supports_images,
    "cpu_governor_performance": _cpu_governor_performance,
    "nvidia_container_toolkit_present": _nvidia_container_toolkit_present,
}


def evaluate(fp: Fingerprint, expectations: Expectations, expected_gpus: int | None) -> list[Check]:
    """One Check per expectation in manifest order; a violation takes the expectation's severity."""
    checks = []
    for expectation in expectations.expectations:
        verdict = CHECKS[expectation.name](fp, expectation, expected_gpus)
        severity = verdict.severity or expectation.severity
        if verdict.passed is None:
            status = "skip"
        else:
            status = "pass" if verdict.passed else severity
        checks.append(
            Check(
                name=expectation.name,
                severity=severity,
                status=status,
                observed=verdict.observed,
                expected=verdict.expected,
                remedy=expectation.remedy,
            )
        )
    return checks


# ---------------------------------------------------------------------------------------------
# Drift during a run
# ---------------------------------------------------------------------------------------------


def _gpu_key(gpu: Gpu) -> str:
    return gpu.uuid or f"index {gpu.index}"


def _gpu_drift(old: Gpu, new: Gpu, label: str) -> list[Finding]:
    findings = []
    errors_before = old.ecc_uncorrected_aggregate or 0
    errors_after = new.ecc_uncorrected_aggregate or 0
    if errors_after > errors_before:
        findings.append(
            Finding(
                kind="ecc_errors_appeared",
                severity="fail",
                gpu=label,
                detail=f"uncorrectable ECC errors {errors_before} before, {errors_after} after",
            )
        )
    limits = PERFORMANCE_LIMITING_REASONS & (set(new.clock_event_reasons or []) - set(old.clock_event_reasons or []))
    if limits:
        findings.append(
            Finding(
                kind="clocks_limited",
                severity="warn",
                gpu=label,
                detail="clocks limited after the run: " + ", ".join(sorted(limits)),
            )
        )
    known_pids = {process.pid for process in old.processes or []}
    arrivals = [process for process in new.processes or [] if process.pid not in known_pids]
    if arrivals:
        findings.append(
            Finding(kind="foreign_process_appeared", severity="fail", gpu=label, detail=_describe_processes(arrivals))
        )
    return findings


def drift(before: Fingerprint, after: Fingerprint) -> list[Finding]:
    """What changed from before a run to after it that puts the run's numbers in doubt.

    GPUs are matched by UUID (redacted tokens match too, given the same salt), else by index.
    """
    findings = []
    old_driver, new_driver = before.gpus.driver_version, after.gpus.driver_version
    if old_driver != new_driver:
        findings.append(
            Finding(kind="driver_changed", severity="fail", detail=f"driver {old_driver} before, {new_driver} after")
        )
    after_gpus = {_gpu_key(gpu): gpu for gpu in after.gpus.gpus}
    for old in before.gpus.gpus:
        label = f"{_label(old)} ({_gpu_key(old)})"
        new = after_gpus.get(_gpu_key(old))
        if new is None:
            findings.append(
                Finding(
                    kind="gpu_missing", severity="fail", gpu=label, detail="present before the run, missing after it"
                )
            )
        else:
            findings.extend(_gpu_drift(old, new, label))
    return findings


# ---------------------------------------------------------------------------------------------
# Comparability
# ---------------------------------------------------------------------------------------------


class _AspectValue(NamedTuple):
    """An aspect's value in one fingerprint, or None with the reason it is not known."""

    value: str | None
    unknown_because: str = ""


def _image_field(field: str) -> Callable[[Fingerprint], _AspectValue]:
    def read(fp: Fingerprint) -> _AspectValue:
        if fp.image is None:
            return _AspectValue(None, "no image probe")
        return _AspectValue(getattr(fp.image, field) or "not present")

    return read


def _package(distribution: str) -> Callable[[Fingerprint], _AspectValue]:
    def read(fp: Fingerprint) -> _AspectValue:
        if fp.image is None:
            return _AspectValue(None, "no image probe")
        if distribution not in fp.image.packages:
            return _AspectValue(None, "the image probe did not look for it")
        return _AspectValue(fp.image.packages[distribution] or "not installed")

    return read


def _gpu_models(fp: Fingerprint) -> _AspectValue:
    return _AspectValue(", ".join(sorted({gpu.name or "unknown model" for gpu in fp.gpus.gpus})) or "no GPUs visible")


def _topology_class(fp: Fingerprint) -> _AspectValue:
    topology_class = fp.topology.topology_class
    return _AspectValue(topology_class.label if topology_class else "no topology matrix")


def _rdma_network(fp: Fingerprint) -> _AspectValue:
    active = sorted(
        f"{port.link_layer or 'unknown layer'} {port.rate or 'unknown rate'}"
        for port in fp.network.rdma_ports
        if port.state == "ACTIVE"
    )
    counted = Counter(active)
    return _AspectValue(", ".join(f"{n} x {kind}" for kind, n in counted.items()) or "none active")


# Each aspect: how it is named in a reason, and how to read it from a fingerprint. Hardware
# that is absent is a value ("no GPUs visible"); an image that was not probed is unknown.
ASPECTS: dict[str, tuple[str, Callable[[Fingerprint], _AspectValue]]] = {
    "gpu_model": ("GPU model", _gpu_models),
    "gpu_count": ("GPU count", lambda fp: _AspectValue(str(len(fp.gpus.gpus)))),
    "topology_class": ("topology class", _topology_class),
    "driver_branch": (
        "driver branch",
        lambda fp: _AspectValue(
            fp.gpus.driver_version.split(".")[0] if fp.gpus.driver_version else "no driver reported"
        ),
    ),
    "cpu_model": ("CPU model", lambda fp: _AspectValue(fp.host.cpu.model or "not reported")),
    "rdma_network": ("RDMA network", _rdma_network),
    "workload_sources": ("workload sources (SHA-256)", lambda fp: _AspectValue(fp.kit.workload_sources_sha256)),
    "python": ("Python", _image_field("python")),
    "torch": ("torch", _image_field("torch")),
    "cuda_runtime": ("CUDA runtime", _image_field("cuda_runtime")),
    "cudnn": ("cuDNN", _image_field("cudnn")),
    "nccl": ("NCCL", _image_field("nccl")),
    **{
        name: (name, _package(name))
        for name in ("deepspeed", "transformers", "peft", "bitsandbytes", "flash-attn", "vllm")
    },
}


def comparable(a: Fingerprint, b: Fingerprint, stage: str, rules: ComparabilityRules | None = None) -> Comparability:
    """May numbers of `stage` measured in `a` and in `b` be compared? If not, every reason why.

    The aspects compared are the manifest's `always` list plus the stage's own list.
    """
    rules = rules or load_expectations().comparability
    if stage not in rules.stages:
        raise ValueError(f"unknown stage {stage!r}; environment.yaml knows {', '.join(sorted(rules.stages))}")
    reasons = []
    for aspect in dict.fromkeys(rules.always + rules.stages[stage]):
        label, read = ASPECTS[aspect]
        left, right = read(a), read(b)
        if left.value is None or right.value is None:
            sides = [
                f"{name}: {side.unknown_because}" for name, side in (("A", left), ("B", right)) if side.value is None
            ]
            reasons.append(f"{label} unknown ({'; '.join(sides)})")
        elif left.value != right.value:
            reasons.append(f"{label} differs: {left.value} vs {right.value}")
    return Comparability(stage=stage, comparable=not reasons, reasons=reasons)
