"""kit.host.environment: the expectations manifest, host checks, drift and comparability.

The fingerprints here are built from recorded data: the 8 x H20-3e host reported in
https://github.com/sgl-project/sglang/issues/28893 (driver, CUDA and framework versions, and
its `nvidia-smi topo -m`, tests/fixtures/topo/h20x8-nvswitch-mlx5.txt), with per-GPU health
values set to what each test needs.
"""

from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from support import FIXTURES, REPO

from kit.host import collection as fingerprint_collection
from kit.host import environment, redaction_tokens
from kit.host.environment import comparable, drift, evaluate, load_expectations
from kit.host.fingerprint import (
    ContainerRuntime,
    CpuInfo,
    Fingerprint,
    Gpu,
    GpuInventory,
    GpuProcess,
    HostInfo,
    ImageCuda,
    ImageProbe,
    KitInfo,
    NetworkInfo,
    NvLinkState,
    RdmaPort,
    Topology,
)
from kit.host.health import HostHealth, XidLog
from kit.host.health_checks import judged
from kit.host.nvidia_smi_query import parse_query
from kit.host.nvidia_topology import classify_topology, parse_topology_matrix
from kit.manifest import ManifestError

ROOT = REPO
TOPO = FIXTURES / "topo"


def topology(name: str) -> Topology:
    matrix = parse_topology_matrix((TOPO / name).read_text())
    return Topology(matrix=matrix, topology_class=classify_topology(matrix))


def healthy_gpu(index: int, name: str = "NVIDIA H20-3e") -> Gpu:
    return Gpu(
        index=index,
        name=name,
        uuid=f"GPU-h20-{index}",
        memory_bytes=141 * 2**30,
        pcie_gen_current=5,
        pcie_gen_max=5,
        pcie_width_current=16,
        pcie_width_max=16,
        nvlink=NvLinkState(links=18, active_links=18, version_code=6),
        persistence_mode=True,
        ecc_enabled=True,
        ecc_uncorrected_aggregate=0,
        mig_enabled=False,
        power_limit_w=500.0,
        clock_event_reasons=["gpu_idle"],
        processes=[],
    )


def h20_host(**image_changes) -> Fingerprint:
    image = {
        "python": "3.10.12",
        "torch": "2.11.0+cu130",
        "cuda_runtime": "13.0",
        "packages": {
            "deepspeed": None,
            "transformers": "5.8.1",
            "peft": None,
            "bitsandbytes": None,
            "flash-attn": None,
            "vllm": None,
        },
    } | image_changes
    return Fingerprint(
        collected_at=datetime(2026, 6, 29, tzinfo=timezone.utc),
        host=HostInfo(
            hostname="node-a", cpu=CpuInfo(model="the test host's CPU", sockets=2, frequency_governor="performance")
        ),
        gpus=GpuInventory(
            driver_version="580.126.09", cuda_driver_version="13.0", gpus=[healthy_gpu(i) for i in range(8)]
        ),
        topology=topology("h20x8-nvswitch-mlx5.txt"),
        network=NetworkInfo(
            rdma_ports=[
                RdmaPort(
                    device=f"mlx5_{i}",
                    port=1,
                    state="ACTIVE",
                    rate="400 Gb/sec (4X NDR)",
                    rate_gbps=400.0,
                    link_layer="InfiniBand",
                )
                for i in range(8)
            ]
        ),
        container_runtime=ContainerRuntime(
            docker_server_version="28.2.2",
            runtimes=["io.containerd.runc.v2", "nvidia", "runc"],
            nvidia_container_toolkit="1.17.8",
        ),
        image=ImageProbe.model_validate(image),
        kit=KitInfo(version="0.1.0", workload_sources_sha256="a" * 64),
    )


def with_gpu(fp: Fingerprint, index: int, **changes) -> Fingerprint:
    gpus = [gpu.model_copy(update=changes) if gpu.index == index else gpu for gpu in fp.gpus.gpus]
    return fp.model_copy(update={"gpus": fp.gpus.model_copy(update={"gpus": gpus})})


def with_driver(fp: Fingerprint, driver: str, cuda: str | None) -> Fingerprint:
    """Another driver, with the CUDA version nvidia-smi reports for it (None: not reported)."""
    return fp.model_copy(
        update={"gpus": fp.gpus.model_copy(update={"driver_version": driver, "cuda_driver_version": cuda})}
    )


def with_images(fp: Fingerprint, **cuda_by_image: str) -> Fingerprint:
    images = [
        ImageCuda(
            name=name, reference=f"kit/{name}:0.1.0", cuda_version=version, source="env CUDA_VERSION of the image"
        )
        for name, version in cuda_by_image.items()
    ]
    return fp.model_copy(update={"images_cuda": images, "image": None})


