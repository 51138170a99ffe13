"""What a first run on a host does before and between its cases, once, and how long that takes:
the preflight, the synthetic checkpoints, DeepSpeed's ops built on first use, the vLLM
environment, the images. Said apart from the cases' estimates, each with what it rests on, and
unknown where nothing was measured."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from kit.plan.fit import checkpoint_bytes

if TYPE_CHECKING:
    from kit.plan.protocol import Case

# The preflight: 42 s on the recorded H100 host (tests/fixtures/h100x1-run, run-first-part.log),
# 45-53 s on a quiet 2-core CPU machine (README, tests/benchmarks/smoke_duration.py).
PREFLIGHT_S = {"cuda": 42.0, "cpu": 53.0}
# A synthetic checkpoint written: the recorded H100 run's first case of the 7B model took 75-98 s
# against 15-24 s once its 13.5 GB checkpoint was made (kit.plan.estimate), about 0.18 GB/s.
CHECKPOINT_WRITE_BYTES_S = 0.18e9
# On a CPU host (README): DeepSpeed's shared-memory communication op 33 s, vLLM's CPU environment 85 s.
CPU_SHARED_MEMORY_OP_S = 33.0
CPU_VLLM_ENVIRONMENT_S = 85.0


class FirstRunWork(NamedTuple):
    what: str
    seconds: float | None  # None: not measured on such a host
    basis: str


def first_run_work(cases: list[Case], device: str, docker: bool | None, cache: Path | None) -> list[FirstRunWork]:
    """The one-off work before `cases` (those a run will attempt) on a host whose GPU cases run
    in docker where `docker`; `cache`: this host's cache, to leave out what it already holds
    (None for another host's fingerprint: everything is counted)."""
    work = [
        FirstRunWork(
            "preflight (kit preflight)",
            PREFLIGHT_S[device],
            "42 s on the recorded H100 host, 45-53 s on a 2-core CPU machine",
        )
    ]
    if device == "cuda":  # a CPU profile's tiny checkpoints take seconds
        work += _checkpoints(cases, cache)
    training = [case for case in cases if case.params.kind == "train"]
    built = cache is not None and any((cache / "torch_extensions").glob("*/*"))
    made = cache is not None and any((cache / "engines").glob("vllm*"))
    if training and not built and device == "cpu":
        work.append(FirstRunWork("DeepSpeed's shared-memory op built", CPU_SHARED_MEMORY_OP_S, "33 s on a 2-core CPU"))
    elif training and not built and not docker:
        work.append(
            FirstRunWork("DeepSpeed's FusedAdam and CPUAdam built on first use", None, "not measured on a GPU host")
        )
    serving = {case.method for case in cases if case.workload == "serve"}
    if "vllm" in serving and not made and device == "cpu":
        work.append(FirstRunWork("vLLM's CPU environment made", CPU_VLLM_ENVIRONMENT_S, "85 s on a 2-core CPU"))
    elif "vllm" in serving and not made and not docker:
        work.append(FirstRunWork("vLLM's CUDA environment made", None, "not measured: a download of several GB"))
    if device == "cuda" and docker:
        images = sorted({case.image for case in cases})
        work.append(FirstRunWork(f"images pulled or built ({', '.join(images)})", None, "not measured"))
    return work


def _checkpoints(cases: list[Case], cache: Path | None) -> list[FirstRunWork]:
    from kit.plan.model_key import model_key

    made: dict[str, FirstRunWork] = {}
    for case in cases:
        size = checkpoint_bytes(case)
        if size is None or case.shape is None:
            continue
        name, shape = case.named_model
        key = model_key(name, shape, case.params.seed)
        if key in made or (cache is not None and (cache / "checkpoints" / key).is_dir()):
            continue
        made[key] = FirstRunWork(
            f"synthetic checkpoint of {name} written ({size / 1e9:.1f} GB)",
            size / CHECKPOINT_WRITE_BYTES_S,
            f"at {CHECKPOINT_WRITE_BYTES_S / 1e9:.2f} GB/s, as the recorded H100 run wrote 7B's",
        )
    return list(made.values())


def first_run_text(work: list[FirstRunWork]) -> str:
    """ " + first-run work 1 min 57 s and 2 not estimated": said apart from the cases' estimate."""
    from kit.plan.view import duration_text

    known = [item.seconds for item in work if item.seconds is not None]
    unknown = len(work) - len(known)
    return f" + first-run work {duration_text(sum(known))}" + (f" and {unknown} not estimated" if unknown else "")
