"""Reading a file that someone else may have put there: a regular file only, and only so much.

A FIFO where a manifest, a result or a cache entry is expected blocks a read for ever, and a link
to /dev/zero fills the memory; no file the kit reads is either, nor larger than its limit. The
file is opened without blocking and judged on the open descriptor, so what is read is what was
judged."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

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


def read_regular(path: Path | str, limit: int, follow_links: bool = True) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes (after following links, unless
    not `follow_links`: a link is then refused, OSError ELOOP); UnusableFile otherwise, and OSError
    where it cannot be opened."""
    with _regular(path, limit, follow_links) as handle:
        data = handle.read(limit + 1)  # a file that grew since, or whose size the kernel does not know (/proc)
    if len(data) > limit:
        raise UnusableFile(errno.EFBIG, too_large(len(data), limit), str(path))
    return data


def read_regular_text(path: Path | str, limit: int) -> str:
    """read_regular, decoded as UTF-8 (UnicodeDecodeError where it is not)."""
    return read_regular(path, limit).decode("utf-8")


def sha256_file(path: Path, limit: int | None = None) -> str:
    """The SHA-256 of a regular file; one larger than `limit` is refused (UnusableFile) before a
    byte of it is read: a sparse file of 256 GiB in a run would otherwise be hashed for minutes."""
    digest = hashlib.sha256()
    with _regular(path, limit) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def too_large(size: int, limit: int) -> str:
    """Why a file of `size` bytes is not read, in words."""
    return f"{size:,} bytes: larger than {limit:,} bytes, which no such file of the kit is"


@contextmanager
def _regular(path: Path | str, limit: int | None, follow_links: bool = True) -> Iterator[BinaryIO]:
    """`path` open for reading, judged on the open descriptor (no FIFO waited on, no device read)
    and its size held to `limit` before anything is read."""
    no_link = 0 if follow_links else os.O_NOFOLLOW
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | no_link)
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise UnusableFile(errno.EINVAL, f"{kind_of(found.st_mode)}, not a regular file", str(path))
        if limit is not None and found.st_size > limit:
            raise UnusableFile(errno.EFBIG, too_large(found.st_size, limit), str(path))
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


# A record of the kit (run.json, a result, a rank's samples, a fingerprint, a cache entry) is
# nested a dozen levels at most, and its longest text is a reason or a log's tail of a few kB: a
# file nested deeper or holding a longer text was not written by the kit, and is refused where it
# is read, before a parser recurses into it or a report lays it out (a reason of 8 MB took the
# PDF's layout minutes).
JSON_DEPTH_LIMIT = 64
TEXT_LIMIT = 64 * 1024


class UnusableJson(ValueError):
    """JSON nested deeper, or holding a longer text, than any record of the kit."""


def parsed_json(data: bytes | str) -> Any:
    """The JSON document `data`, checked with bounded_json; ValueError (UnusableJson for a
    document out of bounds) where it is not one."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise UnusableJson(f"nested more than {JSON_DEPTH_LIMIT} levels deep") from None
    bounded_json(document)
    return document


def within_bounds(data: bytes | str) -> bytes | str:
    """`data` as it is, where it is no JSON nested or long beyond bounds (UnusableJson); what is
    wrong with it otherwise (not JSON, not UTF-8) is for the reader to say, as it says it."""
    try:
        document = json.loads(data)
    except RecursionError:
        raise UnusableJson(f"nested more than {JSON_DEPTH_LIMIT} levels deep") from None
    except ValueError:
        return data
    bounded_json(document)
    return data


def bounded_json(document: object) -> None:
    """UnusableJson, naming where, for a document nested more than JSON_DEPTH_LIMIT levels or
    holding a text (a key too) longer than TEXT_LIMIT characters. Walked with a stack: a deep
    document costs no recursion."""
    stack: list[tuple[object, str, int]] = [(document, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > JSON_DEPTH_LIMIT:
            raise UnusableJson(f"{where[:120] or '(top level)'}: nested more than {JSON_DEPTH_LIMIT} levels deep")
        if isinstance(value, str) and len(value) > TEXT_LIMIT:
            raise UnusableJson(
                f"{where[:120] or '(top level)'}: a text of {len(value):,} characters, longer than the "
                f"{TEXT_LIMIT:,} of any the kit writes"
            )
        if isinstance(value, dict):
            for key, item in value.items():
                stack.append((key, where, depth + 1))
                stack.append((item, f"{where}.{key[:40]}" if where else key[:40], depth + 1))
        elif isinstance(value, list):
            stack += [(item, f"{where}[{index}]", depth + 1) for index, item in enumerate(value)]


def read_json(path: Path | str, limit: int) -> Any:
    """read_regular, parsed with parsed_json."""
    return parsed_json(read_regular(path, limit))
