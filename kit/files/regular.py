"""Reading a file that someone else may have put there: a regular file only, and only so much.

A FIFO where a manifest, a result or a cache entry is expected blocks a read for ever, and a link
to /dev/zero fills the memory; no file the kit reads is either, nor larger than its limit. The
file is opened without blocking and judged on the open descriptor, so what is read is what was
judged."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

MiB = 1 << 20
# The largest file of each kind the kit reads, far above any it writes: a manifest (the
# hardware table is 76 kB), a file of a run directory (a paper-size run's largest is a few MB).
MANIFEST_LIMIT = 16 * MiB
RUN_FILE_LIMIT = 512 * MiB

KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


class UnusableFile(OSError):
    """A path that is not a regular file, or is larger than the kit reads; `strerror` says which."""


def kind_of(mode: int) -> str:
    """A file's type in words, as a message names it."""
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def read_regular(path: Path | str, limit: int) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (after following links);
    UnusableFile otherwise, and OSError where it cannot be opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnusableFile(errno.EINVAL, f"{kind_of(mode)}, not a regular file", str(path))
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UnusableFile(errno.EFBIG, f"larger than {limit // MiB} MiB, which no such file of the kit is", str(path))
    return data


def read_regular_text(path: Path | str, limit: int) -> str:
    """read_regular, decoded as UTF-8 (UnicodeDecodeError where it is not)."""
    return read_regular(path, limit).decode("utf-8")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
