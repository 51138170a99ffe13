"""Text the kit writes for systems this machine cannot run (Slurm with pyxis, Kubernetes), held
to golden files under tests/golden/; KIT_UPDATE_GOLDEN=1 rewrites them after a deliberate change."""

from __future__ import annotations

import os

from support import TESTS

GOLDEN = TESTS / "golden"


def assert_golden(relative: str, text: str) -> None:
    path = GOLDEN / relative
    if os.environ.get("KIT_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{relative} differs (KIT_UPDATE_GOLDEN=1 rewrites it)"
