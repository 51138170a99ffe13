"""Judging a host's health readings against the catalog (manifests/health.yaml): each check, on
each GPU or on the host, pass, warn, fail, unknown (not reported) or not applicable. The catalog
holds the thresholds, severities and sources; this module what each check reads and which way
its threshold points. Pure: recorded outputs of real machines test it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.host.health import GpuHealth, HealthCheck, HostHealth, Severity
from kit.manifest import load_manifest, manifests_dir

CATALOG_FILE = "health.yaml"
HealthCheckName = Literal[
    "ecc_uncorrectable_volatile",
    "ecc_uncorrectable_aggregate",
    "ecc_correctable_volatile",
    "retired_pages_pending",
    "remapped_rows_pending",
    "remapped_rows_failure",
    "nvlink_inactive",
    "nvlink_crc_errors",
    "nvlink_replay_errors",
    "nvlink_recovery_errors",
    "pcie_width_below_max",
    "pcie_gen_below_device_max",
    "clock_hw_slowdown_at_idle",
    "clock_sw_limit_at_idle",
    "power_limit_fraction_of_default",
    "persistence_mode_off",
    "temperature_headroom_c",
    "xid_critical",
    "xid_warning",
    "dcgm_diag",
]
HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_LIMITS = ("sw_power_cap", "sw_thermal_slowdown")


class CatalogCheck(BaseModel):
    """One check of the catalog: its threshold, severity, source and remedy (and, for an Xid
    check, the Xids it counts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: HealthCheckName
    severity: Severity
    threshold: float
    source: str = Field(min_length=1)
    remedy: str = Field(min_length=1)
    xids: tuple[int, ...] = ()


class HealthCatalog(BaseModel):
    """manifests/health.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int
    checks: tuple[CatalogCheck, ...]

    @model_validator(mode="after")
    def _names_unique(self) -> HealthCatalog:
        repeated = [name for name, n in Counter(check.name for check in self.checks).items() if n > 1]
        if repeated:
            raise ValueError(f"check listed more than once: {', '.join(repeated)}")
        return self

    @property
    def label(self) -> str:
        return f"manifests/{CATALOG_FILE} version {self.version}"


def load_catalog(path: Path | None = None) -> HealthCatalog:
    """manifests/health.yaml, or the file given (a ManifestError in one line where it is wrong)."""
    return load_manifest(path or manifests_dir() / CATALOG_FILE, HealthCatalog)


class Reading(NamedTuple):
    """What a check read on one GPU: the value held to the threshold (None: not reported), and
    how to say it."""

    value: float | None
    observed: str


NOT_REPORTED = "N/A on this GPU"


def _count(value: int | None, unit: str) -> Reading:
    return Reading(None if value is None else float(value), NOT_REPORTED if value is None else f"{value} {unit}")


def _flag(value: bool | None) -> Reading:
    return Reading(None if value is None else float(value), NOT_REPORTED if value is None else "yes" if value else "no")


def _nvlink(gpu: GpuHealth, field: str) -> Reading:
    """The sum of one NVLink counter over the GPU's links; a GPU without links is no NVLink board."""
    links = gpu.nvlink or []
    counts = [(link.link, getattr(link, field)) for link in links if getattr(link, field) is not None]
    if not counts:
        return Reading(None, "no counter read" if links else "no NVLink")
    bad = [f"link {link}: {count}" for link, count in counts if count]
    return Reading(float(sum(count for _, count in counts)), "; ".join(bad) or f"0 on {len(counts)} links")


def _inactive_links(gpu: GpuHealth) -> Reading:
    if gpu.nvlink_all_inactive:
        return Reading(float("inf"), "every link inactive (NVML: all links are inActive)")
    if not gpu.nvlink:
        return Reading(None, "no NVLink")
    down = [link.link for link in gpu.nvlink if not link.active]
    return Reading(
        float(len(down)),
        f"{len(down)} of {len(gpu.nvlink)} inactive (link {', '.join(map(str, down))})"
        if down
        else f"all {len(gpu.nvlink)} active",
    )


def _pcie_width(gpu: GpuHealth) -> Reading:
    if gpu.pcie_width_current is None or gpu.pcie_width_max is None:
        return Reading(None, NOT_REPORTED)
    return Reading(
        float(gpu.pcie_width_current < gpu.pcie_width_max), f"x{gpu.pcie_width_current} of x{gpu.pcie_width_max}"
    )


def _pcie_gen(gpu: GpuHealth) -> Reading:
    now = f"Gen{gpu.pcie_gen_current} now" if gpu.pcie_gen_current is not None else "current unknown"
    if gpu.pcie_gen_max is None or gpu.pcie_gen_device_max is None:
        return Reading(None, f"link Gen{gpu.pcie_gen_max or '?'} ({now}); the device's own maximum not reported")
    return Reading(
        float(gpu.pcie_gen_max < gpu.pcie_gen_device_max),
        f"link at most Gen{gpu.pcie_gen_max}, device Gen{gpu.pcie_gen_device_max} ({now})",
    )


def _reasons(gpu: GpuHealth, which: tuple[str, ...]) -> Reading:
    if gpu.clock_event_reasons is None:
        return Reading(None, NOT_REPORTED)
    active = [reason for reason in gpu.clock_event_reasons if reason in which]
    return Reading(float(len(active)), ", ".join(active) or "none active")


def _power(gpu: GpuHealth) -> Reading:
    if gpu.power_limit_w is None or not gpu.default_power_limit_w:
        return Reading(None, NOT_REPORTED)
    return Reading(
        gpu.power_limit_w / gpu.default_power_limit_w,
        f"{gpu.power_limit_w:g} W of a default {gpu.default_power_limit_w:g} W",
    )


def _headroom(gpu: GpuHealth) -> Reading:
    if gpu.temperature_headroom_c is None:
        return Reading(None, NOT_REPORTED)
    now = f" at {gpu.temperature_c} °C" if gpu.temperature_c is not None else ""
    return Reading(float(gpu.temperature_headroom_c), f"{gpu.temperature_headroom_c} °C below slowdown{now}")


# Each GPU check: what it reads, whether its threshold is a most or a least, and its unit (none: a flag).
GPU_CHECKS: dict[str, tuple[Callable[[GpuHealth], Reading], Literal["at_most", "at_least"], str]] = {
    "ecc_uncorrectable_volatile": (lambda g: _count(g.ecc_uncorrectable_volatile, "errors"), "at_most", "errors"),
    "ecc_uncorrectable_aggregate": (lambda g: _count(g.ecc_uncorrectable_aggregate, "errors"), "at_most", "errors"),
    "ecc_correctable_volatile": (lambda g: _count(g.ecc_correctable_volatile, "errors"), "at_most", "errors"),
    "retired_pages_pending": (lambda g: _flag(g.retired_pages_pending), "at_most", ""),
    "remapped_rows_pending": (lambda g: _flag(g.remapped_rows_pending), "at_most", ""),
    "remapped_rows_failure": (lambda g: _flag(g.remapped_rows_failure), "at_most", ""),
    "nvlink_inactive": (_inactive_links, "at_most", "inactive links"),
    "nvlink_crc_errors": (lambda g: _nvlink(g, "crc_errors"), "at_most", "errors"),
    "nvlink_replay_errors": (lambda g: _nvlink(g, "replay_errors"), "at_most", "errors"),
    "nvlink_recovery_errors": (lambda g: _nvlink(g, "recovery_errors"), "at_most", "errors"),
    "pcie_width_below_max": (_pcie_width, "at_most", ""),
    "pcie_gen_below_device_max": (_pcie_gen, "at_most", ""),
    "clock_hw_slowdown_at_idle": (lambda g: _reasons(g, HW_SLOWDOWN), "at_most", "reasons active"),
    "clock_sw_limit_at_idle": (lambda g: _reasons(g, SW_LIMITS), "at_most", "reasons active"),
    "power_limit_fraction_of_default": (_power, "at_least", "× the default power limit"),
    "persistence_mode_off": (
        lambda g: Reading(
            None if g.persistence_mode is None else float(not g.persistence_mode),
            NOT_REPORTED if g.persistence_mode is None else "on" if g.persistence_mode else "off",
        ),
        "at_most",
        "",
    ),
    "temperature_headroom_c": (_headroom, "at_least", "°C below slowdown"),
}


def _threshold_text(check: CatalogCheck, direction: str, unit: str) -> str:
    """ "at most 0 errors", "at least 20 °C below slowdown"; a flag's (no unit) "no"."""
    if not unit:
        return "no" if check.threshold == 0 else f"at most {check.threshold:g}"
    return f"{'at most' if direction == 'at_most' else 'at least'} {check.threshold:g} {unit}"


def _scope(gpu: GpuHealth) -> str:
    return f"GPU{gpu.index} ({gpu.pci_bus_id})"


def _gpu_check(check: CatalogCheck, gpu: GpuHealth) -> HealthCheck:
    read, direction, unit = GPU_CHECKS[check.name]
    reading = read(gpu)
    threshold = _threshold_text(check, direction, unit)
    if reading.value is None:  # nvidia-smi prints N/A for what the GPU does not have (ECC, NVLink, page retirement)
        status = "not_applicable"
    else:
        within = reading.value <= check.threshold if direction == "at_most" else reading.value >= check.threshold
        status = "pass" if within else "fail" if check.severity == "critical" else "warn"
    return HealthCheck(
        name=check.name,
        scope=_scope(gpu),
        observed=reading.observed,
        threshold=threshold,
        severity=check.severity,
        status=status,
        source=check.source,
        remedy=check.remedy,
    )


def _same_pci(xid_pci: str, bus_id: str) -> bool:
    """The driver's "0000:9b:00" is nvidia-smi's "00000000:9B:00.0" (domain, bus, device)."""

    def parts(text: str) -> tuple[int, ...]:
        fields = text.lower().split(".")[0].split(":")
        return tuple(int(field, 16) for field in fields[-3:])

    try:
        return parts(xid_pci) == parts(bus_id)
    except ValueError:
        return False


def _xid_check(check: CatalogCheck, health: HostHealth) -> HealthCheck:
    base = {
        "name": check.name,
        "scope": "host",
        "threshold": f"no Xid {', '.join(map(str, check.xids))} since boot",
        "severity": check.severity,
        "source": check.source,
        "remedy": check.remedy,
    }
    if health.xid.source is None:
        return HealthCheck(**base, observed=f"kernel log not read: {health.xid.unreadable}", status="unknown")
    found = [event for event in health.xid.events if event.xid in check.xids]
    if len(found) <= check.threshold:
        return HealthCheck(**base, observed=f"none in {health.xid.source}", status="pass")
    per: Counter[str] = Counter()
    for event in found:
        gpu = next((g for g in health.gpus if _same_pci(event.pci, g.pci_bus_id)), None)
        per[f"Xid {event.xid} on {f'GPU{gpu.index}' if gpu else event.pci}"] += 1
    observed = "; ".join(f"{what} ({n}×)" if n > 1 else what for what, n in per.items())
    return HealthCheck(
        **base, observed=f"{observed} ({health.xid.source})", status="fail" if check.severity == "critical" else "warn"
    )


def _dcgm_check(check: CatalogCheck, health: HostHealth) -> HealthCheck:
    base = {
        "name": check.name,
        "scope": "host",
        "threshold": "no failed test (a warned one warns)",
        "severity": check.severity,
        "source": check.source,
        "remedy": check.remedy,
    }
    diag = health.dcgm
    if diag is None:
        return HealthCheck(**base, observed="not run (ask for it: --dcgm-diag LEVEL)", status="not_applicable")
    if diag.unavailable:
        return HealthCheck(**base, observed=f"level {diag.level}: {diag.unavailable}", status="unknown")
    failed = [r for r in diag.results if r.status == "fail"]
    warned = [r for r in diag.results if r.status == "warn"]
    named = [f"{r.test} {r.status}ed on GPU {r.gpus}" + (f" ({r.detail})" if r.detail else "") for r in failed + warned]
    counts = Counter(r.status for r in diag.results)
    summary = ", ".join(f"{n} {status}" for status, n in counts.items())
    observed = f"level {diag.level}, DCGM {diag.version or 'version unknown'}: " + ("; ".join(named) or summary)
    status = "fail" if failed and check.severity == "critical" else "warn" if failed or warned else "pass"
    return HealthCheck(**base, observed=observed[:600], status=status)


HOST_CHECKS: dict[str, Callable[[CatalogCheck, HostHealth], HealthCheck]] = {
    "xid_critical": _xid_check,
    "xid_warning": _xid_check,
    "dcgm_diag": _dcgm_check,
}


def judge(health: HostHealth, catalog: HealthCatalog) -> list[HealthCheck]:
    """Every check of the catalog, in its order: per GPU for a GPU's, once for the host's; on a
    host with nothing to check, each once, not applicable, saying why."""
    if health.not_applicable is not None:
        return [
            HealthCheck(
                name=check.name,
                scope="host",
                observed=health.not_applicable,
                threshold="",
                severity=check.severity,
                status="not_applicable",
                source=check.source,
                remedy=check.remedy,
            )
            for check in catalog.checks
        ]
    checks = []
    for check in catalog.checks:
        if check.name in HOST_CHECKS:
            checks.append(HOST_CHECKS[check.name](check, health))
        else:
            checks += [_gpu_check(check, gpu) for gpu in health.gpus]
    return checks


def judged(health: HostHealth, catalog: HealthCatalog | None = None) -> HostHealth:
    """The health section with its checks judged against the catalog (manifests/health.yaml)."""
    catalog = catalog or load_catalog()
    return health.model_copy(update={"checks": judge(health, catalog), "catalog": catalog.label})
