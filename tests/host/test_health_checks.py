"""kit.host.health_checks: the catalog (manifests/health.yaml) judged on recorded outputs of real
machines (tests/fixtures/health): a healthy host, a pending row remap (critical), an inactive
NVLink (critical), a hardware Xid (critical), a capped power limit (a warning), and a host
without GPUs (every check not applicable).
"""

from support import FIXTURES

from kit.host.dcgm_diag import parse_diag
from kit.host.health import HostHealth, XidLog
from kit.host.health_checks import judged, load_catalog
from kit.host.health_collection import collect_health
from kit.host.nvidia_smi_query import parse_query
from kit.host.nvlink_report import parse_link_status
from kit.host.xid_events import parse_xid_lines

HEALTH = FIXTURES / "health"


def host(query: str, **fields) -> HostHealth:
    driver, gpus = parse_query((HEALTH / query).read_text())
    fields.setdefault("xid", XidLog(source="dmesg -T"))
    return judged(HostHealth(catalog="", driver_version=driver, gpus=gpus, **fields))


def by(health: HostHealth, name: str, scope: str | None = None):
    return [check for check in health.checks if check.name == name and scope in (None, check.scope)]


def test_every_check_has_a_threshold_severity_and_source():
    catalog = load_catalog()
    assert len({check.name for check in catalog.checks}) == len(catalog.checks) >= 15
    assert all(check.source.strip() and check.remedy.strip() for check in catalog.checks)


def test_healthy_host_has_only_warnings():
    health = host("nvidia-smi-q-a100x8-healthy.txt")
    assert health.failing == []
    assert {check.name for check in health.warnings} == {"persistence_mode_off"}
    assert health.verdict == "warnings"
    assert health.catalog.startswith("manifests/health.yaml version")


def test_pending_row_remap_makes_the_host_unhealthy_naming_the_gpu():
    health = host("nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt")
    assert health.verdict == "unhealthy"
    assert health.unhealthy_because == "remapped_rows_pending on GPU1 (00000000:9E:00.0): yes"
    (correctable,) = by(health, "ecc_correctable_volatile", "GPU1 (00000000:9E:00.0)")
    assert (correctable.status, correctable.observed, correctable.severity) == ("warn", "353 errors", "warning")


def test_uncorrectable_aggregate_and_capped_power_warn():
    health = host("nvidia-smi-q-gh200-dram-uncorrectable-power-capped.txt")
    assert health.verdict == "warnings"
    (power,) = by(health, "power_limit_fraction_of_default")
    assert (power.status, power.observed) == ("warn", "700 W of a default 900 W")
    assert by(health, "ecc_uncorrectable_aggregate")[0].status == "warn"
    assert by(health, "ecc_uncorrectable_volatile")[0].status == "pass"


def test_inactive_nvlink_is_critical():
    health = HostHealth(catalog="", xid=XidLog(source="dmesg -T"))
    driver, gpus = parse_query((HEALTH / "nvidia-smi-q-a100x8-healthy.txt").read_text())
    links = parse_link_status((HEALTH / "nvlink-s-v100x8-inactive.txt").read_text())
    gpus = [gpu.model_copy(update={"nvlink": links.get(gpu.index)}) for gpu in gpus]
    health = judged(health.model_copy(update={"gpus": gpus, "driver_version": driver}))
    inactive = {check.scope: check for check in by(health, "nvlink_inactive") if check.status == "fail"}
    assert set(inactive) == {f"GPU{i} ({gpus[i].pci_bus_id})" for i in (3, 4, 5, 6)}
    assert inactive[f"GPU3 ({gpus[3].pci_bus_id})"].observed == "2 of 6 inactive (link 3, 5)"
    assert health.verdict == "unhealthy"


def test_hardware_xid_fails_the_host():
    events = parse_xid_lines((HEALTH / "dmesg-xid-119.log").read_text())
    health = host("nvidia-smi-q-a100x8-healthy.txt", xid=XidLog(source="dmesg -T", events=events))
    (xid,) = by(health, "xid_critical")
    assert xid.status == "fail"
    assert xid.observed.startswith("Xid 119 on 0000:9b:00 (5×)")


def test_unreadable_kernel_log_is_unknown_not_pass():
    health = host("nvidia-smi-q-a100x8-healthy.txt", xid=XidLog(unreadable="dmesg: read kernel buffer failed"))
    assert by(health, "xid_critical")[0].status == "unknown"


def test_dcgm_diag_all_passed_and_its_absence():
    diag = parse_diag((HEALTH / "dcgmi-diag-r1-dcgm-3.1.0-8gpu.json").read_text(), 1)
    assert by(host("nvidia-smi-q-a100x8-healthy.txt", dcgm=diag), "dcgm_diag")[0].status == "pass"
    assert by(host("nvidia-smi-q-a100x8-healthy.txt"), "dcgm_diag")[0].status == "not_applicable"


def test_this_cpu_host_says_every_check_not_applicable():
    health = collect_health()
    if health.gpus:
        return  # a GPU host: judged above on recorded outputs
    assert health.verdict == "not_applicable"
    assert health.not_applicable and "no NVIDIA GPU" in health.not_applicable
    assert {check.status for check in health.checks} == {"not_applicable"}
    assert len(health.checks) == len(load_catalog().checks)
