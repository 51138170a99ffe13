"""What the host achieves (kit/measure/calibration.py): the calibration the preflight plans from the
plan's cases, its figures from the raw times its workload kept (a real CPU run's, recorded in
tests/fixtures/calibration/, SOURCE), and the datasheet's peaks those figures stand in for where
they are lower. A real run of it, through the preflight of `kit run`: tests/measure/test_soak.py."""

from __future__ import annotations

import pytest
import support
from support.calibration import H100, h100_calibration

from kit.measure.calibration import Achievable, achievable_mfu, calibration_case, calibration_of, summary
from kit.plan.predictions import training_throughput_bound
from kit.plan.protocol import Case, build_plan, load_protocol
from kit.rundir.schema import RankSample, RunSample
from kit.theory.hardware import load_hardware

FIXTURES = support.FIXTURES / "calibration"


def test_the_matmuls_are_each_trained_models_linears_at_its_largest_step(paper_plan):
    case = calibration_case(build_plan(load_protocol(), "paper", host_gpus=8, gpu_memory_bytes=80 * 2**30).cases, 8)
    models = load_protocol().models
    tokens = {"llama2-7b": 16 * 350, "llama2-13b": 350, "llama2-70b": 350}  # the 7B breakdown's micro-batch 16; else 1
    expected = [
        (count, *pair)
        for name, count in tokens.items()
        for pair in (
            (models[name].hidden_size, models[name].hidden_size),
            (models[name].hidden_size, models[name].intermediate_size),
            (models[name].intermediate_size, models[name].hidden_size),
        )
    ]
    assert list(case.params.matmul_shapes) == expected
    assert (case.id, case.image, case.device, case.params.dtype) == ("calibrate.g8", "train", "cuda", "bf16")
    assert case.params.all_reduce_bytes and case.params.transfer_bytes
    one_gpu = calibration_case([c for c in paper_plan.cases if c.stage == "pretrain"], 1)
    assert one_gpu.gpus == 1 and one_gpu.params.all_reduce_bytes is None  # no peer to reduce with
    cpu = calibration_case(build_plan(load_protocol(), "smoke").cases, 0)
    assert (cpu.device, cpu.gpus, cpu.params.dtype, cpu.params.transfer_bytes) == ("cpu", 1, "fp32", None)
    assert calibration_case([c for c in paper_plan.cases if c.stage == "comm"], 8) is None  # nothing trained, no shapes


def recorded() -> tuple[Case, RunSample]:
    case = Case.model_validate_json((FIXTURES / "cpu-case.json").read_text())
    rank = RankSample.model_validate_json((FIXTURES / "cpu-rank-0.json").read_text())
    return case, RunSample(index=1, status="ok", exit_code=0, wall_s=27.4, ranks=[rank])


def test_the_figures_are_the_best_repeats_of_the_recorded_raw_times():
    case, run = recorded()
    details = run.ranks[0].details
    calibration = calibration_of(case, run, "preflight/calibrate.g1/runs/1")
    flops = {(e.m, e.k, e.n): 2 * e.m * e.k * e.n for e in details.matmul}
    best = max(flops[(e.m, e.k, e.n)] / min(e.repeat_s) for e in details.matmul) / 1e12
    assert calibration.matmul.value == pytest.approx(best) and calibration.matmul.unit == "TFLOPS"
    copy = max(2 * e.bytes / min(e.repeat_s) for e in details.copies) / 1e9
    assert calibration.memory_copy.value == pytest.approx(copy)
    assert (calibration.device, calibration.matmul_dtype, calibration.host_to_device) == ("cpu", "fp32", None)
    assert "with 2 and with 1 threads" in calibration.matmul.how and "256 MiB" in calibration.memory_copy.how
    assert summary(calibration).startswith(f"fp32 matmul {1000 * best:.3g} GFLOPS, memory copy")


