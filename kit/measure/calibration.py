"""What this host achieves, beside what its datasheet promises: planned from the plan's cases,
measured in preflight by kit/workloads/calibrate.py (through the executor the cases use), and
turned here from raw times into the figures the fingerprint records (kit.host.fingerprint.Calibration).

A datasheet peak is more than any kernel reaches, and a GPU under a lowered power limit or clocks
reaches less still: MFU against the measured matmul, and an expectation and roofline at the
measured figures where they are lower, tell a slow software stack from a slow or capped GPU. The
datasheet peak stays the bound for the flags of impossible values, which must be a physical limit.
"""

from __future__ import annotations

from collections.abc import Sequence

from kit.comm.collectives import bus_bandwidth_gbps
from kit.host.fingerprint import Calibration, MeasuredFigure
from kit.plan.protocol import CalibrateParams, Case
from kit.rundir.schema import CalibrationDetails, MatmulTiming, RankSample, RunSample, Timed
from kit.theory.analytic import LlamaShape, mfu
from kit.theory.hardware import Figure, GpuSpec
from kit.units import format_value

# Sizes of the measurements. A copy and a transfer large enough to leave every cache (tens of MB)
# far behind; on a CPU a smaller copy, so that the measurement takes a second. The all-reduce:
# one large message; nccl-tests' bus bandwidth still rises slowly beyond it
# (tests/fixtures/nccl_tests/h100x16-two-nodes-all_reduce.txt), so the comm stage's sweep, not
# this, is the curve.
GPU_COPY_BYTES = 2**30
CPU_COPY_BYTES = 2**28
TRANSFER_BYTES = 2**28
ALL_REDUCE_BYTES = 2**29
REPEATS = 5
SECONDS_PER_REPEAT = 0.05
TIMEOUT_S = 300
TERA, GIGA = 1e12, 1e9
CALIBRATED_KINDS = ("train", "profile")


def linear_shapes(shape: LlamaShape, tokens: int) -> list[tuple[int, int, int]]:
    """The matmuls (M, K, N) of a decoder layer's linears at `tokens` rows: the attention's
    projections (hidden -> hidden), the MLP's gate and up (hidden -> intermediate) and its down
    (intermediate -> hidden)."""
    hidden, intermediate = shape.hidden_size, shape.intermediate_size
    return [(tokens, hidden, hidden), (tokens, hidden, intermediate), (tokens, intermediate, hidden)]


def plan_shapes(cases: Sequence[Case]) -> list[tuple[int, int, int]]:
    """Each trained model's linear shapes at the most tokens a step of its cases gives one device
    (micro-batch x sequence), in plan order, each once."""
    tokens: dict[str | None, tuple[LlamaShape, int]] = {}  # by model
    for case in cases:
        if (
            case.params.kind in CALIBRATED_KINDS
            and case.step
            and case.shape is not None
            and case.max_batch_search is None
        ):
            _, most = tokens.get(case.model, (case.shape, 0))
            tokens[case.model] = (case.shape, max(most, case.step.tokens_per_step))
    return list(dict.fromkeys(s for shape, count in tokens.values() for s in linear_shapes(shape, count)))


def calibration_case(cases: Sequence[Case], host_gpus: int) -> Case | None:
    """The calibration of the host the cases run on: every GPU of it at once (a CPU host: one
    process with every core), in the image of the first training case; None where no case trains
    a model (no shapes to measure)."""
    shapes = plan_shapes(cases)
    trained = next((case for case in cases if case.params.kind in CALIBRATED_KINDS), None)
    if not shapes or trained is None:
        return None
    cuda = trained.device == "cuda"
    gpus = max(1, host_gpus) if cuda else 1
    params = CalibrateParams(
        runs=1,
        seed=trained.params.seed,
        timeout_s=TIMEOUT_S,
        dtype="bf16" if cuda else "fp32",
        matmul_shapes=tuple(shapes),
        copy_bytes=GPU_COPY_BYTES if cuda else CPU_COPY_BYTES,
        transfer_bytes=TRANSFER_BYTES if cuda else None,
        all_reduce_bytes=ALL_REDUCE_BYTES if cuda and gpus > 1 else None,
        repeats=REPEATS,
        seconds_per_repeat=SECONDS_PER_REPEAT,
    )
    return Case(
        id=f"calibrate.g{gpus}",
        stage="calibrate",
        workload="calibrate",
        image=trained.image,
        model=None,
        shape=None,
        method="calibrate",
        gpus=gpus,
        device=trained.device,
        params=params,
        unpublished=(),
        interpretation={},
    )


