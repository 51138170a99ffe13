"""A run directory as the report reads it: the shape kit.report.load fills and every section and
stage unit reads, apart from the loading, which re-measures each result with the stage units."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from kit.host.fingerprint import Fingerprint
from kit.reference.measured_run import MeasuredRun
from kit.rundir.evidence import EvidenceFile
from kit.rundir.schema import Result, RunInfo
from kit.rundir.signing import SignatureCheck


class LoadedFingerprint(BaseModel):
    """A fingerprint file of the run: the fingerprint, or why there is none."""

    fingerprint: Fingerprint | None = None
    missing: str | None = None


class LoadedRun(BaseModel):
    """One run directory as the report sections read it; `measured` is what claims are judged on."""

    path: Path
    info: RunInfo
    results: dict[str, Result]
    before: LoadedFingerprint
    after: LoadedFingerprint
    nodes: dict[str, LoadedFingerprint] = {}  # Slurm: each node a job ran on, fingerprinted on it (run.json)
    evidence: list[EvidenceFile]
    evidence_digest: str
    signature: SignatureCheck  # against the allowed signers the report was given (kit.rundir.signing)
    hostname: str
    redacted: bool
    measured: MeasuredRun

    @property
    def invalid(self) -> dict[str, list[str]]:
        """Case id -> why its figures are no measurement (kit.measure.validity), found once when read."""
        return self.measured.invalid
