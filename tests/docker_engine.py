"""What the tests that drive a real docker engine share: the engine, or a clear reason to skip.

Without an engine (a laptop without docker) those tests skip and say why; CI sets
KIT_REQUIRE_DOCKER=1, where a missing engine or image is a failure, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit import images

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
    """Every container, running or not, that the kit started for this run directory."""
    client = images.engine()
    return client.containers.list(all=True, filters={"label": f"kit.run-dir={Path(run_dir).resolve()}"})
