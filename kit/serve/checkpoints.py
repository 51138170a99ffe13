"""A case's synthetic checkpoint, made once into the host's cache by the kit's own code.

An engine that cannot make random weights itself loads a checkpoint, as does training that
quantises or adds LoRA to a pre-trained model. It is never made inside an
engine's image (their transformers differ, and a 70B checkpoint would be written once per
engine): the kit's own workload code makes it, in this Python or in the kit's own image, into
`$KIT_CACHE/checkpoints` (kit.workloads.synthetic, a cache entry made once, whole), and the
engine, or the training container, gets it mounted read-only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kit.cache import CacheEntryInvalid, cache_dir, read_marker
from kit.plan.model_key import model_key
from kit.plan.protocol import Case


def checkpoint_path(case: Case) -> Path:
    """Where the case's checkpoint lies in the host's cache."""
    return cache_dir() / "checkpoints" / model_key(*case.named_model, case.params.seed)


def maker_arguments(case: Case) -> list[str]:
    """`python -m` arguments that make the case's checkpoint (kit.workloads.synthetic)."""
    model, shape = case.named_model
    return ["kit.workloads.synthetic", model, str(case.params.seed), shape.model_dump_json()]


def make_checkpoint(case: Case, run: Callable[[list[str]], tuple[int, str]], say) -> Path:
    """The case's checkpoint, made first by `run(python -m arguments) -> (exit code, output)`
    where the cache has none whole."""
    path = checkpoint_path(case)
    try:
        read_marker(path)
        return path
    except CacheEntryInvalid:
        pass
    say(f"making the synthetic checkpoint of {case.model} ({path.name})")
    code, output = run(maker_arguments(case))
    if code != 0:
        raise RuntimeError(f"making the checkpoint of {case.model} failed (exit code {code}): {output.strip()[-1500:]}")
    read_marker(path)  # whole, or CacheEntryInvalid says what is missing
    return path
