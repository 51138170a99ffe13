"""Preflight: minutes on a new host, every image and engine the plan needs checked before hours of work.

Each image the plan runs in is checked the way the plan will use it, through the same executor:
a miniature case of each of its stages (the tiny Llama, one step, one request, one message size)
runs for real, so a broken image, driver, framework or engine shows in minutes, not hours into
the run. With the docker executor, the image's presence and its match with the lock are checked
first. A failed line says what to do. `kit run` runs the preflight first (unless told
--no-preflight): the cases of an image whose check failed end `error` with the preflight's
reason, and the other stages run.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from kit.execute.base import Executor
from kit.files.atomic import appending
from kit.host.collection import collect
from kit.host.environment import Check, evaluate, load_expectations
from kit.host.fingerprint import Calibration, Fingerprint
from kit.host.health import SilentDataCorruption
from kit.host.probe_cache import probe_this_python
from kit.plan.protocol import (
    Case,
    CommParams,
    Plan,
    load_protocol,
    unavailable_by_design,
)
from kit.rundir.schema import (
    Preflight,
    PreflightLine,
    RunSample,
)

MINIATURE_MODEL = "tiny-llama"
MINIATURE_TIMEOUT_S = 600


def miniature(case: Case) -> Case:
    """The case's smallest real form: the tiny Llama, one run, one warm-up-free step, one
    message size, one short request (no sweep, rate search, shared prefixes or start-up); same stage, method, image, device and executor path."""
    tiny = load_protocol().models[MINIATURE_MODEL]
    params = case.params
    common = {"runs": 1, "timeout_s": MINIATURE_TIMEOUT_S}
    soak = {"soak": None} if params.kind in ("train", "serve") else {}  # a soak case's miniature measures no soak
    if params.kind in ("train", "profile"):
        update = {**common, **soak, "warmup_steps": 0, "measured_steps": 1, "micro_batch": 1, "seq_len": 32}
        model = {"model": MINIATURE_MODEL, "shape": tiny}
    elif params.kind == "comm":
        update = {**common, "min_bytes": 1024, "max_bytes": 1024, "warmup_iters": 1, "iters": 2}
        model = {}
    else:  # serve
        update = {
            **common,
            **soak,
            "prompts": 1,
            "input_tokens": 16,
            "max_output_tokens": 8,
            "warmup_requests": 0,
            "ready_timeout_s": 480,
            "sweep": None,
            "rates": None,
            "prefix": None,
            "startup": False,
        }
        model = {"model": MINIATURE_MODEL, "shape": tiny}
    return case.model_copy(update={"id": f"preflight.{case.id}", "params": params.model_copy(update=update), **model})


def representatives(cases: list[Case]) -> list[Case]:
    """One case per image and workload (stages that run the same workload in the same image, as
    pre-training, fine-tuning and scaling do, share one), in plan order; a method that cannot
    run on this device by design (FlashAttention on a CPU) represents nothing."""
    chosen: dict[tuple[str, str], Case] = {}
    for case in cases:
        if unavailable_by_design(case) is not None:
            continue
        chosen.setdefault((case.image, case.workload), case)
    return list(chosen.values())


def all_gpu_all_reduce(train: Case, host_gpus: int) -> Case:
    """An all-reduce across every GPU of the host in the training image, by torch.distributed
    (NCCL, as DeepSpeed reduces gradients): GPUs that cannot all reach each other show here, not as
    a multi-GPU case that hangs hours later. A full comm case; its miniature is what runs."""
    params = CommParams(
        backend="torch",
        collective="all_reduce",
        dtype="float32",
        min_bytes=1024,
        max_bytes=1024,
        step_factor=2,
        warmup_iters=1,
        iters=2,
        runs=1,
        seed=train.params.seed,
        timeout_s=MINIATURE_TIMEOUT_S,
    )
    return Case(
        id=f"all_reduce.g{host_gpus}",
        stage="comm",
        workload="comm",
        image=train.image,
        model=None,
        shape=None,
        method="all_reduce",
        gpus=host_gpus,
        device="cuda",
        params=params,
        unpublished=(),
        interpretation={},
    )


def gpus_seen_differ(sample, host_gpu_names: list[str]) -> str | None:
    """Why the GPUs a miniature's processes saw (CUDA inside the container, or nccl-tests' device
    lines) are not the host's (NVML outside), or None when they are."""
    seen = {name for rank in sample.ranks for name in rank.device_name.split(", ")}
    if seen <= set(host_gpu_names):
        return None
    return f"the processes saw {', '.join(sorted(seen))}; the host has {', '.join(sorted(set(host_gpu_names))) or 'no GPU'}"


