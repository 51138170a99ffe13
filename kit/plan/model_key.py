"""The cache folder name of a model: read where a plan is listed from the plan cache, so it imports
no protocol model (a shape from the cache is a view with the same `model_dump`)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kit.plan.protocol import ModelSpec


def model_key(name: str, shape: ModelSpec, seed: int) -> str:
    """The cache folder name of a model of this name, shape and seed."""
    identity = json.dumps({"name": name, "shape": shape.model_dump(), "seed": seed}, sort_keys=True)
    return f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"