@pytest.fixture(scope="module")
def expectations():
    return load_expectations()


def by_name(checks):
    return {check.name: check for check in checks}


# --- the manifest ----------------------------------------------------------------------------


def test_manifest_lists_every_check_once(expectations):
    assert [e.name for e in expectations.expectations] == list(environment.CHECKS)


def test_manifest_has_comparability_rules_for_every_protocol_stage(expectations):
    protocol = yaml.safe_load((ROOT / "manifests" / "protocol.yaml").read_text())
    assert set(expectations.comparability.stages) == set(protocol["stages"])


def write_manifest(tmp_path, expectations_yaml: str) -> Path:
    path = tmp_path / "environment.yaml"
    path.write_text(
        "version: 1\nexpectations:\n"
        + expectations_yaml
        + "comparability: {always: [gpu_model], stages: {comm: [nccl]}}\n"
    )
    return path


def test_unknown_check_in_the_manifest_is_a_one_line_error(tmp_path):
    path = write_manifest(tmp_path, "  - {name: gpus_fast, severity: fail, remedy: x}\n")
    with pytest.raises(ManifestError, match=r"expectations\.0\.name"):
        load_expectations(path)


def test_driver_check_without_its_minimum_table_is_rejected(tmp_path):
    path = write_manifest(tmp_path, "  - {name: driver_supports_images, severity: fail, remedy: x}\n")
    with pytest.raises(ManifestError, match="minimum_driver_by_cuda_major"):
        load_expectations(path)


def test_an_expectation_listed_twice_is_rejected(tmp_path):
    entry = "  - {name: mig_off, severity: fail, remedy: x}\n"
    with pytest.raises(ManifestError, match="more than once"):
        load_expectations(write_manifest(tmp_path, entry * 2))


# --- checks ----------------------------------------------------------------------------------


def test_healthy_host_passes_every_check(expectations):
    checks = evaluate(h20_host(), expectations, expected_gpus=8)
    not_passed = {check.name: check.observed for check in checks if check.status != "pass"}
    # the recording of that host has no `nvidia-smi -q`: its health is judged below on others
    assert not_passed == {"gpus_healthy": "no health section in this fingerprint"}


def recorded_health(query: str):
    driver, gpus = parse_query((FIXTURES / "health" / query).read_text())
    return judged(HostHealth(catalog="", driver_version=driver, gpus=gpus, xid=XidLog(source="dmesg -T")))


@pytest.mark.parametrize(
    ("query", "status", "observed"),
    [
        (
            "nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt",
            "fail",
            "unhealthy: remapped_rows_pending on GPU1 (00000000:9E:00.0): yes",
        ),
        (
            "nvidia-smi-q-gh200-dram-uncorrectable-power-capped.txt",
            "warn",
            "2 warning(s): ecc_uncorrectable_aggregate, power_limit_fraction_of_default",
        ),
    ],
)
def test_the_health_gate_reads_the_health_sections_verdict(expectations, query, status, observed):
    fp = h20_host().model_copy(update={"health": recorded_health(query)})
    check = by_name(evaluate(fp, expectations, 8))["gpus_healthy"]
    assert (check.status, check.observed) == (status, observed)


def test_a_violation_takes_the_expectations_severity(expectations):
    fp = with_gpu(h20_host(), 3, ecc_enabled=False)
    check = by_name(evaluate(fp, expectations, 8))["ecc_enabled"]
    assert (check.status, check.observed) == ("warn", "GPU3: ECC off")
    assert "nvidia-smi -e 1" in check.remedy


def test_mixed_gpu_models_fail(expectations):
    fp = with_gpu(h20_host(), 7, name="NVIDIA H100 80GB HBM3")
    check = by_name(evaluate(fp, expectations, 8))["gpus_same_model"]
    assert check.status == "fail"
    assert check.observed == "7 x NVIDIA H20-3e, 1 x NVIDIA H100 80GB HBM3"


def test_gpu_count_is_held_to_the_profile(expectations):
    def count_check(gpus: int, expected: int | None):
        fp = h20_host()
        fp.gpus.gpus = fp.gpus.gpus[:gpus]
        return by_name(evaluate(fp, expectations, expected))["gpu_count_matches_profile"]

    assert count_check(8, 8).status == count_check(8, 4).status == "pass"  # a larger host: the plan fits up
    fewer = count_check(4, 8)  # the plan is fitted down: a warning, never a refusal
    assert (fewer.status, fewer.severity) == ("warn", "warn") and "the plan is fitted to them" in fewer.observed
    assert count_check(0, 8).status == "fail"  # a GPU profile on a host without GPUs runs nothing
    assert count_check(8, None).status == "skip"