def test_several_gpus_are_held_to_the_slowest_and_the_all_reduce_to_nccl_tests_bus_bandwidth():
    """Two ranks' raw times (a unit test of the arithmetic): the slower GPU's matmul and copy are
    the host's; the all-reduce's bus bandwidth is 2 (n - 1) / n of bytes over time."""
    case = calibration_case(build_plan(load_protocol(), "quick", host_gpus=2, gpu_memory_bytes=80 * 2**30).cases, 2)
    m, k, n = case.params.matmul_shapes[0]

    def rank(index: int, seconds: float) -> RankSample:
        timed = {"iterations": 10, "repeat_s": [seconds, seconds / 2]}
        details = {
            "matmul": [{"m": m, "k": k, "n": n, "dtype": "bf16", "threads": 1, **timed}],
            "copy": [{"bytes": 2**30, "threads": 1, **timed}],
            "host_to_device": {"bytes": 2**28, "pinned": True, **timed},
            "device_to_host": {"bytes": 2**28, "pinned": True, **timed},
            "all_reduce": {"bytes": 2**29, "dtype": "float32", "ranks": 2, **timed},
        }
        return RankSample(
            rank=index,
            world_size=2,
            status="ok",
            device="cuda",
            device_name=H100,
            details=details,
            started_at="t0",
            finished_at="t1",
        )

    calibration = calibration_of(
        case, RunSample(index=1, status="ok", exit_code=0, wall_s=9.0, ranks=[rank(1, 0.004), rank(0, 0.002)]), "raw"
    )
    assert calibration.matmul.per_device == pytest.approx([2 * m * k * n / 0.001 / 1e12, 2 * m * k * n / 0.002 / 1e12])
    assert calibration.matmul.value == min(calibration.matmul.per_device)
    assert calibration.memory_copy.value == pytest.approx(2 * 2**30 / 0.002 / 1e9)
    assert calibration.host_to_device.value == pytest.approx(2**28 / 0.002 / 1e9)
    assert calibration.all_reduce_busbw.value == pytest.approx(2**29 / 0.001 / 1e9 * 2 * (2 - 1) / 2)
    assert "the lowest of 2 GPUs" in calibration.matmul.how


def test_a_figure_measured_below_the_datasheet_stands_in_for_it_and_says_so(paper_plan):
    spec = load_hardware().lookup(H100)
    lower = Achievable(
        spec, h100_calibration(0.8 * spec.bf16_dense_tflops.value, 0.9 * 1000 * spec.memory_bandwidth_tb_per_s.value)
    )
    assert lower.spec.bf16_dense_tflops.value == pytest.approx(0.8 * spec.bf16_dense_tflops.value)
    assert lower.spec.memory_bandwidth_tb_per_s.value == pytest.approx(0.9 * spec.memory_bandwidth_tb_per_s.value)
    assert lower.spec.bf16_dense_tflops.source.startswith("measured in preflight")
    assert lower.spec.fp16_dense_tflops == spec.fp16_dense_tflops  # not measured: the datasheet's
    assert (
        lower.which == f"bf16 matmul {0.8 * spec.bf16_dense_tflops.value:.0f} TFLOPS and memory copy "
        f"{0.9 * spec.memory_bandwidth_tb_per_s.value:.3g} TB/s"
    )
    case = next(c for c in paper_plan.cases if c.id == "pretrain.llama2-7b.z3.g8")
    assert training_throughput_bound(case, lower.spec) < training_throughput_bound(case, spec)
    above = Achievable(
        spec, h100_calibration(2 * spec.bf16_dense_tflops.value, 2000 * spec.memory_bandwidth_tb_per_s.value)
    )
    assert above.replaced == {} and above.spec == spec


def test_mfu_against_the_measured_matmul_is_per_gpu_and_per_host_on_a_cpu():
    assert achievable_mfu([400.0], 8, h100_calibration(100.0, 3000.0)) == [pytest.approx(0.5)]
    case, run = recorded()
    cpu = calibration_of(case, run, "raw")
    assert achievable_mfu([cpu.matmul.value / 4], 2, cpu) == [pytest.approx(0.25)]  # 2 processes share the host
