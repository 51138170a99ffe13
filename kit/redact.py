"""`kit run --redact`: a run directory that can leave the building. The host's name, the user's
name and the absolute paths that carry them (the run directory, the kit's cache and checkout, the
home folder) are replaced in every file the run writes, logs included, before each SHA256SUMS;
GPU serials and UUIDs are tokens in the fingerprints (kit.fingerprint.redact_identifiers).

Tokens are salted per machine (a salt kept in the kit's cache, never in a run directory), so a
resumed run keeps its tokens and two runs of one machine can still be told apart from others.
"""

from __future__ import annotations

import getpass
import gzip
import os
import platform
import re
import secrets
from pathlib import Path

from kit.atomic_write import atomic_write_bytes, atomic_write_text
from kit.cache import cache_dir
from kit.fingerprint import REDACTION_SALT_ENV, redaction_token

SALT_FILE = "redaction-salt"


def use_machine_salt() -> None:
    """Make this process (and the fingerprints it collects) use the machine's redaction salt."""
    path = cache_dir() / SALT_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, secrets.token_hex(32))
    os.environ.setdefault(REDACTION_SALT_ENV, path.read_text(encoding="utf-8").strip())


class Redactor:
    """What identifies this host or its user, and what each becomes."""

    def __init__(self, run_root: Path):
        paths = {
            str(Path(run_root).resolve()): "<run>",
            str(cache_dir().resolve()): "<kit-cache>",
            str(Path(__file__).resolve().parent.parent): "<kit>",
        }
        home = str(Path.home())
        if home not in ("/", ""):
            paths[home] = "~"
        self.paths = sorted(paths.items(), key=lambda item: -len(item[0]))  # the longest first: a cache inside home
        salt = os.environ.get(REDACTION_SALT_ENV, "").encode() or secrets.token_bytes(32)
        words = {platform.node(): redaction_token(platform.node(), salt)}
        user = getpass.getuser()
        if user != "root":  # "root" names no one, and is a word of many logs
            words[user] = "<user>"
        self.words = [(re.compile(rf"(?<![\w.-]){re.escape(word)}(?![\w-])"), token) for word, token in words.items() if word]

    def text(self, text: str) -> str:
        for path, stand_in in self.paths:
            text = text.replace(path, stand_in)
        for pattern, token in self.words:
            text = pattern.sub(token, text)
        return text

    def tree(self, folder: Path) -> None:
        """Every text file under `folder`, gzipped ones too (the profiler's traces name the host),
        redacted in place (atomically); other binary files and links as they are."""
        for path in sorted(Path(folder).rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            zipped = path.suffix == ".gz"
            try:
                raw = path.read_bytes()
                original = (gzip.decompress(raw) if zipped else raw).decode("utf-8")
            except (UnicodeDecodeError, OSError, EOFError):
                continue
            redacted = self.text(original)
            if redacted != original:
                data = redacted.encode("utf-8")
                atomic_write_bytes(path, gzip.compress(data, mtime=0) if zipped else data)