def _best(entry: Timed) -> float:
    """The best repeat's seconds per call."""
    return min(entry.repeat_s)


def _lowest(values: list[float], unit: str, how: str) -> MeasuredFigure:
    return MeasuredFigure(value=min(values), unit=unit, per_device=values, how=how)


def _details(ranks: Sequence[RankSample]) -> list[CalibrationDetails]:
    found = [rank.details_as(CalibrationDetails) for rank in ranks]
    return [details for details in found if details is not None]


def _per_shape(entries: list[MatmulTiming]) -> dict[str, float]:
    """One device's TFLOPS of each matmul shape: the best repeat of its best thread count."""
    found: dict[str, float] = {}
    for entry in entries:
        key = f"{entry.m}x{entry.k}x{entry.n}"
        found[key] = max(found.get(key, 0.0), 2 * entry.m * entry.k * entry.n / _best(entry) / TERA)
    return found


def _threads(details: Sequence[CalibrationDetails]) -> list[str]:
    return [str(count) for count in dict.fromkeys(entry.threads for each in details for entry in each.matmul)]


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 2**30:g} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:g} MiB"


def calibration_of(case: Case, run: RunSample, raw_samples: str) -> Calibration:
    """The figures of a calibration run from its ranks' raw times: each the best repeat, and of
    several GPUs the lowest (a synchronous step waits for the slowest)."""
    params = case.params_as(CalibrateParams)
    ranks = sorted(run.ranks, key=lambda rank: rank.rank)
    details = _details(ranks)
    devices = f"; the lowest of {len(ranks)} GPUs, measured at once" if len(ranks) > 1 else ""
    repeats = f"best of {params.repeats} repeats of {1000 * params.seconds_per_repeat:g} ms"
    threads = f", with {' and with '.join(_threads(details))} threads" if case.device == "cpu" else ""
    per_rank = [_per_shape(each.matmul) for each in details]
    lowest = {key: min(found[key] for found in per_rank) for key in per_rank[0]}
    best_shape = max(lowest, key=lowest.__getitem__)
    matmul = _lowest(
        [max(found.values()) for found in per_rank],
        "TFLOPS",
        f"{params.dtype} torch.matmul, the best of {len(lowest)} shapes of the plan's linear layers (M×K×N; best "
        f"{best_shape.replace('x', '×')}), each the {repeats}{threads}{devices}",
    )
    copies = [each.copies for each in details]
    memory = _lowest(
        [max(2 * entry.bytes / _best(entry) / GIGA for entry in entries) for entries in copies],
        "GB/s",
        f"a copy of {_size(copies[0][0].bytes)} within {'device' if case.device == 'cuda' else 'host'} memory, "
        f"counted as read plus written (2 × its bytes, as STREAM's Copy counts), {repeats}{threads}{devices}",
    )
    transfers = {}
    for name, words in (
        ("host_to_device", "pinned host memory to the GPU"),
        ("device_to_host", "the GPU to pinned host memory"),
    ):
        entries = [entry for each in details if (entry := getattr(each, name)) is not None]
        if entries and len(entries) == len(ranks):
            transfers[name] = _lowest(
                [entry.bytes / _best(entry) / GIGA for entry in entries],
                "GB/s",
                f"copies of {_size(entries[0].bytes)} from {words}, {repeats}{devices}",
            )
    reduced = details[0].all_reduce
    all_reduce = None
    if reduced is not None:
        busbw = bus_bandwidth_gbps("all_reduce", reduced.bytes, _best(reduced), reduced.ranks)
        all_reduce = MeasuredFigure(
            value=busbw,
            unit="GB/s",
            how=(
                f"one all-reduce of {_size(reduced.bytes)} {reduced.dtype} across {reduced.ranks} GPUs by torch.distributed "
                f"(NCCL), bus bandwidth as nccl-tests computes it, {repeats}, each as long as its slowest rank"
            ),
        )
    return Calibration(
        device=case.device,
        device_names=[rank.device_name for rank in ranks],
        matmul_dtype=params.dtype,
        matmul=matmul,
        memory_copy=memory,
        **transfers,
        all_reduce_busbw=all_reduce,
        shapes_tflops=lowest,
        raw_samples=raw_samples,
        seconds=run.wall_s,
    )


