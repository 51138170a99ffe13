"""Every entry under a folder someone else may have filled, listed with bounded effort.

os.walk and Path.rglob recurse once per level, and a tree 1,100 folders deep (a legal tree: each
name short) ends them in a RecursionError; past 4,096 bytes of path they skip what they cannot
open, silently, so a file hidden that deep would be neither hashed nor named. This walk keeps
its own stack, says where it could not look, and goes no deeper than a run directory's few levels.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

# A run directory's deepest file is six levels down (cases/<id>/runs/<k>/sweep/c<N>/requests.jsonl).
FOLDER_DEPTH_LIMIT = 32


@dataclass(frozen=True)
class Entry:
    """One entry, as lstat saw it (a link is a link, never what it points to)."""

    path: Path
    relative: str  # from the root, with '/'
    mode: int
    size: int

    @property
    def is_folder(self) -> bool:
        return stat.S_ISDIR(self.mode)


@dataclass(frozen=True)
class Listing:
    entries: list[Entry]
    too_deep: list[str]  # folders not entered: FOLDER_DEPTH_LIMIT levels down already
    unreadable: list[str]  # folders that could not be listed, with why


def listing(root: Path, depth_limit: int = FOLDER_DEPTH_LIMIT) -> Listing:
    """Every entry under `root` (not following links), in no particular order; the folders not
    entered (too deep, or unreadable) named apart."""
    entries: list[Entry] = []
    too_deep: list[str] = []
    unreadable: list[str] = []
    stack: list[tuple[Path, str, int]] = [(Path(root), "", 0)]
    while stack:
        folder, relative, depth = stack.pop()
        if depth >= depth_limit:
            too_deep.append(relative)
            continue
        try:
            with os.scandir(folder) as found:
                for item in found:
                    stat_result = item.stat(follow_symlinks=False)
                    name = f"{relative}/{item.name}" if relative else item.name
                    entry = Entry(Path(item.path), name, stat_result.st_mode, stat_result.st_size)
                    entries.append(entry)
                    if entry.is_folder:
                        stack.append((entry.path, name, depth + 1))
        except OSError as exc:
            unreadable.append(f"{relative or '.'} ({exc.strerror or exc})")
    return Listing(entries, too_deep, unreadable)
