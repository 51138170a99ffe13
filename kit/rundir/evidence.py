"""The evidence behind a report: SHA256SUMS re-checked, so that no report is rendered from a run
directory that changed after the run wrote it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from pydantic import BaseModel

from kit.files.regular import (
    RUN_FILE_LIMIT,
    read_json,
    read_regular_text,
    sha256_file,
)
from kit.rundir.directory import (
    SUMS_FILE,
    RunDir,
    not_a_file,
    printable,
)
from kit.rundir.schema import (
    RunInfo,
)

SUMS_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")


class EvidenceError(Exception):
    """A run directory that does not match its SHA256SUMS; names every file concerned."""

    def __init__(self, run_dir: Path, problems: list[str], refused: str = "no report is rendered from it"):
        self.run_dir, self.problems, self.refused = run_dir, problems, refused
        super().__init__(f"{run_dir} does not match its evidence, so {refused}: " + "; ".join(problems))

    def __reduce__(self):
        """Rebuilt from what it was given, so that it pickles (kit.report.forked hands it over)."""
        return type(self), (self.run_dir, self.problems, self.refused), self.__dict__


class EvidenceFile(BaseModel):
    """One line of SHA256SUMS."""

    path: str
    sha256: str
    line: str  # as written, so that digests over lines can be reproduced with grep and sha256sum
    size: int | None = None  # bytes, as the report found the file (kit.report.load)


class EvidenceGroup(BaseModel):
    """A case folder (or a file at the top of the run) and the SHA-256 of its SHA256SUMS lines.

    `grep -F '  cases/<case-id>/' SHA256SUMS | sha256sum` reproduces a folder's digest, so a
    printed report can pin every file with one line per case instead of one per file."""

    name: str
    paths: list[str]
    sha256: str


def evidence_groups(files: list[EvidenceFile]) -> list[EvidenceGroup]:
    """SHA256SUMS grouped by case folder (cases/<case-id>/), other files one by one, in its order."""
    groups: dict[str, list[EvidenceFile]] = {}
    for entry in files:
        parts = entry.path.split("/")
        key = "/".join(parts[:2]) + "/" if parts[0] == "cases" and len(parts) > 2 else entry.path
        groups.setdefault(key, []).append(entry)
    return [
        EvidenceGroup(
            name=name,
            paths=[m.path for m in members],
            sha256=members[0].sha256
            if len(members) == 1 and not name.endswith("/")
            else hashlib.sha256("".join(f"{m.line}\n" for m in members).encode("utf-8")).hexdigest(),
        )
        for name, members in groups.items()
    ]


def read_sums(run_dir: Path) -> list[EvidenceFile]:
    """SHA256SUMS as listed; raises ValueError naming the first malformed line."""
    lines = read_regular_text(Path(run_dir) / SUMS_FILE, RUN_FILE_LIMIT).splitlines()
    files = []
    for number, line in enumerate(lines, start=1):
        match = SUMS_LINE.match(line)
        if not match:
            raise ValueError(f"{SUMS_FILE} line {number} is not '<sha256>  <path>': {line[:80]!r}")
        files.append(EvidenceFile(sha256=match.group(1), path=match.group(2), line=line))
    return files


def expected_digest(given: str) -> str:
    """An evidence digest as a report printed it (the whole SHA-256, or at least its first 16
    characters as the page footer shows them), lower case; ValueError for anything else."""
    wanted = given.strip().lower().rstrip("….")
    if not re.fullmatch(r"[0-9a-f]{16,64}", wanted):
        raise ValueError(f"--expect-digest takes 16 to 64 hexadecimal characters, not {given[:80]!r}")
    return wanted


def digest_mismatch(run_dir: Path, wanted: str) -> list[str]:
    """Why the run's evidence digest does not begin with `wanted` (from expected_digest), or []."""
    actual = evidence_digest(run_dir)
    return [] if actual.startswith(wanted) else [f"evidence digest {actual}, not the expected {wanted}…"]


def evidence_digest(run_dir: Path) -> str:
    """SHA-256 of SHA256SUMS itself: one digest that pins every file of the run."""
    return sha256_file(Path(run_dir) / SUMS_FILE)


