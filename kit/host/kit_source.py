"""The kit that measures, as a fingerprint names it: its version and commit, whether its checkout
has uncommitted changes, the digest of the code a measured figure depends on (the workloads, the
stages' units and what they import) and of all its source, and each manifest's digest.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from kit import __version__
from kit.files.regular import MANIFEST_LIMIT, read_regular
from kit.host.fingerprint import KitInfo
from kit.host.this_host import run_command

PACKAGE_DIR = Path(__file__).resolve().parent.parent
WORKLOADS_DIR = PACKAGE_DIR / "workloads"
MEASURE_DIR = PACKAGE_DIR / "measure"
REPORT_ONLY = ("report", "reference", "units")  # kit.<these>: what shows or judges figures, never what computes them


def sources_sha256(root: Path, files) -> str:
    """SHA-256 over files in the order of their names relative to `root`: each name, NUL, bytes, NUL.

    Names are hashed too, so renaming a file changes the hash as editing one does.
    """
    digest = hashlib.sha256()
    for name, path in sorted((path.relative_to(root).as_posix(), path) for path in files):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def measuring_sources() -> list[Path]:
    """The code a measured figure depends on: the workloads, the stages' units (kit/measure/, each
    stating its figures from the samples), the serving aggregates a client computes as a burst
    ends, and every kit module those import, directly or not, found from the imports; not the
    report nor the paper's reference, which the units' sections read and no figure depends on."""
    found: set[Path] = set()
    pending = [*WORKLOADS_DIR.glob("*.py"), *MEASURE_DIR.glob("*.py")]
    while pending:
        path = pending.pop()
        if path in found or not path.is_file():
            continue
        found.add(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.module
                else [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in names:
                if name.startswith("kit.") and name.split(".")[1] not in REPORT_ONLY:
                    module = PACKAGE_DIR.parent / Path(*name.split("."))
                    pending.append(module / "__init__.py" if module.is_dir() else module.with_suffix(".py"))
    return sorted(found)


def kit_checkout_state() -> tuple[bool | None, str | None]:
    """Whether the kit's checkout has changes git has not committed (None, with why, where unknown)."""
    checkout = PACKAGE_DIR.parent
    if not (checkout / ".git").exists():
        return None, f"not a source checkout (no .git in {checkout})"
    stdout, problem = run_command(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"])
    return (None, problem) if problem else (bool(stdout.strip()), None)


def kit_info() -> KitInfo:
    """The kit that measures: version, commit of its checkout (and whether it was clean), the
    hashes of its measuring code and all its source, and each manifest's SHA-256."""
    from kit.manifest import manifests_dir

    unreadable: dict[str, str] = {}
    commit = None
    checkout = PACKAGE_DIR.parent
    if not (checkout / ".git").exists():
        unreadable["git_commit"] = f"not a source checkout (no .git in {checkout})"
    else:
        stdout, problem = run_command(["git", "-C", str(checkout), "rev-parse", "HEAD"])
        if problem:
            unreadable["git_commit"] = problem
        else:
            commit = stdout.strip()
    dirty, why = kit_checkout_state()
    if why:
        unreadable["dirty"] = why
    measuring = measuring_sources()
    manifests = manifests_dir()
    hashed = {}
    for path in sorted(manifests.rglob("*.yaml")):
        name = path.relative_to(manifests).as_posix()
        try:  # a FIFO or a link to /dev/zero among them is named, not read
            hashed[name] = sha256_bytes(read_regular(path, MANIFEST_LIMIT))
        except OSError as exc:
            unreadable[f"manifest {name}"] = exc.strerror or str(exc)
    return KitInfo(
        version=__version__,
        git_commit=commit,
        dirty=dirty,
        workload_sources_sha256=sources_sha256(PACKAGE_DIR, measuring),
        workload_files=[path.relative_to(PACKAGE_DIR).as_posix() for path in measuring],
        source_sha256=sources_sha256(PACKAGE_DIR, PACKAGE_DIR.rglob("*.py")),
        manifests_sha256=hashed,
        unreadable=unreadable,
    )


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