def _image_lines(image: str, executor_name: str) -> list[PreflightLine]:
    """With docker: the image is here and is what the lock pins."""
    if executor_name != "docker":
        return []
    from kit import images

    started = time.monotonic()
    lock = images.load_lock()
    state = images.verify_one(image, lock.images[image], probe=False)
    kind = "build" if lock.images[image].build else "pull"
    if state.image_id is None:  # "missing", or "unpinned" and not here either
        return [
            PreflightLine(
                image=image,
                check="image present",
                status="fail",
                detail=f"{state.reference} is not here",
                hint=f"kit images {kind} {image}",
                seconds=time.monotonic() - started,
            )
        ]
    # Built on another base (`kit images build --base`, as where no registry answers) is the
    # builder's choice and is said; anything else that differs is not the pinned image.
    differs = [f"{d.field}: lock {d.lock}, here {d.local}" for d in state.differences if d.field != "base"]
    based = [f"built on {d.local}, not the pinned {d.lock}" for d in state.differences if d.field == "base"]
    return [
        PreflightLine(
            image=image,
            check="image matches the lock",
            status="fail" if differs else "ok",
            detail="; ".join(differs + based) or f"{state.reference} ({(state.image_id or '')[:19]})",
            hint=f"kit images verify {image}, then kit images {kind} {image}" if differs else None,
            seconds=time.monotonic() - started,
        )
    ]


def run_check(case: Case, executor: Executor, work: Path) -> tuple[RunSample | str, Path]:
    """One run of `case` for real, through the executor the plan will use, in work/<case id>/:
    its sample, or why the executor gave none, and the folder."""
    folder = work / case.id
    folder.mkdir(parents=True, exist_ok=True)
    from kit.rundir.directory import atomic_write_model

    atomic_write_model(folder / "case.json", case)
    with appending(folder / "log.txt") as log:
        try:
            return executor.run_once(case, folder, 1, log), folder
        except Exception as exc:  # noqa: BLE001 - a refused container, a broken executor: the line's answer
            return f"{type(exc).__name__}: {exc}", folder


def _case_line(case: Case, executor: Executor, work: Path, host_gpu_names: list[str]) -> PreflightLine:
    """Run the miniature for real, through the executor the plan will use; on a GPU, the GPUs its
    processes saw must be the host's."""
    started = time.monotonic()
    what = {
        "train": "one training step",
        "profile": "one profiled step",
        "serve": "one streamed request",
        "comm": f"one collective of 1 KiB by {case.params.backend if isinstance(case.params, CommParams) else ''}",
    }[case.params.kind]
    check = f"{case.stage}: {what} ({case.method}, g{case.gpus})"
    sample, folder = run_check(miniature(case), executor, work)
    if isinstance(sample, str):
        status, detail = "fail", sample
    else:
        status, detail = (
            ("ok", f"{executor.name}: ran in {sample.wall_s:.0f} s")
            if sample.status == "ok"
            else ("fail", f"{sample.status}: {sample.reason}")
        )
        # A serving sample names the host's GPUs itself; the others report what they saw inside.
        differ = (
            gpus_seen_differ(sample, host_gpu_names) if case.device == "cuda" and case.params.kind != "serve" else None
        )
        if status == "ok" and differ:
            status, detail = "fail", differ
    hint = (
        None
        if status == "ok"
        else f"see {folder / 'log.txt'}"
        + (f" and {folder / 'runs/1/engine.log'}" if case.params.kind == "serve" else "")
    )
    return PreflightLine(
        image=case.image, check=check, status=status, detail=detail[:600], hint=hint, seconds=time.monotonic() - started
    )


