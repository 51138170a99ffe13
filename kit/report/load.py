"""A run directory read once, into typed values, for the report."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path

from kit import __version__
from kit.host.fingerprint import Fingerprint
from kit.host.hostlist import expand_hostlist
from kit.host.kit_source import PACKAGE_DIR, measuring_sources, sources_sha256
from kit.host.redaction_tokens import (
    redact_identifiers,
    redaction_salt,
    redaction_token,
)
from kit.measure.recompute import NOT_STORED, differences
from kit.reference.measured_run import measured_run
from kit.report.forked import in_parallel
from kit.report.free_text import shown_text
from kit.report.loaded_run import LoadedFingerprint, LoadedRun
from kit.rundir.directory import NODE_FINGERPRINTS as FINGERPRINTS
from kit.rundir.directory import RunDir, UnreadableRun, read_model
from kit.rundir.evidence import EvidenceError, EvidenceFile, evidence_digest, read_sums
from kit.rundir.schema import Result, RunInfo
from kit.rundir.signing import check_signature


def _read_fingerprint(path: Path, redact: bool) -> LoadedFingerprint:
    if not path.is_file():
        return LoadedFingerprint(missing=f"not recorded (no {path.name} in the run directory)")
    try:
        fingerprint = read_model(path, Fingerprint)
    except UnreadableRun as exc:
        return LoadedFingerprint(missing=f"unreadable {path.name}: {str(exc).removeprefix(f'{path}: ')}")
    if redact and not fingerprint.redacted:
        fingerprint = redact_identifiers(fingerprint, redaction_salt())
    return LoadedFingerprint(fingerprint=fingerprint)


def _node_fingerprints(
    run_dir: RunDir, info: RunInfo, results: Iterable[Result], redact: bool
) -> dict[str, LoadedFingerprint]:
    """The fingerprint of every node run.json names, and of every node a job ran on (those without
    one say so); a name from the run's own files only, never a path outside it."""
    found = {
        node: _read_fingerprint(run_dir.root / FINGERPRINTS / Path(relative).name, redact)
        for node, relative in info.node_fingerprints.items()
    }
    for result in results:
        for sample in result.samples:
            job = sample.slurm_job
            for node in expand_hostlist(job.nodes) if job else []:
                found.setdefault(
                    node,
                    LoadedFingerprint(missing=f"not recorded (a job ran on {node}; no fingerprint of it in run.json)"),
                )
    return dict(sorted(found.items()))


def _nodes_by_token(
    run_dir: RunDir,
    info: RunInfo,
    results: dict[str, Result],
    nodes: dict[str, LoadedFingerprint],
    evidence: list[EvidenceFile],
):
    """A Slurm run that was not redacted, read as if it were (kit.rundir.redact): its node names, in its
    results, run.json, node fingerprints and the names of its files, become their tokens (the
    lines of SHA256SUMS stay as written: the digests over them are those of the run)."""
    from kit.rundir.redact import Redactor, recorded_node_names

    redactor = Redactor(run_dir.root, recorded_node_names(run_dir.root, info, results.values()))
    info = RunInfo.model_validate_json(redactor.text(info.model_dump_json()))
    results = {
        case_id: Result.model_validate_json(redactor.text(result.model_dump_json()))
        for case_id, result in results.items()
    }
    nodes = {redactor.text(node): fingerprint for node, fingerprint in nodes.items()}
    return info, results, nodes, [entry.model_copy(update={"path": redactor.text(entry.path)}) for entry in evidence]


def _shown(result: Result, run_dir: RunDir) -> Result:
    """`result` with its reason and notes as a report shows them (kit.report.free_text)."""
    source = run_dir.result_path(result.case_id).relative_to(run_dir.root).as_posix()
    return result.model_copy(
        update={
            "reason": result.reason and shown_text(result.reason, source),
            "notes": [shown_text(note, source) for note in result.notes],
        }
    )


def load_run(path: Path, redact: bool, allowed_signers: Path | None = None) -> LoadedRun:
    """Everything a report reads of one run directory (verified beforehand by the caller), its
    signature checked against `allowed_signers` where given."""
    run_dir = RunDir(path)
    try:
        info = run_dir.read_info()
        results = {result.case_id: result for result in run_dir.results()}
    except UnreadableRun as exc:
        raise UnreadableRun(
            f"kit {__version__} cannot read this run directory ({exc}); if another kit version wrote it, render it "
            "with that version"
        ) from None
    # every ok case's figures recomputed from its rank files, on the machine's cores at once
    checks = in_parallel([partial(differences, run_dir, result) for result in results.values()])
    recomputed = [line for lines in checks for line in lines]
    # Figures added to the measuring code since the run: the kit that made it is the one to render it.
    only_new = recomputed and all(line.endswith(NOT_STORED) for line in recomputed)
    measuring = sources_sha256(PACKAGE_DIR, measuring_sources()) if only_new else None
    if measuring is not None and info.kit.workload_sources_sha256 != measuring:
        raise UnreadableRun(
            f"this kit computes other figures from the run's raw samples than the kit that measured it ({recomputed[0]}; "
            f"{len(recomputed)} in all): its measuring code differs (the run's {info.kit.workload_sources_sha256[:12]}, "
            f"this kit's {measuring[:12]}); render it with the kit that made it, commit {info.kit.git_commit or 'not recorded'}"
        )
    if recomputed:
        raise EvidenceError(Path(path), [f"stored figures differ from the raw samples: {line}" for line in recomputed])
    results = {case_id: _shown(result, run_dir) for case_id, result in results.items()}
    before = _read_fingerprint(run_dir.fingerprint_path, redact)
    hostname = info.host.hostname or "not recorded"
    if redact and info.host.hostname:
        hostname = redaction_token(hostname, redaction_salt())
    nodes = _node_fingerprints(run_dir, info, results.values(), redact)
    evidence = [
        entry.model_copy(update={"size": (run_dir.root / entry.path).stat().st_size})
        for entry in read_sums(run_dir.root)
    ]
    if redact and not info.redacted and info.executor == "slurm":
        info, results, nodes, evidence = _nodes_by_token(run_dir, info, results, nodes, evidence)
    return LoadedRun(
        path=Path(path),
        info=info,
        results=results,
        before=before,
        after=_read_fingerprint(run_dir.fingerprint_after_path, redact),
        nodes=nodes,
        evidence=evidence,
        evidence_digest=evidence_digest(run_dir.root),
        signature=check_signature(run_dir.root, allowed_signers),
        hostname=hostname,
        redacted=redact,
        measured=measured_run(info, results.values(), before.fingerprint),
    )
