"""What the tests that drive a real docker engine share: the engine, or a clear reason to skip.

Without an engine (a laptop without docker) those tests skip and say why; CI sets
KIT_REQUIRE_DOCKER=1, where a missing engine or image is a failure, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit import images
from support import TESTS

REQUIRE = os.environ.get("KIT_REQUIRE_DOCKER") == "1"
SMOKE_HINT = "build it with containers/smoke/ci-build.sh (or kit images build smoke)"


def unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"KIT_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


def engine_or_skip():
    try:
        return images.engine()
    except images.EngineUnavailable as exc:
        unavailable(str(exc))


def smoke_image_or_skip():
    """The engine and the local smoke image (the lock's reference)."""
    client = engine_or_skip()
    reference = images.load_lock().images["smoke"].reference
    image = images.local_image(reference)
    if image is None:
        unavailable(f"the smoke image {reference} is not built: {SMOKE_HINT}")
    return client, image


def containers_of_run(run_dir) -> list:
    """Every container, running or not, that the kit started for this run directory; one removed
    between the engine's listing and its inspection is gone, not an error."""
    client = images.engine()
    return client.containers.list(
        all=True, filters={"label": f"kit.run-dir={Path(run_dir).resolve()}"}, ignore_removed=True
    )


ENGINE_IMAGES = TESTS / "engine_images"
BASE_IMAGE = os.environ.get("KIT_SMOKE_BASE", "kit-base/bookworm-python3:local")
# The published image each stand-in behaves like -> the local reference the tests give it.
STAND_INS = {"serve-vllm": "vllm", "serve-tgi": "tgi", "serve-lightllm": "lightllm"}


def engine_stand_ins_or_skip(work: Path) -> dict[str, str]:
    """Build the engine-shaped images (tests/engine_images) on the local base; lock name ->
    local reference. Each build is cached by docker; the `tokenizers` wheel comes from pip."""
    import shutil
    import subprocess
    import sys

    client = engine_or_skip()
    if images.local_image(BASE_IMAGE) is None:
        unavailable(f"the base image {BASE_IMAGE} is not here: containers/smoke/ci-build.sh makes it")
    wheels = work / "wheels"
    if not list(wheels.glob("tokenizers-*.whl")):
        import importlib.metadata

        version = importlib.metadata.version("tokenizers")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.11",
                "-d",
                str(wheels),
                f"tokenizers=={version}",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            unavailable(f"no tokenizers wheel for the stand-in images: {done.stderr.strip()[-300:]}")
    built = {}
    for lock_name, folder in STAND_INS.items():
        context = work / f"context-{folder}"
        shutil.copytree(ENGINE_IMAGES / folder, context, dirs_exist_ok=True)
        shutil.copy2(ENGINE_IMAGES / "stub_engine.py", context / "stub_engine.py")
        shutil.copytree(wheels, context / "wheels", dirs_exist_ok=True)
        reference = f"kit-test/{folder}-stand-in:1"
        client.images.build(path=str(context), tag=reference, buildargs={"BASE": BASE_IMAGE}, rm=True)
        built[lock_name] = reference
    return built