def calibrate(case: Case, executor: Executor, work: Path) -> tuple[PreflightLine, Calibration | None]:
    """What the host achieves (kit.measure.calibration), measured through the executor the plan will use;
    the line and the figures, or the line saying why there are none. The host's line: a failed
    calibration leaves the figures unmeasured and every case to run."""
    from kit.measure.calibration import calibration_of, summary

    started = time.monotonic()
    sample, folder = run_check(case, executor, work)
    calibration = None
    if isinstance(sample, str):
        status, detail = "fail", sample
    elif sample.status == "ok":
        calibration = calibration_of(case, sample, (folder / "runs" / "1").resolve().as_posix())
        status, detail = "ok", summary(calibration)
    else:
        status, detail = "fail", f"{sample.status}: {sample.reason}"
    return PreflightLine(
        image="host",
        check=f"calibration: what {'the GPUs achieve' if case.device == 'cuda' else 'the CPU achieves'} ({executor.name}, "
        f"g{case.gpus})",
        status=status,
        detail=detail[:600],
        hint=None if calibration else f"see {folder / 'log.txt'}",
        seconds=time.monotonic() - started,
    ), calibration


def check_silent_data_corruption(
    case: Case, executor: Executor, work: Path
) -> tuple[PreflightLine, SilentDataCorruption | None]:
    """The same short training on every device and an all-reduce per pair (kit.measure.sdc),
    through the executor the plan will use: the line, and the record where the ranks reported."""
    from kit.measure.sdc import silent_data_corruption

    started = time.monotonic()
    sample, folder = run_check(case, executor, work)
    record = None
    if isinstance(sample, str):
        status, detail = "fail", sample
    elif sample.status == "ok":
        record = silent_data_corruption(case, sample, (folder / "runs" / "1").resolve().as_posix())
        status, detail = ("ok" if record.status == "pass" else "fail"), record.summary
    else:
        status, detail = "fail", f"{sample.status}: {sample.reason}"
    devices = f"{case.gpus} GPUs" if case.device == "cuda" else f"{case.gpus} CPU ranks"
    return PreflightLine(
        image="host",
        check=f"silent data corruption: the same training on {devices}, all-reduce per pair ({executor.name})",
        status=status,
        detail=detail[:600],
        hint=None if status == "ok" else f"see {folder / 'log.txt'}",
        seconds=time.monotonic() - started,
    ), record


def gate_line(checks) -> PreflightLine:
    """The fingerprint gate (kit doctor's checks) as one line."""
    failed = [check for check in checks if check.status == "fail"]
    detail = (
        "; ".join(f"{check.name}: {check.observed}" for check in failed) or f"{len(checks)} environment checks pass"
    )
    return PreflightLine(
        image="host",
        check="environment (kit doctor)",
        status="fail" if failed else "ok",
        detail=detail,
        hint=failed[0].remedy if failed else None,
        seconds=0.0,
    )


