"""Where the kit keeps what is expensive to make and safe to reuse (built ops, checkpoints)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "KIT_CACHE"


def cache_dir() -> Path:
    """$KIT_CACHE, else ~/.cache/kit; shared by the host and the workload processes."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kit")


def torch_extensions_dir() -> Path:
    """DeepSpeed JIT-builds its ops on first use (about a minute each on CPU); keep them."""
    return cache_dir() / "torch_extensions"
