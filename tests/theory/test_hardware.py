"""The hardware table: every peak is sourced, and a device name finds its own GPU or none."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kit.manifest import MANIFESTS_ENV, ManifestError
from kit.theory.hardware import Figure, GpuSpec, HardwareTable, load_hardware, peak_tflops


@pytest.fixture(scope="module")
def table() -> HardwareTable:
    return load_hardware()


def figures(spec: GpuSpec) -> list[tuple[str, Figure]]:
    return [(name, value) for name, value in spec if isinstance(value, Figure)]


def sourced(value: float) -> dict:
    return {"value": value, "source": "Datasheet, table 1 - https://example.com/datasheet.pdf"}


def entry(nvml_name: str, **overrides: object) -> dict:
    """A valid table entry, so that each test breaks exactly one thing."""
    spec = {
        "vendor": "NVIDIA",
        "model": nvml_name,
        "nvml_name": nvml_name,
        "bf16_dense_tflops": sourced(100.0),
        "fp16_dense_tflops": sourced(100.0),
        "memory": {**sourced(24.0), "unit": "GB"},
        "memory_bandwidth_tb_per_s": sourced(1.0),
        "interconnect": None,
        "interconnect_generation": {"value": None, "note": "no NVLink"},
        "interconnect_bidirectional_gb_per_s": {"value": None, "note": "no NVLink"},
        "pcie_generation": sourced(4),
        "pcie_lanes": sourced(16),
    }
    spec.update(overrides)
    return spec


def write_table(tmp_path: Path, gpus: dict) -> Path:
    path = tmp_path / "hardware.yaml"
    path.write_text(yaml.safe_dump({"gpus": gpus}), encoding="utf-8")
    return path


# --- the shipped table ---------------------------------------------------------------


def test_every_non_null_figure_cites_a_document_with_a_url(table):
    for key, spec in table.gpus.items():
        for field, figure in figures(spec):
            if figure.value is not None:
                assert figure.source and "http" in figure.source, f"{key}.{field} has no URL"


def test_every_null_figure_says_why_it_is_unknown(table):
    for key, spec in table.gpus.items():
        for field, figure in figures(spec):
            if figure.value is None:
                assert figure.note, f"{key}.{field} is null without a note"


@pytest.mark.parametrize(
    "nvml_name",
    [
        "NVIDIA A800-SXM4-80GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A100 80GB PCIe",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 PCIe",
        "NVIDIA H200",
        "NVIDIA H20",
        "NVIDIA L40S",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GeForce RTX 3090",
        "NVIDIA B200",
        "AMD Instinct MI300X",
        # The GPUs buyers compare today (issue 17), as the driver names them: the "Compatible
        # GPUs" table of NVIDIA's open kernel modules README, and nvidia-smi outputs for V100.
        "NVIDIA A100-SXM4-40GB",
        "NVIDIA A100-PCIE-40GB",
        "NVIDIA H100 NVL",
        "NVIDIA H800",
        "NVIDIA GH200 480GB",
        "NVIDIA H200 NVL",
        "NVIDIA GB200",
        "NVIDIA B300 SXM6 AC",
        "NVIDIA L4",
        "NVIDIA L40",
        "NVIDIA A10",
        "NVIDIA RTX A6000",
        "NVIDIA RTX 6000 Ada Generation",
        "NVIDIA GeForce RTX 5090",
        "Tesla V100-SXM2-32GB",
        "Tesla V100-SXM2-16GB",
        "Tesla V100-PCIE-32GB",
        "Tesla V100-PCIE-16GB",
        "AMD Instinct MI325X",
    ],
)
def test_lookup_by_exact_reported_name_finds_the_gpu(table, nvml_name):
    spec = table.lookup(nvml_name)
    assert spec is not None and spec.nvml_name == nvml_name


def test_lookup_ignores_case_and_runs_of_whitespace(table):
    assert table.lookup("  nvidia   a100-sxm4-80gb ") is table.lookup("NVIDIA A100-SXM4-80GB")


def test_lookup_by_listed_alias_finds_the_gpu(table):
    assert table.lookup("AMD Instinct MI300X VF") is table.lookup("AMD Instinct MI300X")
    assert table.lookup("AMD Instinct MI325X VF") is table.lookup("AMD Instinct MI325X")


def test_every_listed_name_finds_its_own_entry(table):
    for key, spec in table.gpus.items():
        for name in spec.names:
            assert table.lookup(name) is spec, f"{name!r} does not find {key}"


def test_no_device_name_is_listed_twice(table):
    names = [" ".join(name.split()).casefold() for spec in table.gpus.values() for name in spec.names]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(
    ("nvml_name", "not_this_entry"),
    [
        # Neighbours of listed parts, named as the driver reports them (NVIDIA's open kernel
        # modules README): each is another product and must not borrow its neighbour's peaks.
        ("NVIDIA GeForce RTX 4090 D", "rtx-4090"),
        ("NVIDIA GeForce RTX 3090 Ti", "rtx-3090"),
        ("NVIDIA A800 80GB PCIe", "a800-sxm4-80gb"),
        ("NVIDIA A800-SXM4-40GB", "a800-sxm4-80gb"),
        ("NVIDIA H800 PCIe", "h800-sxm5-80gb"),
        ("NVIDIA H800 NVL", "h800-sxm5-80gb"),
        ("NVIDIA GH200 144G HBM3e", "gh200-96gb"),
        ("NVIDIA GH200 120GB", "gh200-96gb"),
        ("NVIDIA A10G", "a10"),
        ("NVIDIA GeForce RTX 5090 D", "rtx-5090"),
        ("NVIDIA GB300", "b300-sxm6-288gb"),
        ("NVIDIA L40S", "l40"),
    ],
)
def test_a_neighbouring_part_does_not_resolve_to_the_listed_one(table, nvml_name, not_this_entry):
    assert table.lookup(nvml_name) is not table.gpus[not_this_entry]


@pytest.mark.parametrize(
    "nvml_name",
    ["NVIDIA GeForce RTX 4090 D", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA A800 80GB PCIe", "NVIDIA H800 PCIe", ""],
)
def test_unknown_gpu_returns_none(table, nvml_name):
    assert table.lookup(nvml_name) is None


@pytest.mark.parametrize("prefix", ["NVIDIA H100", "NVIDIA A100", "NVIDIA", "AMD Instinct"])
def test_a_prefix_of_a_known_name_matches_nothing(table, prefix):
    assert table.lookup(prefix) is None


def test_h100_pcie_and_sxm_are_different_entries_with_their_own_peaks(table):
    sxm, pcie = table.lookup("NVIDIA H100 80GB HBM3"), table.lookup("NVIDIA H100 PCIe")
    assert sxm is not pcie
    assert (peak_tflops(sxm, "bf16"), peak_tflops(pcie, "bf16")) == (989.4, 756)


def test_a100_pcie_and_sxm_differ_in_memory_bandwidth(table):
    sxm, pcie = table.lookup("NVIDIA A100-SXM4-80GB"), table.lookup("NVIDIA A100 80GB PCIe")
    assert sxm.memory_bandwidth_tb_per_s.value == 2.039
    assert pcie.memory_bandwidth_tb_per_s.value == 1.935


def test_peaks_are_dense_not_the_sparse_datasheet_figure(table):
    # NVIDIA prints 1,979 TFLOPS (with sparsity) for H100 SXM BF16; the table holds half.
    assert peak_tflops(table.lookup("NVIDIA H100 80GB HBM3"), "bf16") == 989.4
    assert peak_tflops(table.lookup("NVIDIA A100-SXM4-80GB"), "fp16") == 312


def test_nvl_cards_have_their_own_peaks_not_the_sxm_parts(table):
    # NVIDIA prints 1,671 TFLOPS with sparsity for both NVL cards; the table holds half.
    assert peak_tflops(table.lookup("NVIDIA H100 NVL"), "bf16") == 835.5
    assert peak_tflops(table.lookup("NVIDIA H200 NVL"), "bf16") == 835.5
    assert peak_tflops(table.lookup("NVIDIA H200"), "bf16") == 989.5


def test_geforce_fp16_peak_is_the_fp32_accumulate_rate(table):
    assert peak_tflops(table.lookup("NVIDIA GeForce RTX 4090"), "fp16") == 165.2
    assert peak_tflops(table.lookup("NVIDIA GeForce RTX 3090"), "fp16") == 71
    assert peak_tflops(table.lookup("NVIDIA GeForce RTX 5090"), "fp16") == 209.5


def test_volta_has_an_fp16_tensor_peak_and_no_bf16_one(table):
    v100 = table.lookup("Tesla V100-SXM2-32GB")
    assert (peak_tflops(v100, "fp16"), peak_tflops(v100, "bf16")) == (125, None)
    assert v100.bf16_dense_tflops.note and "BF16" in v100.bf16_dense_tflops.note


def test_peak_is_none_where_no_vendor_document_gives_it(table):
    assert peak_tflops(table.lookup("NVIDIA H20"), "bf16") is None
    assert peak_tflops(table.lookup("NVIDIA B200"), "bf16") is None


def test_peak_for_an_unsupported_dtype_is_an_error(table):
    with pytest.raises(ValueError, match="fp8"):
        peak_tflops(table.lookup("NVIDIA H200"), "fp8")


def test_gpu_without_nvlink_has_no_interconnect(table):
    l40s = table.lookup("NVIDIA L40S")
    assert l40s.interconnect is None and l40s.interconnect_bidirectional_gb_per_s.value is None


# --- malformed files ------------------------------------------------------------------


def test_default_path_is_hardware_yaml_in_the_manifests_folder(tmp_path, monkeypatch):
    write_table(tmp_path, {"test-gpu": entry("Test GPU")})
    monkeypatch.setenv(MANIFESTS_ENV, str(tmp_path))
    assert load_hardware().lookup("Test GPU") is not None


def test_non_numeric_figure_names_its_key(tmp_path):
    bad = entry("Test GPU", bf16_dense_tflops={**sourced(1.0), "value": "fast"})
    with pytest.raises(ManifestError) as error:
        load_hardware(write_table(tmp_path, {"test-gpu": bad}))
    assert error.value.key == "gpus.test-gpu.bf16_dense_tflops.value"


def test_figure_without_source_is_rejected(tmp_path):
    bad = entry("Test GPU", memory_bandwidth_tb_per_s={"value": 1.0})
    with pytest.raises(ManifestError, match="needs a source") as error:
        load_hardware(write_table(tmp_path, {"test-gpu": bad}))
    assert error.value.key == "gpus.test-gpu.memory_bandwidth_tb_per_s"


def test_null_figure_without_note_is_rejected(tmp_path):
    bad = entry("Test GPU", pcie_lanes={"value": None})
    with pytest.raises(ManifestError, match="needs a note") as error:
        load_hardware(write_table(tmp_path, {"test-gpu": bad}))
    assert error.value.key == "gpus.test-gpu.pcie_lanes"


def test_memory_unit_must_be_gb_or_gib(tmp_path):
    bad = entry("Test GPU", memory={**sourced(24.0), "unit": "MB"})
    with pytest.raises(ManifestError) as error:
        load_hardware(write_table(tmp_path, {"test-gpu": bad}))
    assert error.value.key == "gpus.test-gpu.memory.unit"


def test_misspelt_field_is_rejected_not_ignored(tmp_path):
    bad = entry("Test GPU", bf16_tflops=sourced(1.0))
    with pytest.raises(ManifestError) as error:
        load_hardware(write_table(tmp_path, {"test-gpu": bad}))
    assert error.value.key == "gpus.test-gpu.bf16_tflops"


def test_device_name_listed_twice_is_rejected(tmp_path):
    gpus = {"first": entry("Test GPU"), "second": entry("Other GPU", aliases=["test  gpu"])}
    with pytest.raises(ManifestError, match="'first' and 'second'"):
        load_hardware(write_table(tmp_path, gpus))


def test_invalid_yaml_is_one_line_error_with_its_position(tmp_path):
    path = tmp_path / "hardware.yaml"
    path.write_text("gpus:\n  test-gpu: {vendor: NVIDIA\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="invalid YAML") as error:
        load_hardware(path)
    assert error.value.key.startswith("line ") and "\n" not in str(error.value)
