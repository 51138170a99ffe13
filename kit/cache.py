"""Where the kit keeps what is expensive to make and safe to reuse (built ops, checkpoints, wheels).

Every entry is made the same way, so that no process ever uses a half-made one: under an
exclusive lock (concurrent makers, two ranks or two runs, wait for the first), into a staging
folder beside its final place, checked, renamed into place, and only then given its marker
(the digest and size of every file). An entry is used only when its marker is there and every
file it lists is too, with its size; anything else is made again.

A small answer kept in one file (a plan, a probe, a chart: `keep`, `read_kept`) is sealed
instead: its first line is an HMAC of its name and content under a key only this user can read
(`seal.key` in the cache, mode 0600, owned by the user; one that is not is replaced). So an entry
someone edited, cut short, copied from another name or planted as a link is never read as the
kit's; it is made again. A cache folder shared with other users is safe from them; the user
whose key it is can forge an entry, as they can change the kit itself.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from kit.files.regular import MiB, read_json, read_regular

CACHE_ENV = "KIT_CACHE"
MARKER = "kit-cache-entry.json"
MARKER_LIMIT = 64 * MiB  # a marker lists each file of its entry (a virtual environment's tens of thousands)
SEAL_KEY = "seal.key"
SEAL_PREFIX = b"kit-sealed "
KEY_BYTES = 32


def cache_dir() -> Path:
    """$KIT_CACHE, else ~/.cache/kit; shared by the host and the workload processes."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kit")


def torch_extensions_dir() -> Path:
    """DeepSpeed JIT-builds its ops on first use (about a minute each on CPU); keep them."""
    return cache_dir() / "torch_extensions"


class CacheEntryInvalid(Exception):
    """A cache entry that is not whole (no marker, a missing or resized file, a failed check)."""


