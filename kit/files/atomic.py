"""Files written whole or not at all, and never through a link someone planted.

Every file the kit writes is either a temporary file it has just created itself (O_EXCL, under a
name nobody can guess), written, synced and renamed over its name (a rename replaces a link
there, never the file it points to), or a log it appends to, opened without following a link
and only where it is a regular file with no other name. So a link planted where a report, a
result or a log goes (`report.pdf` -> ~/.bashrc) is replaced or refused, and the file it points
to is never written.

Kept apart from kit.rundir.schema, which imports pydantic and the fingerprint, so that what only
writes a file (kit.plan.plan_cache's entries) does not pay for them.
"""

from __future__ import annotations

import errno
import io
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

# Open for writing without following a link at the last component, nor waiting on a FIFO.
_NO_LINK = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class UnsafeWrite(OSError):
    """A path the kit would have written through: a link, a FIFO, a device, a folder, or a file
    with another name (a hard link); `strerror` says which."""


def atomic_write_text(path: Path, text: str, shared: bool = False) -> None:
    """Write via a temporary file in the same folder and rename: readers see all or nothing."""
    atomic_write_bytes(path, text.encode("utf-8"), shared)


def atomic_write_bytes(path: Path, data: bytes, shared: bool = False) -> None:
    """atomic_write_text's bytes. Readable by the owner alone, or `shared` as the umask lets any
    file its user writes be (a report)."""
    with replacing(path, shared) as handle:
        handle.write(data)


@contextmanager
def replacing(path: Path, shared: bool = False) -> Iterator[BinaryIO]:
    """A file to write `path`'s new content into: a temporary file of the kit's own, synced and
    renamed over `path` when the block ends, removed if it fails."""
    temporary = exclusive_temporary(path)
    try:
        with _opened(temporary, os.O_WRONLY) as handle:
            if shared:
                os.fchmod(handle.fileno(), _shared_mode())
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def exclusive_temporary(path: Path) -> Path:
    """An empty file beside `path` that this call created (O_EXCL, a random name matching
    kit.rundir.directory.ATOMIC_TEMP): what another process writes with write_into, to be
    renamed over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def write_into(path: Path, data: bytes, shared: bool = False) -> None:
    """`data` as the whole of `path`, a file of the kit's own (exclusive_temporary's; made where
    missing), synced; a link or anything else in its place is refused, not written through."""
    with _opened(path, os.O_WRONLY | os.O_CREAT) as handle:
        handle.truncate(0)  # after the checks: a file with another name is refused, not emptied
        if shared:
            os.fchmod(handle.fileno(), _shared_mode())
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def appending(path: Path) -> TextIO:
    """A log to append text to (made where missing): a regular file with no other name, opened
    without following a link; UnsafeWrite for anything else at `path`."""
    return io.TextIOWrapper(appending_bytes(path), encoding="utf-8")


def appending_bytes(path: Path) -> BinaryIO:
    """appending's binary file (a process's output goes to it as it is)."""
    return _opened(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)


def _shared_mode() -> int:
    """The mode a file written with open() gets (mkstemp's is the owner's alone)."""
    umask = os.umask(0o077)
    os.umask(umask)
    return 0o666 & ~umask


REFUSED = {
    errno.ELOOP: "a symbolic link; the kit writes no file through a link",
    errno.ENXIO: "a FIFO, not a regular file; the kit writes regular files",
    errno.EISDIR: "a folder, not a regular file; the kit writes regular files",
}


def _opened(path: Path, flags: int) -> BinaryIO:
    """`path` opened with `flags`, not following a link, and only where it is a regular file
    with no other name; UnsafeWrite otherwise."""
    try:
        fd = os.open(path, flags | _NO_LINK, 0o666)
    except OSError as exc:
        if exc.errno in REFUSED:
            raise UnsafeWrite(exc.errno, REFUSED[exc.errno], str(path)) from None
        raise
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise UnsafeWrite(errno.EINVAL, "not a regular file; the kit writes regular files", str(path))
        if found.st_nlink > 1:
            raise UnsafeWrite(
                errno.EMLINK, "a file with another name (a hard link); the kit writes its own files", str(path)
            )
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "ab" if flags & os.O_APPEND else "wb")
        handle.raw.name = str(path)  # type: ignore[attr-defined]  # as open() names it: a log's path is passed on by name
        return handle
    except BaseException:
        os.close(fd)
        raise