def verify(run_dir: Path) -> list[str]:
    """Every way the run directory differs from its SHA256SUMS: files changed, missing or added.
    An empty list means the directory is exactly what the run wrote."""
    run = RunDir(Path(run_dir))
    if not run.info_path.is_file():
        return [f"{run_dir} is not a run directory (no run.json)"]
    sums = run.root / SUMS_FILE
    if not_a_file(sums):
        return [f"{SUMS_FILE}: not a file; a run's evidence is the file the kit writes"]
    if not sums.is_file():
        status: str
        try:
            status = run.read_info().status
        except ValueError as exc:
            status = f"unreadable ({exc.__class__.__name__})"
        return [
            f"{SUMS_FILE} missing: the run wrote no evidence yet (run.json status: {status}); "
            f"finish it with `kit run --resume {run_dir}`"
        ]
    try:
        changed = [
            f"{kind}: {path}" + (f" (not in {SUMS_FILE})" if kind == "added" else "") for kind, path in differences(run)
        ]
    except (ValueError, OSError) as exc:
        return [str(exc)]
    stray = [
        f"added: {printable(path)} (named as the temporary file of a write cut short, which no finished run holds; "
        f"`kit run --resume {run_dir}` removes such files)"
        for path in run.stray_temporaries()
    ]
    return changed + stray + misplaced_results(run)


def differences(run: RunDir) -> list[tuple[str, str]]:
    """(changed | missing | added, path) for each file that differs from SHA256SUMS, the path
    as it can be shown (kit.rundir.schema.printable: SHA256SUMS may have been written by hand)."""
    listed = {entry.path: entry.sha256 for entry in read_sums(run.root)}
    found = run.digests()
    problems = [("changed", path) for path, digest in listed.items() if path in found and found[path] != digest]
    problems += [("missing", path) for path in listed if path not in found]
    problems += [("added", path) for path in found if path not in listed]
    return [(kind, printable(path)) for kind, path in problems]


def misplaced_results(run: RunDir) -> list[str]:
    """Each case folder whose result.json is not its case's: another case's result moved there,
    with SHA256SUMS written again, would show under the wrong case and leave its own case
    without a result that a resume would run again."""
    problems = []
    for path in sorted((run.root / "cases").glob("*/result.json")):
        where = path.relative_to(run.root).as_posix()
        try:
            recorded = read_json(path, RUN_FILE_LIMIT)
        except (OSError, ValueError) as exc:
            problems.append(f"unreadable: {where} ({str(exc)[:200]})")
            continue
        if not isinstance(recorded, dict):
            problems.append(f"unreadable: {where} (a JSON {type(recorded).__name__}, not a result's object)")
            continue
        case_id = recorded.get("case_id")
        if case_id != path.parent.name:
            problems.append(
                f"misplaced: {where} is the result of case {printable(str(case_id))!r}, not of {path.parent.name}"
            )
    return problems


def newest_run(root: Path = Path("runs")) -> Path:
    """The run directory under `root` that started last (run.json `started_at`)."""
    candidates = []
    for info_path in Path(root).glob("*/run.json"):
        try:
            started = RunDir(info_path.parent).read_info().started_at
        except ValueError:
            continue
        candidates.append((started, info_path.parent.name, info_path.parent))
    if not candidates:
        raise FileNotFoundError(f"no run directory (with a readable run.json) under {root}")
    return max(candidates)[2]


class EvidenceChanged(ValueError):
    """Files of a run directory that differ from the evidence the run wrote (SHA256SUMS)."""


def listed_in_evidence(run: RunDir) -> set[str] | None:
    """The paths SHA256SUMS lists; None where the run wrote none; ValueError where it is not a
    sums file."""
    if not (run.root / SUMS_FILE).exists():
        return None
    return {entry.path for entry in read_sums(run.root)}


def unsealed_cases(run: RunDir, info: RunInfo) -> list[str]:
    """Cases with a result.json that SHA256SUMS does not list: killed between a case's result and
    the evidence after it, or taken out of SHA256SUMS by hand. Nothing vouches for them, so a
    resume runs them again instead of keeping them."""
    try:
        listed = listed_in_evidence(run)
    except (ValueError, OSError):
        return []  # unreadable evidence: a change the resume was told to accept, and keeps
    if listed is None:
        return []
    return [cid for cid in info.selected if run.is_finished(cid) and f"cases/{cid}/result.json" not in listed]


def changes_since_evidence(run: RunDir, info: RunInfo) -> list[str]:
    """What differs from SHA256SUMS, leaving out the folders of cases the evidence does not show
    finished (a resume discards and redoes those). Without SHA256SUMS a run that has finished
    cases lost its evidence: that is a change too (only a run killed in its first case, before
    any evidence, has none to check)."""
    try:
        listed = listed_in_evidence(run)
    except (ValueError, OSError) as exc:  # cut short, binary, not a sums file: nothing can be trusted
        return [f"unreadable: {SUMS_FILE} ({str(exc)[:200]})"]
    if listed is None:
        finished = [cid for cid in info.selected if run.is_finished(cid)]
        return [f"missing: {SUMS_FILE} ({len(finished)} finished cases without evidence)"] if finished else []
    redone = tuple(f"cases/{cid}/" for cid in info.selected if f"cases/{cid}/result.json" not in listed)
    return [f"{kind}: {path}" for kind, path in differences(run) if not path.startswith(redone)]
