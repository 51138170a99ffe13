"""Where a run directory or a report still names what redaction replaces (a host's or a node's
name): each file whose text (gzipped or not) or whose own name holds one of the words."""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from pathlib import Path


def word(name: str) -> re.Pattern:
    """`name` standing alone: not inside a longer name or token (`n1`, not `n10` or `gpu-n1x`),
    but `slurmstepd-n1` and `n1.json` name n1."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(name)}(?![A-Za-z0-9])")


def places_naming(root: Path, names: Iterable[str]) -> list[tuple[str, str]]:
    """(file relative to `root`, the name it holds) for every file under `root` naming one of `names`."""
    patterns = {name: word(name) for name in names}
    found = []
    for path in sorted(Path(root).rglob("*")):
        relative = str(path.relative_to(root))
        found += [(relative, name) for name, pattern in patterns.items() if pattern.search(path.name)]
        if path.is_file() and not path.is_symlink():
            raw = path.read_bytes()
            text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8", errors="replace")
            found += [(relative, name) for name, pattern in patterns.items() if pattern.search(text)]
    return found
