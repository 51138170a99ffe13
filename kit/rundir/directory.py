"""The run directory: the one place results live, written so that nothing is ever half-written.

Layout:
    RUN_DIR/run.json                      what was asked, by which kit, on which host, when
    RUN_DIR/fingerprint.json              the environment before the run (after: fingerprint-after.json)
    RUN_DIR/cases/<case-id>/case.json     the fully resolved case the workload ran
    RUN_DIR/cases/<case-id>/result.json   status, metrics and every sample (written last)
    RUN_DIR/cases/<case-id>/log.txt       everything the workload printed
    RUN_DIR/cases/<case-id>/runs/<k>/rank-<r>.json   raw samples of each process of run k
    RUN_DIR/SHA256SUMS                    evidence: the digest of every other file
    RUN_DIR/SHA256SUMS.sig, provenance.intoto.json(.sig)   who vouches for SHA256SUMS (`kit sign`)
    RUN_DIR/report.html, report.pdf       rendered from the above by `kit report` (not evidence);
    RUN_DIR/report.json, report-*.csv     its export for spreadsheets (`kit report --format json,csv`)
A case is finished exactly when its result.json exists, which is what `--resume` relies on.
"""

from __future__ import annotations

import fcntl
import os
import platform
import re
import shutil
import stat
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kit.files.atomic import atomic_write_text
from kit.files.names import NAME_PATTERN, checked_name
from kit.files.regular import (
    RUN_FILE_LIMIT,
    UnusableJson,
    kind_of,
    read_regular,
    sha256_file,
    too_large,
    within_bounds,
)
from kit.files.tree import FOLDER_DEPTH_LIMIT, listing
from kit.manifest import first_problem
from kit.plan.protocol import Case
from kit.rundir.schema import (
    Result,
    RunInfo,
    utc_now,
)

SUMS_FILE = "SHA256SUMS"
# Rendered from the run, never measured: they may be (re)written beside it without changing
# the evidence, which covers everything else.
REPORT_FILES = ("report.html", "report.pdf", "report.json", "report-claims.csv", "report-metrics.csv")
# A signer's seal (kit.rundir.signing): a signature of SHA256SUMS, and a provenance statement naming it with
# a signature of its own. They sign SHA256SUMS, so it cannot cover them; a resume removes them.
SIGNATURE_FILES = (f"{SUMS_FILE}.sig", "provenance.intoto.json", "provenance.intoto.json.sig")
# atomic_write_text's temporary file: a write cut short by a crash, never evidence.
ATOMIC_TEMP = re.compile(r"\..+\.[A-Za-z0-9_]+\.tmp")
# Who holds the run directory (RunDir.lock): a note for the next kit, not evidence either.
LOCK_NOTE = "kit.lock"
LOCK_NOTE_LIMIT = 4096
# Slurm: each node a job ran on, fingerprinted on it (kit.execute.node_fingerprint), a file each.
NODE_FINGERPRINTS = "fingerprints"
# Slurm: the nodes of the check that the run directory is shared, a file each (kit.execute.slurm_script.check_script).
CHECK_MARKS = "slurm/shared-run-dir-check/nodes"


def atomic_write_model(path: Path, model: BaseModel) -> None:
    atomic_write_text(path, model.model_dump_json(indent=2) + "\n")


M = TypeVar("M", bound=BaseModel)


class UnreadableRun(ValueError):
    """A file of a run directory this kit cannot read (cut short, not JSON, written by another
    kit version, naming a path outside the run), said in one line: the file, the key, the reason."""


def read_model(path: Path, model: type[M]) -> M:
    """A record of the run, bounded in size, depth and the length of its texts
    (kit.files.regular); UnreadableRun, in one line, for anything the kit did not write."""
    try:
        return model.model_validate_json(within_bounds(read_regular(path, RUN_FILE_LIMIT)))
    except ValidationError as exc:
        raise UnreadableRun(f"{path}: {first_problem(exc)}") from None
    except UnusableJson as exc:
        raise UnreadableRun(f"{path}: {exc}") from None
    except OSError as exc:
        raise UnreadableRun(f"{path}: {exc.strerror or exc}") from None


def not_a_file(path: Path) -> bool:
    """Whether something other than a regular file is where the kit keeps one: a link (written
    through, it would reach outside the run), a folder, a FIFO."""
    return path.is_symlink() or (path.exists() and not path.is_file())