@pytest.mark.parametrize(
    ("changes", "check", "status", "observed"),
    [
        ({"mig_enabled": True}, "mig_off", "fail", "GPU2: MIG enabled"),
        ({"ecc_enabled": False}, "ecc_enabled", "warn", "GPU2: ECC off"),
        (
            {"processes": [GpuProcess(pid=4242, name="python3", used_memory_bytes=3 * 2**30)]},
            "no_foreign_processes",
            "fail",
            "GPU2: pid 4242 (python3, 3.0 GiB)",
        ),
    ],
)
def test_one_unhealthy_gpu_is_named(expectations, changes, check, status, observed):
    result = by_name(evaluate(with_gpu(h20_host(), 2, **changes), expectations, 8))[check]
    assert (result.status, result.observed) == (status, observed)


def test_gpus_without_mig_support_count_as_mig_off(expectations):
    fp = with_gpu(h20_host(), 0, mig_enabled=None, unreadable={"mig_enabled": "NVMLError_NotSupported: Not Supported"})
    assert by_name(evaluate(fp, expectations, 8))["mig_off"].status == "pass"


def test_driver_minimum_follows_the_probed_images_cuda(expectations):
    old_driver = with_driver(h20_host(), "575.57.08", "12.9")
    cuda13 = by_name(evaluate(old_driver, expectations, 8))["driver_supports_images"]
    assert cuda13.status == "fail" and ">= 580" in cuda13.observed
    cuda12 = by_name(
        evaluate(
            old_driver.model_copy(update={"image": old_driver.image.model_copy(update={"cuda_runtime": "12.8"})}),
            expectations,
            8,
        )
    )
    assert cuda12["driver_supports_images"].status == "pass"


def test_driver_minimum_without_an_image_probe_uses_the_assumed_cuda(expectations):
    fp = with_driver(h20_host(), "470.256.02", None).model_copy(update={"image": None})
    check = by_name(evaluate(fp, expectations, 8))["driver_supports_images"]
    assert check.status == "fail" and "assumed" in check.observed and ">= 580" in check.observed


def test_a_cuda_13_image_on_a_cuda_12_driver_fails_naming_both_versions_and_the_fix(expectations):
    fp = with_images(with_driver(h20_host(), "550.54.15", "12.4"), train="13.0.1", comm="12.8.1")
    check = by_name(evaluate(fp, expectations, 8))["driver_supports_images"]
    assert check.status == "fail"
    assert "image train was built with CUDA 13.0.1" in check.observed
    assert "driver 550.54.15 supports CUDA up to 12.4" in check.observed
    assert "install an NVIDIA driver >= 580 (the minimum for CUDA 13.x)" in check.observed
    assert "image comm was built with CUDA 12.8.1" in check.observed and "supports CUDA 12.8 or later" in check.observed


def test_a_driver_that_supports_every_images_cuda_passes(expectations):
    fp = with_images(h20_host(), train="13.0.1", comm="12.8.1")
    check = by_name(evaluate(fp, expectations, 8))["driver_supports_images"]
    assert check.status == "pass" and "CUDA 13.0.1 (image train)" in check.expected


def test_the_cuda_version_is_read_from_the_images_configuration():
    from kit.images import cuda_version_of

    env = [
        "PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/bin",
        "NVARCH=x86_64",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.8 brand=unknown,driver>=470,driver<471",
        "CUDA_VERSION=12.8.1",
    ]
    assert cuda_version_of(env, {}) == ("12.8.1", "env CUDA_VERSION of the image")
    assert cuda_version_of(["PATH=/usr/bin"], {"kit.version.cuda": "13.0"})[0] == "13.0"
    version, why = cuda_version_of(["PATH=/usr/bin"], {})
    assert version is None and "neither" in why


def test_cpu_governor_other_than_performance_warns(expectations):
    fp = h20_host()
    fp = fp.model_copy(update={"host": fp.host.model_copy(update={"cpu": CpuInfo(frequency_governor="powersave")})})
    assert by_name(evaluate(fp, expectations, 8))["cpu_governor_performance"].status == "warn"


def test_host_without_gpus_skips_the_gpu_checks_with_the_reason(expectations):
    here = fingerprint_collection.collect()
    checks = evaluate(here, expectations, expected_gpus=None)
    assert not [check for check in checks if check.status == "fail"]
    same_model = by_name(checks)["gpus_same_model"]
    assert same_model.status == "skip" and same_model.observed.startswith("NVML not available")


def test_host_without_gpus_fails_a_gpu_profile(expectations):
    check = by_name(evaluate(fingerprint_collection.collect(), expectations, 8))["gpu_count_matches_profile"]
    assert check.status == "fail" and "NVML not available" in check.observed


# --- drift -----------------------------------------------------------------------------------


def test_an_unchanged_host_has_no_drift():
    assert drift(h20_host(), h20_host()) == []


