"""kit.host.nvidia_smi_query, nvlink_report, xid_events and dcgm_diag on recorded outputs of real
machines (tests/fixtures/health, each with its .source): healthy ones, and faulty ones (a pending
row remap with correctable ECC errors, an uncorrectable DRAM error, inactive NVLink links, Xid 119).
"""

import pytest
from support import FIXTURES

from kit.host.dcgm_diag import DiagParseError, parse_diag
from kit.host.nvidia_smi_query import QueryParseError, parse_query
from kit.host.nvlink_report import add_error_counters, all_inactive_gpus, parse_link_status
from kit.host.xid_events import parse_xid_lines

HEALTH = FIXTURES / "health"


def read(name: str) -> str:
    return (HEALTH / name).read_text()


def test_every_fixture_names_its_source():
    outputs = [path for path in HEALTH.iterdir() if path.suffix != ".source"]
    assert outputs
    for path in outputs:
        source = path.with_suffix(".source").read_text()
        assert "https://" in source, path.name


def test_healthy_a100_host_reads_zero_errors_on_every_gpu():
    driver, gpus = parse_query(read("nvidia-smi-q-a100x8-healthy.txt"))
    assert driver == "460.32.03"
    assert len(gpus) == 8
    for gpu in gpus:
        assert (gpu.ecc_correctable_volatile, gpu.ecc_uncorrectable_volatile) == (0, 0)
        assert (gpu.ecc_correctable_aggregate, gpu.ecc_uncorrectable_aggregate) == (0, 0)
        assert (gpu.remapped_rows_pending, gpu.remapped_rows_failure) == (False, False)
        assert (gpu.pcie_width_current, gpu.pcie_width_max) == (16, 16)
        assert gpu.clock_event_reasons == ["gpu_idle"]
        assert (gpu.power_limit_w, gpu.default_power_limit_w) == (400.0, 400.0)
        assert gpu.persistence_mode is False
        assert gpu.retired_pages_pending is None  # "N/A": A100s remap rows instead
    assert (gpus[0].temperature_c, gpus[0].temperature_headroom_c) == (41, 89 - 41)


def test_a100_with_a_pending_row_remap_and_correctable_errors():
    _, gpus = parse_query(read("nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt"))
    faulty = gpus[1]
    assert faulty.pci_bus_id == "00000000:9E:00.0"
    assert (faulty.ecc_correctable_volatile, faulty.ecc_correctable_aggregate) == (353, 353)
    assert faulty.remapped_rows_pending is True
    assert faulty.remapped_rows_correctable == 1
    assert (gpus[2].remapped_rows_correctable, gpus[2].remapped_rows_pending) == (1, False)
    assert gpus[0].pcie_gen_device_max == 4  # the R555 layout prints the device's own maximum


def test_gh200_layout_reads_an_uncorrectable_error_and_a_capped_power_limit():
    driver, (gpu,) = parse_query(read("nvidia-smi-q-gh200-dram-uncorrectable-power-capped.txt"))
    assert driver == "550.127.05"
    assert (gpu.ecc_uncorrectable_volatile, gpu.ecc_uncorrectable_aggregate) == (0, 1)
    assert (gpu.remapped_rows_uncorrectable, gpu.remapped_rows_pending) == (1, False)
    assert (gpu.power_limit_w, gpu.default_power_limit_w) == (700.0, 900.0)


def test_text_that_is_not_nvidia_smi_is_refused():
    with pytest.raises(QueryParseError):
        parse_query(read("nvlink-s-v100x8-inactive.txt"))


def test_inactive_nvlinks_are_named_per_gpu():
    links = parse_link_status(read("nvlink-s-v100x8-inactive.txt"))
    down = {gpu: [link.link for link in found if not link.active] for gpu, found in links.items()}
    assert down == {0: [], 1: [], 2: [], 3: [3, 5], 4: [1], 5: [0, 4], 6: [1]}
    assert links[0][0].speed_gb_s == 25.781
    assert all_inactive_gpus(read("nvlink-s-v100x8-inactive.txt")) == []


def test_all_links_active_on_the_a100_host():
    links = parse_link_status(read("nvlink-s-a100x8-active.txt"))
    assert len(links) == 8
    assert all(len(found) == 12 and all(link.active for link in found) for found in links.values())


def test_error_counters_join_the_links_they_belong_to():
    links = add_error_counters(parse_link_status(read("nvlink-s-a100x8-active.txt")), read("nvlink-e-gb300.txt"))
    first = links[0][0]
    assert (first.replay_errors, first.recovery_errors, first.crc_errors) == (0, 0, 0)
    assert links[0][1].crc_errors is None  # the recorded -e shows link 0 only


def test_xid_lines_of_a_kernel_log():
    events = parse_xid_lines(read("dmesg-xid-119.log"))
    assert [event.xid for event in events] == [119] * 5
    assert {event.pci for event in events} == {"0000:9b:00"}
    assert "GSP" in events[0].line


def test_dcgm_diag_3_1_json():
    diag = parse_diag(read("dcgmi-diag-r1-dcgm-3.1.0-8gpu.json"), 1)
    assert (diag.version, diag.unavailable) == ("3.1.0", None)
    assert {result.status for result in diag.results} == {"pass"}
    per_gpu = [result.gpus for result in diag.results if result.test == "software"]
    assert per_gpu == [str(gpu) for gpu in range(8)]
    assert any(result.test == "Page Retirement/Row Remap" for result in diag.results)


def test_dcgm_text_without_a_document_is_refused():
    with pytest.raises(DiagParseError):
        parse_diag("Error: unable to establish a connection to the specified host: localhost", 1)
