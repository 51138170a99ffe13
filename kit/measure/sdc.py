"""The silent-data-corruption check of preflight: planned here from the plan's training cases, run
by kit/workloads/sdc_check.py on every device through the executor the cases use, and judged here
from the ranks' raw fingerprints into the health section's record (kit.host.health).

Devices of the same model running the same software must compute the same bits: the same
deterministic training gives identical per-step losses and gradient norms on each. The fingerprint
most devices share is the reference (with two devices that differ, the lower rank's: either may be
the faulty one); a device that differs is named with the first step that differs. An all-reduce
of known integers per pair of ranks must come back exact, element by element.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from kit.host.health import SdcDevice, SdcPair, SilentDataCorruption
from kit.plan.protocol import Case, SdcParams
from kit.rundir.schema import RankSample, RunSample, SdcDetails

LAYERS = 2
STEPS = 8
MICRO_BATCH = 2
SEQ_LEN = 32
GPU_ALL_REDUCE_ELEMENTS = 2**20  # 4 MiB of float32: integers up to 15 x 2^20 stay exact
CPU_ALL_REDUCE_ELEMENTS = 2**14
CPU_RANKS = 2  # on a CPU host, two ranks run the same code a GPU host runs per device
TIMEOUT_S = 600
# cuBLAS is deterministic only with a fixed workspace (PyTorch's reproducibility notes); set
# before the process starts, as the library reads it when it starts.
DETERMINISTIC_ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def sdc_case(cases: Sequence[Case], host_gpus: int) -> Case | None:
    """The check on every GPU of the host (a CPU host: two ranks), in the image of the first
    training case, on its model cut to LAYERS layers; None where no case trains a model."""
    trained = next((case for case in cases if case.train and case.shape is not None), None)
    if trained is None:
        return None
    cuda = trained.device == "cuda"
    ranks = max(1, host_gpus) if cuda else CPU_RANKS
    params = SdcParams(
        runs=1,
        seed=trained.params.seed,
        timeout_s=TIMEOUT_S,
        env=DETERMINISTIC_ENV if cuda else {},
        layers=LAYERS,
        steps=STEPS,
        micro_batch=MICRO_BATCH,
        seq_len=SEQ_LEN,
        all_reduce_elements=GPU_ALL_REDUCE_ELEMENTS if cuda else CPU_ALL_REDUCE_ELEMENTS,
    )
    return Case(
        id=f"sdc.g{ranks}",
        stage="sdc",
        workload="sdc",
        image=trained.image,
        model=trained.model,
        shape=trained.shape,
        method="sdc",
        gpus=ranks,
        device=trained.device,
        params=params,
        unpublished=(),
        interpretation={},
    )


def _fingerprint(details: SdcDetails) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return tuple(details.loss_bits), tuple(details.grad_norm_bits)


def _first_difference(details: SdcDetails, reference: SdcDetails) -> str:
    """ "step 4: loss 0x40b1c2d3, the others 0x40b1c2d4" for the first step that differs."""
    for step, (mine, theirs) in enumerate(zip(details.loss_bits, reference.loss_bits, strict=False)):
        if mine != theirs:
            return f"step {step}: loss {mine}, the others {theirs}"
    for step, (mine, theirs) in enumerate(zip(details.grad_norm_bits, reference.grad_norm_bits, strict=False)):
        if mine != theirs:
            return f"step {step}: gradient norm {mine}, the others {theirs}"
    return f"{len(details.loss_bits)} steps, the others {len(reference.loss_bits)}"


def _devices(ranks: Sequence[tuple[int, SdcDetails]]) -> list[SdcDevice]:
    """Each rank against the fingerprint most ranks of its device model share."""
    by_model: dict[str, list[tuple[int, SdcDetails]]] = {}
    for rank, details in ranks:
        model = details.device.split(": ", 1)[-1] if details.device.startswith("GPU") else "CPU"
        by_model.setdefault(model, []).append((rank, details))
    devices = []
    for group in by_model.values():
        common, _ = Counter(_fingerprint(details) for _, details in group).most_common(1)[0]
        reference = next(details for _, details in group if _fingerprint(details) == common)
        for rank, details in group:
            same = _fingerprint(details) == common
            devices.append(
                SdcDevice(
                    rank=rank,
                    device=details.device,
                    identical=same,
                    steps=len(details.loss_bits),
                    first_difference=None if same else _first_difference(details, reference),
                )
            )
    return sorted(devices, key=lambda device: device.rank)


def _pairs(ranks: Sequence[tuple[int, SdcDetails]]) -> list[SdcPair]:
    """Each pair once: of its two ranks' verifications, the one that found more wrong elements."""
    worst: dict[tuple[int, int], SdcPair] = {}
    for _, details in ranks:
        for pair in details.all_reduce:
            if pair.ranks not in worst or pair.wrong_elements > worst[pair.ranks].wrong_elements:
                worst[pair.ranks] = pair
    return [worst[key] for key in sorted(worst)]


def silent_data_corruption(case: Case, run: RunSample, raw_samples: str) -> SilentDataCorruption:
    """The check's record from its ranks' samples: pass where every device computed the same bits
    and every pair's all-reduce came back exact, fail naming the devices and pairs that did not,
    error where a rank gave no fingerprint."""
    params = case.params_as(SdcParams)
    model = (
        f"{min(params.layers, case.model_shape.num_layers)} of {case.model}'s layers, {params.steps} steps of "
        f"micro-batch {params.micro_batch} x {params.seq_len} tokens, fp32, deterministic algorithms"
    )
    found: list[tuple[int, SdcDetails]] = []
    missing: list[RankSample] = []
    for rank in sorted(run.ranks, key=lambda sample: sample.rank):
        details = rank.details_as(SdcDetails)
        if details is None or rank.status != "ok":
            missing.append(rank)
        else:
            found.append((rank.rank, details))
    if missing or not found:
        why = "; ".join(f"rank {rank.rank}: {rank.status} {rank.reason or ''}".strip() for rank in missing)
        return SilentDataCorruption(
            status="error", summary=why or "no rank reported", model=model, raw_samples=raw_samples
        )
    devices, pairs = _devices(found), _pairs(found)
    differing = [device for device in devices if not device.identical]
    wrong = [pair for pair in pairs if pair.wrong_elements]
    problems = [f"{device.device} (rank {device.rank}) differs at {device.first_difference}" for device in differing]
    problems += [
        f"all-reduce of ranks {pair.ranks[0]} and {pair.ranks[1]}: {pair.wrong_elements} of {pair.elements} "
        f"elements wrong ({pair.first_wrong})"
        for pair in wrong
    ]
    summary = "; ".join(problems) or (
        f"{len(devices)} devices computed identical fingerprints over {params.steps} steps"
        + (f"; {len(pairs)} pair(s) all-reduced {params.all_reduce_elements} values exactly" if pairs else "")
    )
    return SilentDataCorruption(
        status="fail" if problems else "pass",
        summary=summary,
        devices=devices,
        pairs=pairs,
        model=model,
        raw_samples=raw_samples,
    )
