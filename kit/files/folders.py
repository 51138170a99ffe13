"""A folder the kit is told to write in, checked before anything slow starts."""

from __future__ import annotations

import contextlib
import stat
import tempfile
from pathlib import Path

CHECKS = 5  # attempts at a folder that vanishes while it is checked


def writable_folder_problem(path: Path) -> str | None:
    """Why `path` cannot be a folder the kit writes in (None where it can): it is there and is not
    a folder, or it cannot be made or written in. What the check made is removed again; the
    command makes it when it writes. Two kits checking one new folder at once can each remove
    what the other is writing in, so a folder that vanishes during the check is checked again."""
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # one look: a folder removed is not a file
        if not stat.S_ISDIR(path.stat().st_mode):
            return f"{path} is there and is not a folder; give a folder (it is made where missing)"
    error: OSError | None = None
    for _ in range(CHECKS):
        made = [folder for folder in [path, *path.parents] if not folder.exists()]
        try:
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path):
                return None
        except (FileNotFoundError, FileExistsError) as exc:  # made or removed under it by another check: again
            error = exc
        except OSError as exc:
            error = exc
            break
        finally:
            for folder in made:  # the deepest first
                with contextlib.suppress(OSError):
                    folder.rmdir()
    assert error is not None, "every attempt that did not return failed"
    return f"cannot make or write the folder {path} ({error.strerror or error}); give one you can write in"
