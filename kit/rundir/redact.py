"""`kit run --redact`: a run directory that can leave the building. The host's name, the user's
name and the absolute paths that carry them (the run directory, the kit's cache and checkout, the
home folder) are replaced in every file the run writes, logs included, before each SHA256SUMS;
GPU serials and UUIDs are tokens in the fingerprints (kit.host.fingerprint.redact_identifiers). A Slurm
run's node names are tokens too, wherever they are written: in the files, in Slurm's compact node
lists (`n[1-2]`) and in the names of files (fingerprints/<node>.json).

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
import stat
from collections.abc import Iterable
from pathlib import Path

from kit.cache import cache_dir
from kit.files.atomic import atomic_write_bytes, atomic_write_text
from kit.files.regular import RUN_FILE_LIMIT, read_regular
from kit.files.tree import listing
from kit.host.hostlist import expand_hostlist
from kit.host.redaction_tokens import (
    REDACTION_SALT_ENV,
    redaction_salt,
    redaction_token,
)
from kit.rundir.directory import CHECK_MARKS
from kit.rundir.schema import Result, RunInfo

SALT_FILE = "redaction-salt"
# A Slurm compact node list with at least one bracket: `n[1-2]`, `gpu[01-03,07]`, `rack[1-2]-node[8-9]`.
_HOSTLIST = re.compile(r"(?<![\w.-])[\w.-]*(?:\[[\d,-]+\][\w-]*)+")


def use_machine_salt() -> None:
    """Make this process (and the fingerprints it collects) use the machine's redaction salt."""
    path = cache_dir() / SALT_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, secrets.token_hex(32))
    os.environ.setdefault(REDACTION_SALT_ENV, path.read_text(encoding="utf-8").strip())


def recorded_node_names(run_root: Path, info: RunInfo, results: Iterable[Result]) -> list[str]:
    """The Slurm nodes a run's own files name (those not redacted yet: a token names nothing): the
    nodes its jobs ran on, those fingerprinted, and the node and host names of the check's marks."""
    marks = Path(run_root) / CHECK_MARKS
    marked = (
        [(path.name, path.read_text(encoding="utf-8", errors="replace").strip()) for path in marks.iterdir()]
        if marks.is_dir()
        else []
    )
    jobs = {sample.slurm_job.nodes for result in results for sample in result.samples if sample.slurm_job}
    names = {
        *info.node_fingerprints,
        *(node for nodes in jobs for node in expand_hostlist(nodes)),
        *(n for pair in marked for n in pair),
    }
    return sorted(name for name in names if name and not name.startswith("redacted-"))


class Redactor:
    """What identifies this host, its user or the Slurm nodes the run used, and what each becomes."""

    def __init__(self, run_root: Path, nodes: Iterable[str] = ()):
        paths = {
            str(Path(run_root).resolve()): "<run>",
            str(cache_dir().resolve()): "<kit-cache>",
            str(Path(__file__).resolve().parents[2]): "<kit>",
        }
        home = str(Path.home())
        if home not in ("/", ""):
            paths[home] = "~"
        self.paths = sorted(paths.items(), key=lambda item: -len(item[0]))  # the longest first: a cache inside home
        salt = redaction_salt()  # the machine's (use_machine_salt): a node's token is that of its fingerprint
        self.nodes = {node: redaction_token(node, salt) for node in nodes if node}
        words = {platform.node(): redaction_token(platform.node(), salt)}
        user = getpass.getuser()
        if user != "root":  # "root" names no one, and is a word of many logs
            words[user] = "<user>"
        self.words = [
            (re.compile(rf"(?<![\w.-]){re.escape(word)}(?![\w-])"), token) for word, token in words.items() if word
        ]
        # Slurm's daemons sign their lines with the node's name (`slurmstepd-n1: error: ...`); the
        # longest names first, so that `rack1-n1` is not read as `rack1-` and `n1`
        self.words += [
            (re.compile(rf"(?<![\w.]){re.escape(node)}(?![\w-])"), token)
            for node, token in sorted(self.nodes.items(), key=lambda item: -len(item[0]))
        ]

    def text(self, text: str) -> str:
        for path, stand_in in self.paths:
            text = text.replace(path, stand_in)
        if self.nodes:
            text = _HOSTLIST.sub(self._hostlist, text)
        return self.name(text)

    def name(self, text: str) -> str:
        """The words that identify (host, user, node names) replaced: what a file's name becomes."""
        for pattern, token in self.words:
            text = pattern.sub(token, text)
        return text

    def _hostlist(self, match: re.Match) -> str:
        """A compact node list naming a node of the run, as its nodes' tokens; any other as it is."""
        names = expand_hostlist(match.group(0))
        if not any(name in self.nodes for name in names):
            return match.group(0)
        return ",".join(self.nodes.get(name) or self.name(name) for name in names)

    def tree(self, folder: Path) -> None:
        """Every text file under `folder`, gzipped ones too (the profiler's traces name the host),
        redacted in place (atomically); other binary files and links as they are. Then every file
        and folder whose name identifies (a node's fingerprint, a node's mark) is renamed."""
        entries = sorted(listing(Path(folder)).entries, key=lambda entry: entry.path)
        paths = [entry.path for entry in entries]
        for entry in entries:
            path = entry.path
            if not stat.S_ISREG(entry.mode):
                continue
            zipped = path.suffix == ".gz"
            try:
                raw = read_regular(path, RUN_FILE_LIMIT)
                original = (gzip.decompress(raw) if zipped else raw).decode("utf-8")
            except (UnicodeDecodeError, OSError, EOFError):
                continue
            redacted = self.text(original)
            if redacted != original:
                data = redacted.encode("utf-8")
                atomic_write_bytes(path, gzip.compress(data, mtime=0) if zipped else data)
        for path in reversed(paths):  # the deepest first: a folder's files before the folder
            redacted_name = self.name(path.name)
            if redacted_name != path.name:
                os.replace(path, path.with_name(redacted_name))