def matmul_text(calibration: Calibration) -> str:
    """ "790 TFLOPS" on a GPU, "41.2 GFLOPS" on a CPU, where TFLOPS would read as zero."""
    value = calibration.matmul.value
    return f"{format_value(value)} TFLOPS" if value >= 1 else f"{format_value(value * 1000)} GFLOPS"


def summary(calibration: Calibration) -> str:
    """One line: each figure measured, with its dtype and direction."""
    parts = [
        f"{calibration.matmul_dtype} matmul {matmul_text(calibration)}",
        f"memory copy {format_value(calibration.memory_copy.value)} GB/s",
    ]
    parts += [
        f"{words} {format_value(figure.value)} GB/s"
        for words, figure in (
            ("host→device", calibration.host_to_device),
            ("device→host", calibration.device_to_host),
            ("all-reduce busbw", calibration.all_reduce_busbw),
        )
        if figure is not None
    ]
    return ", ".join(parts)


class Achievable:
    """A GPU's datasheet entry with the figures the preflight measured lower in their place: the
    denominators of the expectation and the achievable roofline. `replaced`: which, with its value."""

    def __init__(self, spec: GpuSpec, calibration: Calibration | None):
        self.replaced: dict[str, str] = {}
        update = {}
        if calibration is not None and calibration.device == "cuda":
            peak, bandwidth = spec.bf16_dense_tflops.value, spec.memory_bandwidth_tb_per_s.value
            matmul, copy_tb_s = calibration.matmul.value, calibration.memory_copy.value / 1000
            if calibration.matmul_dtype == "bf16" and peak and matmul < peak:
                update["bf16_dense_tflops"] = Figure[float](
                    value=matmul, source=f"measured in preflight: {calibration.matmul.how}"
                )
                self.replaced["bf16_dense_tflops"] = f"bf16 matmul {format_value(matmul)} TFLOPS"
            if bandwidth and copy_tb_s < bandwidth:
                update["memory_bandwidth_tb_per_s"] = Figure[float](
                    value=copy_tb_s, source=f"measured in preflight: {calibration.memory_copy.how}"
                )
                self.replaced["memory_bandwidth_tb_per_s"] = f"memory copy {format_value(copy_tb_s)} TB/s"
        self.spec = spec.model_copy(update=update)

    @property
    def which(self) -> str:
        """ "bf16 matmul 790 TFLOPS and memory copy 2.87 TB/s": the figures that stand in for the datasheet's."""
        return " and ".join(self.replaced.values())


def achievable_mfu(tflops_per_run: Sequence[float], devices: int, calibration: Calibration) -> list[float]:
    """Each run's achieved TFLOPS against what its devices achieved on a matmul in preflight (a
    CPU host's processes share one host's cores: one device)."""
    return [
        mfu(value, calibration.matmul.value, devices if calibration.device == "cuda" else 1) for value in tflops_per_run
    ]
