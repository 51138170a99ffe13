"""Communication benchmarks: nccl-tests' bus bandwidth, its output read from real runs, the
link-rate bound, the comm case metrics, scaling efficiency, and the smoke comm stage for real."""

from __future__ import annotations

import json

import pytest
import support
from support.recorded_nccl_tests import case_for, stand_in

from kit.comm.collectives import buffer_layout, bus_bandwidth_factor, bus_bandwidth_gbps, message_sizes
from kit.comm.link_bounds import busbw_bound
from kit.comm.nccl_tests_output import parse_nccl_tests, parse_nccl_tests_runs
from kit.comm.sweep import CommSweep, TopologyFacts
from kit.measure.comm import comm_case_metrics
from kit.measure.scaling import scaling_rows
from kit.rundir.schema import Metric, RankSample, Result, RunSample
from kit.theory.hardware import load_hardware

FIXTURES = support.FIXTURES / "nccl_tests"


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def hardware():
    return load_hardware()


# --- Bus bandwidth factors: nccl-tests doc/PERFORMANCE.md, "Summary" ---------------------------


@pytest.mark.parametrize(
    "name, ranks, factor",
    [
        ("all_reduce", 8, 2 * 7 / 8),
        ("all_reduce", 2, 1.0),
        ("reduce_scatter", 8, 7 / 8),
        ("all_gather", 8, 7 / 8),
        ("alltoall", 8, 7 / 8),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_bus_bandwidth_factors_are_those_of_nccl_tests(name, ranks, factor):
    assert bus_bandwidth_factor(name, ranks) == pytest.approx(factor)


def test_a_log_of_several_runs_keeps_each_run():
    first, second = parse_nccl_tests_runs(fixture("dgx2-v100x12-runs-in-sequence-first-failed"))
    assert (len(first.rows), first.out_of_bounds, first.out_of_bounds_failed) == (31, 4, True)
    assert first.rows[0].redop is None and first.rows[-1].size_bytes == 8589934560  # all_gather
    assert (len(second.rows), second.out_of_bounds, second.out_of_bounds_failed) == (31, 0, False)
    assert second.rows[0].redop == "sum" and second.avg_busbw_gbps == pytest.approx(42.5578)
    assert first.failure and not second.failure


def test_a_failed_run_is_not_lost_when_a_log_is_read_as_one():
    whole = parse_nccl_tests(fixture("dgx2-v100x12-runs-in-sequence-first-failed"))
    assert whole.out_of_bounds_failed and whole.out_of_bounds == 4
    assert "Out of bounds values: 4 FAILED" in whole.failure


def test_a_single_run_is_one_run():
    assert len(parse_nccl_tests_runs(fixture("h100x16-two-nodes-all_reduce"))) == 1


@pytest.mark.parametrize(
    "name, ranks, fixture_name",
    [
        ("all_reduce", 16, "h100x16-two-nodes-all_reduce"),
        ("all_gather", 32, "mi250x-four-nodes-slurm-label-all_gather"),
    ],
)
def test_the_factors_reproduce_busbw_over_algbw_of_real_runs(name, ranks, fixture_name):
    rows = [row for row in parse_nccl_tests(fixture(fixture_name)).rows if row.out_of_place.algbw_gbps >= 0.5]
    assert rows
    for row in rows:  # both printed with 2 decimals: allow their rounding
        t = row.out_of_place
        assert t.busbw_gbps == pytest.approx(t.algbw_gbps * bus_bandwidth_factor(name, ranks), abs=0.011 * 2)


def test_bus_bandwidth_is_size_over_time_times_the_factor():
    # 8 GiB all_reduce on 16 ranks in 47535 us (h100x16 fixture): algbw 180.71, busbw 338.82 GB/s
    assert bus_bandwidth_gbps("all_reduce", 8589934592, 47535e-6, 16) == pytest.approx(338.82, abs=0.01)


# --- The sweep and what a size means ---------------------------------------------------------


def test_the_paper_sweep_is_8_bytes_to_1_gib_by_doubling():
    sizes = message_sizes(8, 1 << 30, 2)
    assert sizes[0] == 8 and sizes[-1] == 1 << 30 and len(sizes) == 28


def test_the_smoke_sweep_has_at_least_ten_sizes(smoke_plan):
    case = next(c for c in smoke_plan.cases if c.stage == "comm")
    params = case.params
    assert params.backend == "torch" and case.gpus == 2
    assert len(message_sizes(params.min_bytes, params.max_bytes, params.step_factor)) >= 10


def test_a_sweep_never_passes_its_maximum():
    assert message_sizes(8, 100, 4) == [8, 32]
    with pytest.raises(ValueError):
        message_sizes(16, 8, 2)


@pytest.mark.parametrize(
    "name, size, ranks, count, fixture_name",
    [
        ("all_gather", 65536, 32, 512, "mi250x-four-nodes-slurm-label-all_gather"),
        ("all_gather", 65536, 2, 8192, "rtx2080ti-nvlink-old-format-headerless"),
        ("all_reduce", 1048576, 24, 262144, "h100x24-three-nodes-prepend-rank"),
    ],
)
def test_element_counts_match_those_nccl_tests_printed(name, size, ranks, count, fixture_name):
    layout = buffer_layout(name, size, ranks, element_bytes=4)
    assert layout.count == count and layout.size_bytes == size
    assert any(row.size_bytes == size and row.count == count for row in parse_nccl_tests(fixture(fixture_name)).rows)


def test_a_split_collective_moves_at_least_one_element_per_rank():
    layout = buffer_layout("all_gather", 8, 8, element_bytes=4)
    assert layout.count == 1 and layout.size_bytes == 32


# --- nccl-tests output from real machines -------------------------------------------------------


def test_a_complete_two_node_run_is_read_row_by_row():
    out = parse_nccl_tests(fixture("h100x16-two-nodes-all_reduce"))
    assert len(out.rows) == 31 and out.ranks == list(range(16))
    assert set(out.devices) == {"NVIDIA H100 80GB HBM3"}
    first, last = out.rows[0], out.rows[-1]
    assert (first.size_bytes, first.count, first.dtype, first.redop, first.root) == (8, 2, "float", "sum", None)
    assert (last.size_bytes, last.out_of_place.time_us, last.out_of_place.busbw_gbps) == (8589934592, 47535, 338.82)
    assert last.in_place.busbw_gbps == 337.35 and last.out_of_place.wrong == 0
    assert (out.out_of_bounds, out.out_of_bounds_failed, out.avg_busbw_gbps) == (0, False, 70.742)
    assert out.failure is None and not out.unparsed
    assert out.settings.startswith("nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592")


def test_open_mpi_tag_output_prefixes_are_stripped():
    out = parse_nccl_tests(fixture("h100-p5-openmpi-tag-output"))
    assert [row.size_bytes for row in out.rows] == [8, 16, 32]
    assert out.columns[:5] == ["size", "count", "type", "redop", "root"]
    assert out.rows[2].out_of_place.time_us == 22.25 and out.rows[2].in_place.time_us == 13.34


def test_slurm_task_labels_are_stripped():
    out = parse_nccl_tests(fixture("mi250x-four-nodes-slurm-label-all_gather"))
    assert [row.size_bytes for row in out.rows] == [65536, 131072, 262144, 524288, 1048576]
    assert out.rows[0].redop is None  # AllGather prints redop "none"
    assert out.rows[-1].out_of_place.busbw_gbps == 0.70


def test_rank_prefixes_inside_rows_are_stripped_and_a_fragment_is_not_a_row():
    out = parse_nccl_tests(fixture("h100x24-three-nodes-prepend-rank"))
    assert [row.size_bytes for row in out.rows] == [1 << p for p in range(20, 30)]
    assert out.rows[0].out_of_place.time_us == 1626.5 and out.rows[0].in_place.busbw_gbps == 0.87
    assert out.unparsed == ["366.5    1.43    2.74      0      340.8    1.54    2.95      0"]


def test_debug_lines_inside_rows_leave_fragments_reported_not_invented():
    out = parse_nccl_tests(fixture("h100x24-three-nodes-debug-inside-rows"))
    assert out.rows == []
    assert out.unparsed == ["75.38    0.05    0.10      0", "8192 2048 float sum -1"]


def test_a_row_interrupted_by_debug_lines_is_joined():
    # The 1 MiB row of the prepend-rank run, split where NCCL's tuning log split the 8 KiB row
    # of the same run (fixture h100x24-three-nodes-debug-inside-rows).
    header = fixture("h100-p5-openmpi-tag-output").splitlines()[1]
    text = "\n".join(
        [
            header,
            "[0]      1048576        262144     float     sum      -1[0] h100clust-worker-1:497888:497888 [0] NCCL INFO 1048576 Bytes -> Algo 0 proto 0 time 26.549810",
            "[0] h100clust-worker-1:497888:497888 [0] NCCL INFO 1048576 Bytes -> Algo 0 proto 0 time 26.549810",
            "[0]    1626.5    0.64    1.24      0[0]    2302.3    0.46    0.87      0",
        ]
    )
    out = parse_nccl_tests(text)
    assert len(out.rows) == 1 and not out.unparsed
    assert out.rows[0].out_of_place.time_us == 1626.5 and out.rows[0].in_place.busbw_gbps == 0.87


def test_the_newest_header_with_per_iteration_columns_and_timestamps():
    # nccl-tests 2026 (src/util.cu, writeResultHeader with -I 1 and timestamps, and
    # writeBenchmarkLinePreamble / writeBenchmarkLineBody): no public output of it was found,
    # so header and row are printed here with its format strings and made-up values.
    group = "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s"
    header = ("# %10s  %12s  %8s  %6s  %6s" + group + group + " %*s") % (
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "i_min",
        "i_max",
        "i_p99",
        "i_cv%",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "i_min",
        "i_max",
        "i_p99",
        "i_cv%",
        19,
        "timestamp",
    )
    body = "  %7s  %6s  %6s  %6g  %7s  %7s  %7s  %7s"
    row = (  # printf formats, as nccl-tests' own C source prints its rows
        "%12li  %12li  %8s  %6s  %6s" % (1048576, 262144, "float", "sum", "-1")  # noqa: UP031
        + body % ("52.10", "20.13", "35.22", 0, "50.01", "60.20", "59.90", "3.10")
        + body % ("51.90", "20.20", "35.35", 0, "49.80", "61.00", "60.50", "3.40")
        + "%21s" % "2026-07-01 15:41:38"  # noqa: UP031
    )
    [parsed] = parse_nccl_tests(header + "\n" + row).rows
    assert (parsed.out_of_place.time_us, parsed.out_of_place.busbw_gbps) == (52.10, 35.22)
    assert (parsed.in_place.time_us, parsed.in_place.wrong) == (51.90, 0)


def test_nccl_info_lines_between_rows_and_summary_are_ignored():
    out = parse_nccl_tests(fixture("two-gpus-nccl-info-lines"))
    assert len(out.rows) == 1 and out.rows[0].out_of_place.busbw_gbps == 25.86
    assert out.avg_busbw_gbps == 8.62002 and out.failure is None


def test_old_headerless_rows_without_redop_read_the_error_column_as_a_deviation():
    out = parse_nccl_tests(fixture("rtx2080ti-nvlink-old-format-headerless"))
    assert out.columns is None and len(out.rows) == 12
    row = out.rows[-1]
    assert (row.size_bytes, row.count, row.redop) == (134217728, 16777216, None)
    assert row.out_of_place.max_error == 0.0 and row.out_of_place.wrong is None
    assert out.failure is None


def test_the_old_error_column_is_not_a_count_of_wrong_elements():
    out = parse_nccl_tests(fixture("old-format-error-column-all_reduce"))
    assert "error" in out.columns and "root" not in out.columns
    assert all(row.out_of_place.max_error == 1e-06 and row.wrong == 0 for row in out.rows)
    assert out.failure is None


def test_a_single_gpu_run_with_an_unchecked_in_place_result():
    out = parse_nccl_tests(fixture("rtx5090-alltoall-single-size"))
    [row] = out.rows
    assert row.out_of_place.algbw_gbps == 1715.44 and row.out_of_place.busbw_gbps == 0.0
    assert row.in_place.wrong is None  # "N/A"
    assert out.ranks == [0] and out.devices == ["NVIDIA GeForce RTX 5090"]


def test_wrong_elements_make_a_run_failed():
    out = parse_nccl_tests(fixture("dgx-h100-wrong-elements"))
    assert [row.size_bytes for row in out.rows] == [8, 262144, 524288]
    assert out.rows[-1].out_of_place.wrong == 237858 and out.rows[-1].in_place.wrong == 238038
    assert out.failure == "wrong elements at 1 size(s): 524288 B (475896)"


def test_an_out_of_bounds_failed_summary_makes_a_run_failed():
    # The summary line as nccl-tests prints it (src/util.cu, writeResultFooter:
    # "# %-20s : %d %s" with "Out of bounds values" and FAILED when the count is not 0),
    # after the rows of a real run.
    text = fixture("h100x16-two-nodes-all_reduce").replace(
        "# Out of bounds values : 0 OK", "# Out of bounds values : 248 FAILED"
    )
    out = parse_nccl_tests(text)
    assert out.out_of_bounds == 248 and out.out_of_bounds_failed
    assert out.failure == "Out of bounds values: 248 FAILED"


# --- The bound a busbw cannot exceed --------------------------------------------------------------


def test_nvlink_bounds_busbw_at_half_the_bidirectional_rate(hardware):
    bound = busbw_bound("all_reduce", 8, "nvlink-all-pairs", 8, hardware.lookup("NVIDIA A800-SXM4-80GB"))
    assert bound.gbps == 200 and "NVLink 3" in bound.link and "hardware.yaml" in bound.link


def test_nvlink_sharp_capable_hosts_give_no_bound_for_the_collectives_it_accelerates(hardware):
    h100 = hardware.lookup("NVIDIA H100 80GB HBM3")
    reduced = busbw_bound("all_reduce", 8, "nvlink-all-pairs", 8, h100)
    assert reduced.gbps is None and "NVLink SHARP" in reduced.reason
    assert busbw_bound("alltoall", 8, "nvlink-all-pairs", 8, h100).gbps == 450


def test_pcie_bound_prefers_the_link_measured_on_the_host(hardware):
    rtx4090 = hardware.lookup("NVIDIA GeForce RTX 4090")
    measured = busbw_bound("all_gather", 8, "pcie-only", 8, rtx4090, pcie_generation=4, pcie_lanes=16)
    assert measured.gbps == pytest.approx(16 * 128 / 130 / 8 * 16) and "measured on the host" in measured.link
    unknown = busbw_bound("all_gather", 8, "pcie-only", 8, rtx4090)
    assert unknown.gbps is None and "neither from the host nor from hardware.yaml" in unknown.reason
    l40s = busbw_bound("all_gather", 8, "pcie-only", 8, hardware.lookup("NVIDIA L40S"))
    assert l40s.gbps == pytest.approx(31.5, abs=0.01) and "hardware.yaml" in l40s.link


@pytest.mark.parametrize(
    "ranks, interconnect, host_gpus, spec_name, reason",
    [
        (1, "nvlink-all-pairs", 8, "NVIDIA A800-SXM4-80GB", "one rank"),
        (8, None, None, "NVIDIA A800-SXM4-80GB", "not recorded"),
        (16, "nvlink-all-pairs", 8, "NVIDIA A800-SXM4-80GB", "network"),
        (8, "nvlink-all-pairs", 8, None, "not in manifests/hardware.yaml"),
    ],
)
def test_without_the_facts_there_is_no_bound_and_it_says_why(
    hardware, ranks, interconnect, host_gpus, spec_name, reason
):
    spec = hardware.lookup(spec_name) if spec_name else None
    bound = busbw_bound("all_reduce", ranks, interconnect, host_gpus, spec)
    assert bound.gbps is None and reason in bound.reason


# --- Case metrics ---------------------------------------------------------------------------------


def comm_run(case, fixture_name: str, device_name: str, topology: TopologyFacts):
    """A run whose rank 0 recorded the rows of a real nccl-tests output, on the host described."""
    out = parse_nccl_tests(fixture(fixture_name))
    sweep = CommSweep(
        collective=case.params.collective,
        backend="nccl-tests",
        ranks=case.gpus,
        dtype="float32",
        warmup_iters=5,
        iters=20,
        time_statistic="mean",
        rows=out.rows,
        device_names=[device_name],
        topology=topology,
    )
    rank = RankSample(
        rank=0,
        world_size=case.gpus,
        status="ok",
        device="cuda",
        device_name=device_name,
        details=sweep.model_dump(mode="json"),
        started_at="t",
        finished_at="t",
    )
    return [RunSample(index=1, status="ok", exit_code=0, wall_s=1.0, ranks=[rank])]


def test_comm_metrics_are_the_peak_and_largest_size_busbw(paper_plan, hardware):
    # The recorded run: 16 ranks on two 8-GPU H100 nodes (tests/fixtures/nccl_tests/*.source).
    case = with_gpus(next(c for c in paper_plan.cases if c.id == "comm.all_reduce.g8"), 16)
    case = case.model_copy(update={"params": case.params.model_copy(update={"max_bytes": 8 << 30})})
    topology = TopologyFacts(interconnect="nvlink-all-pairs", gpu_count=8)
    runs = comm_run(case, "h100x16-two-nodes-all_reduce", "NVIDIA H100 80GB HBM3", topology)
    found, notes = comm_case_metrics(case, runs, hardware)
    assert found["bus_bandwidth_gb_s"].mean == 338.82 and found["bus_bandwidth_at_largest_gb_s"].mean == 338.82
    assert found["time_at_smallest_us"].mean == 135.8 and found["algorithm_bandwidth_gb_s"].unit == "GB/s"
    assert "16 ranks" in notes[0] and "31 sizes from 8 B to 8589934592 B" in notes[0]
    assert "16 ranks on a host of 8 GPUs: the network bounds it" in notes[1]
    assert "bus_bandwidth_fraction_of_bound" not in found


# The recorded run of NVIDIA/nccl#340: two GeForce RTX 2080 Ti joined by an NVLink bridge. Turing
# is not in manifests/hardware.yaml (no vendor document checked); its bridge's rate as the press
# printed it at launch: two x8 NVLink 2 links, 100 GB/s both directions (Tom's Hardware, "Nvidia's
# Turing Architecture Explored", NVLink page; TechPowerUp's Turing architecture review, p. 14).
RTX_2080_TI = {
    "vendor": "NVIDIA",
    "model": "GeForce RTX 2080 Ti",
    "nvml_name": "GeForce RTX 2080 Ti",
    "bf16_dense_tflops": {"value": None, "note": "not needed here"},
    "fp16_dense_tflops": {"value": None, "note": "not needed here"},
    "memory": {"value": None, "unit": "GB", "note": "not needed here"},
    "memory_bandwidth_tb_per_s": {"value": None, "note": "not needed here"},
    "interconnect": "NVLink",
    "interconnect_generation": {"value": 2, "source": "press, see above"},
    "interconnect_bidirectional_gb_per_s": {"value": 100, "source": "press, see above"},
    "pcie_generation": {"value": 3, "source": "press, see above"},
    "pcie_lanes": {"value": None, "note": "not needed here"},
}


@pytest.fixture
def rtx2080ti_pair(paper_plan):
    from kit.theory.hardware import HardwareTable

    case = case_for(paper_plan.cases, "rtx2080ti-nvlink-old-format-headerless")
    return case, HardwareTable(gpus={"rtx-2080-ti": RTX_2080_TI})


def test_busbw_below_the_bound_is_reported_as_a_fraction_of_it(rtx2080ti_pair):
    case, hardware = rtx2080ti_pair
    topology = TopologyFacts(interconnect="nvlink-all-pairs", gpu_count=2)
    runs = comm_run(case, "rtx2080ti-nvlink-old-format-headerless", "GeForce RTX 2080 Ti", topology)
    found, notes = comm_case_metrics(case, runs, hardware)
    assert found["bus_bandwidth_gb_s"].mean == 21.4
    assert found["bus_bandwidth_fraction_of_bound"].mean == pytest.approx(21.4 / 50)
    assert not any("impossible" in note for note in notes)


def test_busbw_above_the_link_bound_is_flagged_impossible(rtx2080ti_pair):
    # The same rows, on a fingerprint that saw no bridge but a PCIe Gen3 x16 link (measured): NCCL
    # moved more than that link can carry, so the topology or the output is wrong.
    case, hardware = rtx2080ti_pair
    topology = TopologyFacts(interconnect="pcie-only", gpu_count=2, pcie_generation=3, pcie_lanes=16)
    runs = comm_run(case, "rtx2080ti-nvlink-old-format-headerless", "GeForce RTX 2080 Ti", topology)
    found, notes = comm_case_metrics(case, runs, hardware)
    assert found["bus_bandwidth_fraction_of_bound"].mean == pytest.approx(21.4 / (16 * 8 * 128 / 130 / 8))
    assert any("impossible" in note and "15.8 GB/s link bound" in note for note in notes)


# --- Scaling efficiency -------------------------------------------------------------------------


def scaling_result(plan, case_id: str, status: str = "ok", tokens_per_s: float | None = None) -> Result:
    case = next(c for c in plan.cases if c.id == case_id)
    metrics = {}
    if tokens_per_s is not None:
        metrics["tokens_per_s"] = Metric(mean=tokens_per_s, std=None, n=1, unit="tokens/s", per_run=[tokens_per_s])
    return Result(
        case_id=case.id,
        stage=case.stage,
        status=status,
        case=case,
        metrics=metrics,
        executor="local",
        started_at="t",
        finished_at="t",
    )


def test_scaling_efficiency_is_throughput_n_over_n_times_throughput_1(paper_plan):
    results = [
        scaling_result(paper_plan, f"scaling.llama2-7b.q.g{n}.b2", tokens_per_s=t)
        for n, t in ((1, 1000.0), (2, 1900.0), (4, 3600.0))
    ]
    results.append(scaling_result(paper_plan, "scaling.llama2-7b.q.g8.b2", status="oom"))
    rows = scaling_rows(results)
    assert [(row.devices, row.efficiency) for row in rows[:3]] == [(1, 1.0), (2, 0.95), (4, 0.9)]
    assert rows[1].baseline_case_id == "scaling.llama2-7b.q.g1.b2" and rows[2].per_device == 900
    assert rows[3].efficiency is None and rows[3].reason == "case oom"


def test_scaling_without_a_one_device_result_says_so(smoke_plan):
    rows = scaling_rows([scaling_result(smoke_plan, "scaling.tiny-llama.q.g2.b2", tokens_per_s=500.0)])
    assert rows[0].efficiency is None and rows[0].reason == "no one-device case in this run"


# --- nccl-tests cases: the binary is the process, its output read on the host side -----------------


@pytest.fixture
def nccl_tests_case(paper_plan):
    return next(c for c in paper_plan.cases if c.id == "comm.all_reduce.g8")


def with_gpus(case, gpus: int):
    return case.model_copy(update={"gpus": gpus, "id": case.id.replace(f".g{case.gpus}", f".g{gpus}")})


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_one_process_drives_all_the_cases_gpus_with_no_python(nccl_tests_case, gpus):
    from kit.execute import docker, nccl_tests, processes

    case = with_gpus(nccl_tests_case, gpus)
    command = nccl_tests.command(case, "all_reduce_perf")
    assert command == [
        "all_reduce_perf",
        "-b",
        "8",
        "-e",
        "1073741824",
        "-f",
        "2",
        "-g",
        str(gpus),
        "-w",
        "5",
        "-n",
        "20",
        "-d",
        "float",
        "-c",
        "1",
    ]
    assert docker.container_command(case, [1]) == command  # on the comm image's PATH, no launcher
    assert processes(case) == 1


def run_locally(case, tmp_path):
    from kit.execute import local

    case_dir = tmp_path / "cases" / case.id
    case_dir.mkdir(parents=True)
    with (case_dir / "log.txt").open("w") as log:
        return local.LocalExecutor().run_once(case, case_dir, 1, log), case_dir / "runs" / "1"


def test_without_the_nccl_tests_binary_the_case_is_unavailable(nccl_tests_case, tmp_path, monkeypatch):
    monkeypatch.delenv("KIT_NCCL_TESTS_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    run, _ = run_locally(nccl_tests_case, tmp_path)
    assert run.status == "unavailable" and "all_reduce_perf not found" in run.reason


def test_the_local_executor_runs_the_binary_and_reads_its_output_here(paper_plan, tmp_path, monkeypatch):
    recorded = "rtx2080ti-nvlink-old-format-headerless"
    stand_in(tmp_path, recorded)
    monkeypatch.setenv("KIT_NCCL_TESTS_DIR", str(tmp_path))
    case = case_for(paper_plan.cases, recorded)
    run, out = run_locally(case, tmp_path)
    assert run.status == "ok", run.reason
    [rank] = run.ranks
    sweep = CommSweep.model_validate(rank.details)
    assert sweep.command[0] == str(tmp_path / "all_gather_perf") and sweep.command[sweep.command.index("-g") + 1] == "2"
    assert len(sweep.rows) == 12 and sweep.ranks == 2 and sweep.backend == "nccl-tests"
    assert (out / sweep.raw_output_file).read_text() == fixture(recorded)
    assert json.loads((out / "rank-0.json").read_text())["status"] == "ok"
    metrics, _ = comm_case_metrics(case, [run])
    assert metrics["bus_bandwidth_gb_s"].mean == 21.4


def test_a_recorded_binary_refuses_a_command_it_was_not_recorded_for(nccl_tests_case, tmp_path, monkeypatch):
    stand_in(tmp_path, "two-gpus-nccl-info-lines")  # recorded with -g 2 up to 128 MiB
    monkeypatch.setenv("KIT_NCCL_TESTS_DIR", str(tmp_path))
    run, _ = run_locally(nccl_tests_case, tmp_path)  # the paper's: -g 8 up to 1 GiB
    assert run.status == "error" and "exited with 64" in run.reason and "asked: -b 8 -e 1073741824" in run.reason


def test_nccl_tests_wrong_elements_make_the_case_an_error_and_keep_the_output(paper_plan, tmp_path, monkeypatch):
    stand_in(tmp_path, "dgx-h100-wrong-elements")
    monkeypatch.setenv("KIT_NCCL_TESTS_DIR", str(tmp_path))
    run, out = run_locally(case_for(paper_plan.cases, "dgx-h100-wrong-elements"), tmp_path)
    assert run.status == "error" and "wrong elements at 1 size" in run.reason
    assert "237858" in (out / "all_reduce_perf.out.txt").read_text()


def test_a_failed_run_of_the_binary_is_an_error_with_its_exit_code(nccl_tests_case, tmp_path, monkeypatch):
    binary = tmp_path / "all_reduce_perf"
    binary.write_text("#!/bin/sh\necho 'Test NCCL failure common.cu:1189' >&2\nexit 3\n")
    binary.chmod(0o755)
    monkeypatch.setenv("KIT_NCCL_TESTS_DIR", str(tmp_path))
    run, _ = run_locally(nccl_tests_case, tmp_path)
    assert run.status == "error" and "exited with 3" in run.reason and "common.cu:1189" in run.reason


# --- The smoke comm stage, for real ---------------------------------------------------------------


@pytest.mark.e2e
def test_smoke_comm_stage_measures_the_four_paper_collectives(real_smoke_run):
    run = real_smoke_run
    for name in ("all_reduce", "all_gather", "reduce_scatter", "reduce"):
        result = json.loads((run / "cases" / f"comm.{name}.g2" / "result.json").read_text())
        assert result["status"] == "ok", result.get("reason")
        for rank in result["samples"][0]["ranks"]:
            sweep = CommSweep.model_validate(rank["details"])
            assert sweep.backend == "torch-gloo" and sweep.ranks == 2 and len(sweep.rows) >= 10
            assert all(row.timing.busbw_gbps > 0 and row.wrong == 0 for row in sweep.rows)
        assert result["metrics"]["bus_bandwidth_gb_s"]["mean"] > 0
        assert any("no GPU link applies" in note for note in result["notes"])