@contextmanager
def exclusive(lock_path: Path, what: str, say: Callable[[str], None] = print) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path`; say once who holds it if we have to wait.

    flock locks go with the process: a holder that dies (kill -9) releases it at once.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            say(f"waiting for {what}: {holder} is making it")
            started = time.monotonic()
            fcntl.flock(handle, fcntl.LOCK_EX)
            say(f"{what}: ready after {time.monotonic() - started:.0f} s of waiting")
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {os.uname().nodename}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()


def file_digests(folder: Path) -> dict[str, dict]:
    """Every file under `folder` (but the marker): its SHA-256 and size."""
    from kit.files.regular import sha256_file

    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel != MARKER:
            found[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    return found


def readable_by_all(folder: Path) -> None:
    """Every user may read an entry (a staging folder is made 0700): an engine's image may run
    as its own user and get the entry mounted read-only."""
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))


def read_marker(entry: Path) -> dict:
    """The marker of a whole entry; CacheEntryInvalid says what is wrong with any other."""
    try:
        marker = read_json(entry / MARKER, MARKER_LIMIT)
        files = marker["files"]
    except FileNotFoundError:
        raise CacheEntryInvalid(f"{entry} has no {MARKER}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheEntryInvalid(f"{entry / MARKER} is unreadable ({exc})") from None
    for rel, facts in files.items():
        path = entry / rel
        if not path.is_file():
            raise CacheEntryInvalid(f"{entry} lacks {rel}, which its marker lists")
        if path.stat().st_size != facts["bytes"]:
            raise CacheEntryInvalid(f"{path} has {path.stat().st_size} bytes, its marker says {facts['bytes']}")
    return marker


def entry_digest(marker: dict) -> str:
    """One digest for an entry: SHA-256 over its files' digests, in name order."""
    listing = {rel: facts["sha256"] for rel, facts in marker["files"].items()}
    return hashlib.sha256(json.dumps(listing, sort_keys=True).encode()).hexdigest()


def ensure_entry(
    target: Path, make: Callable[[Path], dict], what: str, say: Callable[[str], None] = print, in_place: bool = False
) -> dict:
    """The marker of the whole entry at `target`, made first if it is absent or broken.

    `make(folder)` writes the entry's files into an empty folder, checks that they are usable
    (it raises if not) and returns facts for the marker. An entry that cannot move once made (a
    virtual environment: its scripts name their own path) is made `in_place`, in its final
    folder, under the same lock and with the marker still written last.
    """
    try:  # whole already: nothing to write, not even the lock (a read-only mount of the cache holds it)
        return read_marker(target)
    except CacheEntryInvalid:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(target.with_name(target.name + ".lock"), what, say):
        try:
            return read_marker(target)
        except CacheEntryInvalid as exc:
            if target.exists():
                say(f"{what}: rebuilding a broken cache entry ({exc})")
        for stale in target.parent.glob(f".{target.name}.*"):  # a maker killed part-way
            shutil.rmtree(stale, ignore_errors=True)
        if target.exists():
            shutil.rmtree(target)
        if in_place:
            target.mkdir()
        staging = target if in_place else Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            started = time.monotonic()
            facts = make(staging)
            readable_by_all(staging)
            marker = {**facts, "files": file_digests(staging), "made_in_s": round(time.monotonic() - started, 1)}
            if not in_place:
                os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        from kit.files.atomic import atomic_write_text

        atomic_write_text(target / MARKER, json.dumps(marker, indent=2) + "\n")  # last: the entry is whole
        (target / MARKER).chmod(0o644)
        say(f"{what}: made in {marker['made_in_s']} s ({target})")
        return marker


def drop_oldest(folder: Path, kept: int) -> None:
    """Keep the `kept` newest JSON entries of a folder of small cached answers (plans, probes)."""
    entries = sorted(folder.glob("*.json"), key=lambda path: path.stat().st_mtime_ns, reverse=True)
    for stale in entries[kept:]:
        stale.unlink(missing_ok=True)


def keep(path: Path, payload: bytes) -> None:
    """Keep `payload` at `path`, sealed for read_kept; OSError where it cannot be (no key can be
    made, the cache is read-only): a caller that keeps an answer goes on without."""
    from kit.files.atomic import atomic_write_bytes

    key = _seal_key(make=True)
    if key is None:
        raise OSError(errno.EACCES, "no key of this user's to seal cache entries with", str(cache_dir() / SEAL_KEY))
    atomic_write_bytes(path, _seal(key, path.name, payload) + b"\n" + payload)


def read_kept(path: Path, limit: int) -> bytes | None:
    """The payload `keep` wrote at `path` (of at most `limit` bytes), None where there is none;
    CacheEntryInvalid, saying why in a few words, for anything else found there."""
    try:
        data = read_regular(path, limit, follow_links=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CacheEntryInvalid(
            "a symbolic link, which the kit does not follow" if exc.errno == errno.ELOOP else exc.strerror
        ) from None
    seal, _, payload = data.partition(b"\n")
    key = _seal_key(make=False)
    if key is None or not hmac.compare_digest(seal, _seal(key, path.name, payload)):
        raise CacheEntryInvalid("not as the kit kept it: its seal does not match its name and content")
    return payload


def _seal(key: bytes, name: str, payload: bytes) -> bytes:
    return SEAL_PREFIX + hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).hexdigest().encode()


def _seal_key(make: bool) -> bytes | None:
    """This user's key (made where `make` and there is none, or one that is not this user's
    alone); None where there is none."""
    path = cache_dir() / SEAL_KEY
    key = _own_key(path)
    if key is not None or not make:
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".seal.", suffix=".tmp", dir=path.parent)  # mode 0600
    made = os.urandom(KEY_BYTES)
    try:
        try:
            os.write(fd, made)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(name, path)  # another kit's key, made meanwhile, is kept: its entries stay good
        except FileExistsError:
            key = _own_key(path)
            if key is not None:
                return key
            os.replace(name, path)
    except OSError:
        return None
    finally:
        Path(name).unlink(missing_ok=True)
    return made


def _own_key(path: Path) -> bytes | None:
    """The key at `path` where it is a regular file of this user's that no one else may read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o077:
            return None
        key = os.read(fd, KEY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return key if len(key) == KEY_BYTES else None
