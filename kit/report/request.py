"""`kit report` as one request: which runs, compared with what, in which formats and where; or
only their evidence verified. The entry point every way of rendering goes through, so the command
line parses and prints, and decides nothing."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from kit.measure.slo import Slo, given_slo
from kit.reference.acceptance import EXIT_STATUS, Decision, Judgement
from kit.rundir.signing import SignatureCheck, check_signature
from kit.runner import RequestError

EXIT_PRECEDENCE = [EXIT_STATUS[decided] for decided in ("ACCEPT", "INCONCLUSIVE", "REJECT")]
DEFAULT_TOLERANCE_PCT = 10.0  # --fleet: a node this far below the fleet median is flagged


class ReportRequest(BaseModel):
    model_config = ConfigDict(frozen=True)

    run_dirs: tuple[Path, ...] = ()  # none: the newest run under runs/
    fleet: bool = False
    tolerance: float | None = None  # --fleet: per cent below the fleet median that flags a node
    compare: tuple[str, ...] = ()  # "reference" and/or other run directories
    formats: tuple[str, ...] = ("html", "pdf")
    gpu_hour_price: float | None = None
    currency: str | None = None
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    out: Path | None = None
    redact: bool = False
    verify_only: bool = False
    expect_digest: str | None = None
    allowed_signers: Path | None = None
    accept: Path | None = None  # an acceptance spec (kit.reference.acceptance): the decision heads page one
    baseline: Path | None = None  # the baseline it holds the run to; the spec's own where not given

    @field_validator("formats", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        """`--format html,json` as the formats it names."""
        return tuple(name.strip() for name in value.split(",") if name.strip()) if isinstance(value, str) else value

    @property
    def slo(self) -> Slo:
        """The serving objectives of the report: those given, the default (kit.measure.slo) for the others."""
        return given_slo(self.slo_ttft_ms, self.slo_tpot_ms)


class Verified(NamedTuple):
    """--verify: the run, what differs from its evidence (nothing where it matches), and the digest
    the evidence was expected to have, where one was given."""

    run_dir: Path
    problems: list[str]
    expected_digest: str | None


class ReportOutcome(NamedTuple):
    written: list[Path]  # the files rendered
    signatures: list[
        tuple[Path, SignatureCheck]
    ]  # each run's (and the baseline's) signature, checked against the allowed signers
    verified: Verified | None = None
    decisions: list[tuple[Path, Decision]] = []  # --accept: each run's decision under the spec (a fleet's: each node's)

    @property
    def failed(self) -> bool:
        """A run that does not match its evidence, or whose signature fails (exit 1)."""
        return bool(self.verified and self.verified.problems) or any(check.failed for _, check in self.signatures)

    @property
    def exit_status(self) -> int:
        """1 where the evidence or a signature fails; else the decision's (kit.reference.acceptance.EXIT_STATUS),
        of a fleet the worst node's (a reject before an inconclusive), or 0."""
        if self.failed:
            return 1
        return max((decision.exit_status for _, decision in self.decisions), key=EXIT_PRECEDENCE.index, default=0)


def make_report(request: ReportRequest, say=print) -> ReportOutcome:
    """Render (or verify) what the request asks; RequestError for what cannot be asked, and the
    evidence's own errors (kit.rundir.evidence.EvidenceError) for a run that changed."""
    from kit.report.render import REFERENCE, chosen_formats, render
    from kit.rundir.evidence import digest_mismatch, expected_digest, newest_run, verify

    if request.redact:
        from kit.rundir.redact import use_machine_salt

        use_machine_salt()  # the host's and each node's token is the one this machine's redacted runs give them
    if request.fleet:
        return _fleet(request)
    if request.tolerance is not None:
        raise RequestError("--tolerance goes with --fleet")
    if len(request.run_dirs) > 1:
        raise RequestError(
            f"kit report takes one run directory (got {len(request.run_dirs)}); --fleet compares several"
        )
    try:
        run_dir = request.run_dirs[0] if request.run_dirs else newest_run()
    except (FileNotFoundError, ValueError) as exc:
        raise RequestError(str(exc)) from None
    if not (run_dir / "run.json").is_file():
        raise RequestError(f"{run_dir} is not a run directory (no run.json): give the folder `kit run` wrote")
    if request.expect_digest is not None and not request.verify_only:
        raise RequestError("--expect-digest goes with --verify")
    if request.baseline is not None and request.accept is None:
        raise RequestError("--baseline goes with --accept SPEC")
    if request.accept is not None and request.verify_only:
        raise RequestError("--accept renders a decision; --verify renders nothing")
    if request.verify_only:
        try:
            wanted = None if request.expect_digest is None else expected_digest(request.expect_digest)
        except ValueError as exc:
            raise RequestError(str(exc)) from None
        problems = verify(run_dir)
        if wanted is not None and not problems:
            problems = digest_mismatch(run_dir, wanted)
        return ReportOutcome([], signatures([run_dir], request.allowed_signers), Verified(run_dir, problems, wanted))
    try:
        chosen_formats(list(request.formats))
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    judged = judgement(request, run_dir) if request.accept is not None else None
    priced = {"currency": request.currency} if request.currency else {}
    try:
        written = render(
            run_dir,
            list(request.compare),
            list(request.formats),
            request.out or run_dir,
            request.redact,
            request.gpu_hour_price,
            request.allowed_signers,
            request.slo if judged is None or judged.slo is None else judged.slo,
            acceptance=judged.judgement if judged else None,
            say=say,
            **priced,
        )
    except ValidationError:
        raise  # a part of a run this kit cannot read, said as such
    except ValueError as exc:  # a run to compare with that is not one, ...: the user's to fix
        raise RequestError(str(exc)) from None
    others = [Path(item) for item in request.compare if item != REFERENCE]
    checked = signatures([run_dir, *others], request.allowed_signers)
    if judged is None:
        return ReportOutcome(written, checked)
    baseline = judged.judgement
    return ReportOutcome(
        written,
        [*checked, (baseline.baseline_path, baseline.baseline_signature)],
        decisions=[(run_dir, baseline.decision)],
    )