def test_driver_change_is_drift():
    [finding] = drift(h20_host(), with_driver(h20_host(), "580.126.20", "13.0"))
    assert finding.kind == "driver_changed" and finding.severity == "fail"


def test_ecc_errors_that_appeared_are_drift():
    [finding] = drift(h20_host(), with_gpu(h20_host(), 5, ecc_uncorrected_aggregate=1))
    assert (finding.kind, finding.gpu) == ("ecc_errors_appeared", "GPU5 (GPU-h20-5)")


def test_clock_limit_after_the_run_is_drift():
    after = with_gpu(h20_host(), 1, clock_event_reasons=["sw_power_cap", "sw_thermal_slowdown"])
    [finding] = drift(h20_host(), after)
    assert finding.kind == "clocks_limited" and "sw_thermal_slowdown" in finding.detail


def test_a_process_that_appeared_is_drift():
    after = with_gpu(h20_host(), 0, processes=[GpuProcess(pid=999, name="python")])
    [finding] = drift(h20_host(), after)
    assert finding.kind == "foreign_process_appeared" and "pid 999" in finding.detail


def test_a_gpu_that_vanished_is_drift():
    before = h20_host()
    after = before.model_copy(update={"gpus": before.gpus.model_copy(update={"gpus": before.gpus.gpus[:7]})})
    [finding] = drift(before, after)
    assert finding.kind == "gpu_missing" and finding.gpu.startswith("GPU7")


def test_redacted_fingerprints_of_one_run_match_gpus_by_token():
    before = redaction_tokens.redact_identifiers(h20_host(), b"run")
    after = redaction_tokens.redact_identifiers(with_gpu(h20_host(), 4, ecc_uncorrected_aggregate=3), b"run")
    [finding] = drift(before, after)
    assert finding.kind == "ecc_errors_appeared" and "GPU-h20" not in finding.gpu


# --- comparability ---------------------------------------------------------------------------


def test_the_same_environment_is_comparable():
    result = comparable(h20_host(), h20_host(), "pretrain")
    assert result.comparable and result.reasons == []


def test_different_gpu_model_is_not_comparable():
    other = h20_host()
    for index in range(8):
        other = with_gpu(other, index, name="NVIDIA H100 80GB HBM3")
    result = comparable(h20_host(), other, "serve")
    assert not result.comparable
    assert result.reasons == ["GPU model differs: NVIDIA H20-3e vs NVIDIA H100 80GB HBM3"]


def test_different_topology_class_is_not_comparable():
    pcie = h20_host().model_copy(update={"topology": topology("rtx4090x8-pcie-sys-nics.txt")})
    [reason] = comparable(h20_host(), pcie, "comm").reasons
    assert reason == (
        "topology class differs: 8 GPUs, all pairs NVLink (NV18) vs 8 GPUs, PCIe only, cross-socket pairs"
    )


def test_framework_versions_matter_for_the_stages_that_use_them():
    newer = h20_host(packages={**h20_host().image.packages, "vllm": "0.11.0"})
    assert comparable(h20_host(), newer, "pretrain").comparable
    serve = comparable(h20_host(), newer, "serve")
    assert serve.reasons == ["vllm differs: not installed vs 0.11.0"]


def test_torch_version_matters_for_every_stage():
    newer = h20_host(torch="2.12.0+cu130")
    assert "torch differs: 2.11.0+cu130 vs 2.12.0+cu130" in comparable(h20_host(), newer, "comm").reasons


def test_rdma_network_matters_for_the_communication_stage():
    slower = h20_host()
    slower = slower.model_copy(
        update={
            "network": NetworkInfo(
                rdma_ports=[
                    port.model_copy(update={"rate": "200 Gb/sec (4X HDR)", "rate_gbps": 200.0})
                    for port in slower.network.rdma_ports
                ]
            )
        }
    )
    assert comparable(h20_host(), slower, "pretrain").comparable
    [reason] = comparable(h20_host(), slower, "comm").reasons
    assert reason.startswith("RDMA network differs")


def test_without_an_image_probe_versions_are_unknown_not_equal():
    unprobed = h20_host().model_copy(update={"image": None})
    result = comparable(h20_host(), unprobed, "finetune")
    assert not result.comparable
    assert "torch unknown (B: no image probe)" in result.reasons


def test_changed_workload_code_is_not_comparable():
    edited = h20_host()
    edited = edited.model_copy(update={"kit": edited.kit.model_copy(update={"workload_sources_sha256": "b" * 64})})
    [reason] = comparable(h20_host(), edited, "profile").reasons
    assert reason.startswith("workload sources (SHA-256) differs")


def test_unknown_stage_is_an_error():
    with pytest.raises(ValueError, match="unknown stage 'inference'"):
        comparable(h20_host(), h20_host(), "inference")