def printable(name: str) -> str:
    """A file name as it can be shown: each character a terminal would act on or hide (a line
    break, an escape sequence, a right-to-left override) and each byte that was not UTF-8 written
    as its escape, `\\n`, `\\x1b`, `\\u202e`, `\\udcff`."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)


def unusable_out(out: Path, locked: bool = False) -> str | None:
    """Why `out` cannot take a new run, in one line; None for a folder that is missing or empty.
    A folder holding anything else is refused, never adopted: its files would be sealed into the
    run's SHA256SUMS as evidence, and an earlier run's cases (its run.json lost) taken for this
    run's. Until this kit holds the folder (`locked`), one where a kit left its lock's note is
    for the lock to judge: another kit starting there now is refused by it, naming the holder."""
    if printable(str(out)) != str(out):  # run.json holds the folder's name as the run id: text
        return f"--out {printable(str(out))}: a name that is not printable UTF-8 text, which a run id cannot be"
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        return f"--out {out}: not a folder; give a new or empty folder"
    try:
        held = sorted(os.listdir(out)) if out.exists() else []
    except OSError as exc:
        return f"--out {out}: cannot be listed ({exc.strerror or exc})"
    if "run.json" in held:
        return f"{out} already holds a run; use --resume {out} or another --out"
    notes = [
        name for name in held if name == LOCK_NOTE or (ATOMIC_TEMP.fullmatch(name) and name.startswith(".kit.lock."))
    ]
    if notes and not locked:
        return None
    others = [name for name in held if name not in notes]
    if not others:
        return None
    shown = ", ".join(printable(name)[:60] for name in others[:3]) + (
        f" and {len(others) - 3} more" if len(others) > 3 else ""
    )
    kind = (
        "an earlier run's cases without its run.json"
        if "cases" in others
        else "the files of an earlier start without its run.json"
        if notes
        else "files that are not a kit run"
    )
    return f"--out {out} holds {kind} ({shown}); give a new or empty folder"


class RunInUse(RuntimeError):
    """Another process holds the run directory."""


class RunDir:
    """Typed access to one run directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Hold the run directory for this process's life: a second kit on it (two `--resume`,
        say) is refused, naming the holder, instead of running the same cases twice. The kernel
        lock (flock on the folder itself) goes with the process, however it ends."""
        self.root.mkdir(parents=True, exist_ok=True)
        note = self.root / LOCK_NOTE
        if not_a_file(note):
            raise UnreadableRun(f"{note}: not a file, where the kit writes who holds the run")
        fd = os.open(self.root, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = read_regular(note, LOCK_NOTE_LIMIT).decode("utf-8", "replace").strip()
            except OSError:  # not there yet, or not a note the kit wrote
                holder = "unknown"
            raise RunInUse(f"{self.root} is in use by another kit ({holder}); wait for it, or stop it first") from None
        self._lock_fd = fd
        atomic_write_text(self.root / LOCK_NOTE, f"pid {os.getpid()} on {platform.node()}, since {utc_now()}\n")

    @property
    def info_path(self) -> Path:
        return self.root / "run.json"

    @property
    def fingerprint_path(self) -> Path:
        return self.root / "fingerprint.json"

    @property
    def fingerprint_after_path(self) -> Path:
        return self.root / "fingerprint-after.json"

    def case_dir(self, case_id: str) -> Path:
        """The case's folder, never a path out of the run directory: its name is one segment,
        and neither it nor `cases` may be a link (written or removed through, it would reach
        outside the run) or a file."""
        folder = self.root / "cases" / checked_name(case_id)
        for path in (folder.parent, folder):
            if path.is_symlink() or (path.exists() and not path.is_dir()):
                kind = "a symbolic link" if path.is_symlink() else "not a folder"
                raise UnreadableRun(
                    f"{path}: {kind}; the kit writes and removes a run's cases only in folders of the run itself"
                )
        return folder

    def result_path(self, case_id: str) -> Path:
        return self.case_dir(case_id) / "result.json"

    def read_info(self) -> RunInfo:
        return read_model(self.info_path, RunInfo)

    def write_info(self, info: RunInfo) -> None:
        atomic_write_model(self.info_path, info)

    def is_finished(self, case_id: str) -> bool:
        return self.result_path(case_id).is_file()

    def read_result(self, case_id: str) -> Result:
        """The case's result; one that is another case's (moved into this folder) is refused."""
        path = self.result_path(case_id)
        result = read_model(path, Result)
        if result.case_id != case_id:
            raise UnreadableRun(f"{path}: the result of case {printable(result.case_id)!r}, not of {case_id!r}")
        return result

    def write_result(self, result: Result) -> None:
        atomic_write_model(self.result_path(result.case_id), result)

    def prepare_case(self, case: Case) -> Path:
        """A clean case folder: leftovers of an interrupted attempt are discarded, never mixed in."""
        folder = self.case_dir(case.id)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        atomic_write_model(folder / "case.json", case)
        return folder

    def results(self) -> list[Result]:
        return [self.read_result(cid) for cid in self.read_info().selected if self.is_finished(cid)]

    def write_sums(self) -> Path:
        """SHA256SUMS over every file of the run (sha256sum format, paths relative to the run)."""
        lines = [f"{digest}  {rel}" for rel, digest in sorted(self.digests().items())]
        path = self.root / SUMS_FILE
        atomic_write_text(path, "\n".join(lines) + "\n")
        return path

    def digests(self) -> dict[str, str]:
        """Every file of the run directory, dot-files included. What the kit never writes there,
        and could neither hold in SHA256SUMS nor read safely, is refused (UnreadableRun naming
        each): a symbolic link (a report would read through it, out of the run), a FIFO, a
        device or a socket (a read would wait for ever), a name that is not printable UTF-8
        text (a line break would split its line of SHA256SUMS; an escape sequence acts on the
        terminal that shows it), a case folder whose name no case id can have (a twin of one, the same
        id in another Unicode form), a file larger than any a run writes (a sparse file of 256 GiB
        would be hashed for minutes: its size is judged before a byte is read), and folders
        nested deeper than a run's (kit.files.tree). The temporary files of writes cut short
        (kit.files.atomic) are left out: stray_temporaries names them."""
        found, foreign = {}, []
        tree = listing(self.root)
        foreign += [f"{printable(rel)}/ (folders nested more than {FOLDER_DEPTH_LIMIT} deep)" for rel in tree.too_deep]
        foreign += [f"{printable(rel)} (a folder that cannot be listed)" for rel in tree.unreadable]
        for entry in tree.entries:
            rel, name, mode = entry.relative, entry.path.name, entry.mode
            if printable(rel) != rel:
                foreign.append(f"{printable(rel)} (a name SHA256SUMS cannot hold: not printable UTF-8 text)")
            elif stat.S_ISLNK(mode):
                foreign.append(f"{rel} (a symbolic link)")
            elif rel.startswith("cases/") and rel.count("/") == 1 and not NAME_PATTERN.fullmatch(name):
                # a case id is ASCII: a folder that looks like one in another Unicode form is a twin
                foreign.append(f"{printable(rel)} (a case folder whose name no case id can have)")
            elif not stat.S_ISDIR(mode) and not stat.S_ISREG(mode):
                foreign.append(f"{rel} ({kind_of(mode)})")
            elif stat.S_ISREG(mode) and entry.size > RUN_FILE_LIMIT:
                foreign.append(f"{rel} ({too_large(entry.size, RUN_FILE_LIMIT)})")
            elif stat.S_ISREG(mode) and not _left_out_of_evidence(rel, name):
                found[rel] = sha256_file(entry.path, RUN_FILE_LIMIT)
        if foreign:
            raise UnreadableRun(
                f"{self.root}: not what a run writes, so neither listed in SHA256SUMS nor read: "
                + "; ".join(sorted(foreign)[:20])
                + (f" and {len(foreign) - 20} more" if len(foreign) > 20 else "")
                + ". Remove it, then resume or verify again"
            )
        return dict(sorted(found.items()))

    def stray_temporaries(self) -> list[str]:
        """The temporary files of writes cut short (kit.files.atomic) anywhere in the run: never
        evidence, and in a finished run only where someone put them."""
        return sorted(
            entry.relative
            for entry in listing(self.root).entries
            if stat.S_ISREG(entry.mode) and ATOMIC_TEMP.fullmatch(entry.path.name)
        )


def _left_out_of_evidence(rel: str, name: str) -> bool:
    """The files SHA256SUMS does not cover: itself, the lock's note, the report, the signatures
    of SHA256SUMS, and a write's temporary file."""
    return rel in (SUMS_FILE, LOCK_NOTE, *REPORT_FILES, *SIGNATURE_FILES) or bool(ATOMIC_TEMP.fullmatch(name))