def run_preflight(
    cases: list[Case],
    requested: Executor | None,
    checks,
    out_dir: Path | None = None,
    say=print,
    host_gpu_names: Sequence[str] = (),
) -> Preflight:
    """Every image the cases need, checked, after the environment gate; the miniatures' folders
    go into `out_dir` (kept as evidence of the check). On a host with more than one GPU, the
    training image also runs an all-reduce across all of them. Then, where the training image
    passed, a short measurement of what the host achieves (kit.measure.calibration), and the
    silent-data-corruption check on every device (kit.measure.sdc)."""
    from kit.execute.choice import choose
    from kit.measure.calibration import calibration_case
    from kit.measure.sdc import sdc_case

    started = time.monotonic()
    work = out_dir or Path(tempfile.mkdtemp(prefix="kit-preflight-"))
    lines: list[PreflightLine] = [gate_line(checks)]
    checked_images: set[str] = set()
    checks_to_run = []
    for case in representatives(cases):
        checks_to_run.append(case)
        if case.device == "cuda" and case.workload == "train" and len(host_gpu_names) > 1:
            checks_to_run.append(all_gpu_all_reduce(case, len(host_gpu_names)))
    for case in checks_to_run:
        executor = choose(case, requested)
        if case.image not in checked_images:
            checked_images.add(case.image)
            lines += _image_lines(case.image, executor.name)
        if any(line.image == case.image and line.status == "fail" for line in lines):
            continue  # no use starting what is not there
        say(f"preflight: {case.image}, {case.stage} ({executor.name})")
        lines.append(_case_line(case, executor, work, list(host_gpu_names)))
    calibration = None
    measuring = calibration_case(cases, len(host_gpu_names))
    if measuring is not None and not any(line.image == measuring.image and line.status == "fail" for line in lines):
        executor = choose(measuring, requested)
        say(f"preflight: calibration, what this host achieves ({executor.name})")
        line, calibration = calibrate(measuring, executor, work)
        lines.append(line)
    corruption = None
    checking = sdc_case(cases, len(host_gpu_names))
    if checking is not None and not any(line.image == checking.image and line.status == "fail" for line in lines):
        executor = choose(checking, requested)
        say(f"preflight: silent data corruption, the same training on every device ({executor.name})")
        line, corruption = check_silent_data_corruption(checking, executor, work)
        lines.append(line)
    return Preflight(
        lines=lines,
        seconds=time.monotonic() - started,
        calibration=calibration,
        silent_data_corruption=corruption,
    )


def expected_gpus(plan: Plan) -> int | None:
    """The GPU count a GPU profile's largest case is written for (before the plan was fitted to
    this host); None for a CPU profile."""
    counts = [case.fitted_from or case.gpus for case in plan.cases if case.device == "cuda"]
    return max(counts) if counts else None


def check_host(
    plan: Plan, redact: bool = False, executor: str | None = None, dcgm_level: int | None = None
) -> tuple[Fingerprint, list[Check]]:
    """Fingerprint this host (with the frameworks of this Python, the CUDA of the images the
    plan runs in unless it runs here, and its GPUs' health, with `dcgmi diag -r dcgm_level` where
    one is given) and check it for the plan."""
    from kit.images import images_cuda

    names = [] if executor == "local" else sorted({case.image for case in plan.cases})
    fingerprint = collect(
        redact=redact, image_probe=probe_this_python(), images_cuda=images_cuda(names), dcgm_level=dcgm_level
    )
    return fingerprint, evaluate(fingerprint, load_expectations(), expected_gpus(plan))


def failing(checks: list[Check]) -> list[Check]:
    return [check for check in checks if check.status == "fail"]


def preflight_for(
    profile: str | None, executor_name: str | None, say=print, dcgm_level: int | None = None
) -> Preflight:
    """`kit preflight`: the plan of this host checked as it would run, through the executor named
    (docker with its images where none is named on a GPU host; images.EngineUnavailable where
    docker is needed and no engine answers)."""
    from kit.execute.choice import named
    from kit.execute.leftovers import remove_leftovers
    from kit.host.this_host import this_host
    from kit.plan.fit import skip_reason
    from kit.plan.protocol import plan_for

    host = this_host()
    plan = plan_for(host, profile)
    if executor_name == "docker" or (executor_name is None and plan.device == "cuda"):  # each case in its image
        from kit import images

        images.engine()
    remove_leftovers(say)
    _, checks = check_host(plan, dcgm_level=dcgm_level)
    cases = [case for case in plan.cases if skip_reason(case, host) is None]
    return run_preflight(
        cases, named(executor_name) if executor_name else None, checks, say=say, host_gpu_names=host.gpu_names
    )
