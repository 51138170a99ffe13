"""A folder the kit is told to write in, checked before anything slow starts."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path


def writable_folder_problem(path: Path) -> str | None:
    """Why `path` cannot be a folder the kit writes in (None where it can): it is there and is not
    a folder, or it cannot be made or written in. What the check made is removed again; the
    command makes it when it writes."""
    if path.exists() and not path.is_dir():
        return f"{path} is there and is not a folder; give a folder (it is made where missing)"
    made = [folder for folder in [path, *path.parents] if not folder.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"cannot make or write the folder {path} ({exc.strerror or exc}); give one you can write in"
    finally:
        for folder in made:  # the deepest first
            with contextlib.suppress(OSError):
                folder.rmdir()
    return None