class Judged(NamedTuple):
    judgement: Judgement
    slo: Slo | None  # the spec's latency objectives where it states them and none were given


def judgement(request: ReportRequest, run_dir: Path) -> Judged:
    """The run's decision under the spec --accept names, against --baseline or the spec's own
    baseline (ManifestError for a malformed spec or baseline, RequestError where none is named)."""
    from kit.reference.acceptance import decide, load_spec
    from kit.reference.baseline import load_baseline
    from kit.reference.baseline_runs import read_source
    from kit.rundir.signing import check_file_signature

    assert request.accept is not None
    spec = load_spec(request.accept)
    baseline_path = request.baseline or spec.baseline_path
    if baseline_path is None:
        raise RequestError(
            f"{request.accept} names no baseline: give one with --baseline FILE (made by `kit baseline RUN... --out FILE`)"
        )
    baseline = load_baseline(baseline_path)
    latency = spec.spec.latency
    objectives = request.slo if latency is None else given_slo(latency.ttft_ms, latency.tpot_ms)
    try:
        source = read_source(run_dir, objectives)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    decision = decide(spec, baseline, source.measured, source.run.evidence_digest)
    given = request.slo_ttft_ms is not None or request.slo_tpot_ms is not None
    return Judged(
        Judgement(decision, baseline_path, check_file_signature(baseline_path, request.allowed_signers)),
        None if latency is None or given else objectives,
    )


def _fleet(request: ReportRequest) -> ReportOutcome:
    from kit.report.fleet import render_fleet

    others = (
        request.compare,
        request.gpu_hour_price,
        request.currency,
        request.verify_only,
        request.expect_digest,
        request.slo_ttft_ms,
        request.slo_tpot_ms,
    )
    if any(others):
        raise RequestError(
            "--fleet takes run directories, --tolerance, --format, --out, --redact, --allowed-signers, --accept and "
            "--baseline only"
        )
    if request.baseline is not None and request.accept is None:
        raise RequestError("--baseline goes with --accept SPEC")
    tolerance = DEFAULT_TOLERANCE_PCT if request.tolerance is None else request.tolerance
    if not 0 < tolerance < 100:
        raise RequestError(f"--tolerance is a percentage between 0 and 100; got {tolerance:g}")
    judged = [judgement(request, folder) for folder in request.run_dirs] if request.accept is not None else []
    try:
        written = render_fleet(
            list(request.run_dirs),
            list(request.formats),
            request.out,
            request.redact,
            tolerance / 100,
            request.allowed_signers,
            [each.judgement.decision for each in judged],
        )
    except ValidationError:
        raise  # a part of a run this kit cannot read, said as such
    except ValueError as exc:  # runs that are not of one profile, ...: the user's to fix
        raise RequestError(str(exc)) from None
    checked = signatures(list(request.run_dirs), request.allowed_signers)
    if not judged:
        return ReportOutcome(written, checked)
    baseline = judged[0].judgement
    return ReportOutcome(
        written,
        [*checked, (baseline.baseline_path, baseline.baseline_signature)],
        decisions=[(folder, each.judgement.decision) for folder, each in zip(request.run_dirs, judged)],
    )


def signatures(run_dirs: list[Path], allowed_signers: Path | None) -> list[tuple[Path, SignatureCheck]]:
    """Each run's signature, checked against the allowed signers given."""
    return [(folder, check_signature(folder, allowed_signers)) for folder in run_dirs]
