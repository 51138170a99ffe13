"""`kit baseline`: run directories read as a baseline reads them (finished, matching their
evidence), the baseline made of them (kit.reference.baseline) or the kit's expectation in its
place (kit.reference.expected_baseline), written, and signed where its runs were."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kit.files.regular import RUN_FILE_LIMIT, read_regular
from kit.measure.slo import DEFAULT_SLO, Slo
from kit.reference.baseline import Baseline, BaselineRun, BaselineSource, make_baseline
from kit.reference.expected_baseline import expectation_baseline


def read_source(run_dir: Path, objectives: Slo = DEFAULT_SLO) -> BaselineSource:
    """A finished run directory that matches its evidence, as a baseline reads it (EvidenceError
    where it does not match, ValueError where it is no finished run), its serving sweeps' capacity
    held to `objectives`."""
    from kit.host.fingerprint import Fingerprint
    from kit.measure.capacity import CAPACITY_METRIC, capacity_metric
    from kit.reference.measured_run import measured_run
    from kit.rundir.directory import RunDir
    from kit.rundir.evidence import EvidenceError, evidence_digest, verify
    from kit.rundir.signing import check_signature

    run = RunDir(run_dir)
    if not run.info_path.is_file():
        raise ValueError(f"{run_dir} is not a run directory (no run.json)")
    info = run.read_info()
    if info.status != "finished":
        raise ValueError(
            f"{run_dir} is not finished (run.json status: {info.status}): a baseline is made of finished runs"
        )
    problems = verify(run_dir)
    if problems:
        raise EvidenceError(run_dir, problems, "no baseline is made from it")
    fingerprint = (
        Fingerprint.model_validate_json(read_regular(run.fingerprint_path, RUN_FILE_LIMIT))
        if run.fingerprint_path.is_file()
        else None
    )
    measured = measured_run(info, run.results(), fingerprint)
    derived = {
        case_id: {CAPACITY_METRIC: found}
        for case_id, result in measured.results.items()
        if result.stage == "serve"
        and result.status == "ok"
        and (found := capacity_metric(run.case_dir(case_id), result, objectives, measured.invalid.get(case_id, [])))
    }
    return BaselineSource(
        measured=measured.model_copy(update={"derived": derived, "objectives": objectives.short()}),
        run=BaselineRun(
            run_id=info.run_id,
            hostname=info.host.hostname or "not recorded",
            profile=info.profile,
            evidence_digest=evidence_digest(run_dir),
            signer=check_signature(run_dir).summary,
        ),
        driver=fingerprint.gpus.driver_version if fingerprint else None,
        kit_version=info.kit.version,
        images=dict(info.images),
    )


def write_baseline(
    run_dirs: Sequence[Path],
    out: Path,
    name: str | None,
    sign_key: Path | None,
    made_at: str,
    expectation: bool = False,
    objectives: Slo = DEFAULT_SLO,
) -> Baseline:
    """`kit baseline`: the baseline of the runs, written to `out` (and signed with `sign_key` as
    FILE.sig), its serving capacities held to `objectives`; with `expectation`, the kit's expectation for the GPU of the one run given, for its
    cases (kit.reference.expected_baseline). Runs any of which is signed make a baseline that must
    be signed too (ValueError without a key): evidence is not laundered into an unsigned file."""
    from kit.rundir.directory import atomic_write_model
    from kit.rundir.signing import sign_file, signature_path

    sources = [read_source(Path(folder), objectives) for folder in run_dirs]
    signed = [source.run.run_id for source in sources if not source.run.signer.startswith("unsigned")]
    if signed and sign_key is None:
        raise ValueError(f"run {signed[0]} is signed: sign its baseline too (--sign-key KEY)")
    if expectation and len(sources) != 1:
        raise ValueError(f"--expectation takes one run, whose cases and GPU it bounds; got {len(sources)}")
    baseline = expectation_baseline(sources[0], made_at) if expectation else make_baseline(name, sources, made_at)
    if expectation and name:
        baseline = baseline.model_copy(update={"name": f"{name}: {baseline.name}"}).sealed()
    signature_path(out).unlink(missing_ok=True)  # an earlier baseline's signature signs other bytes
    atomic_write_model(out, baseline)
    if sign_key is not None:
        sign_file(out, sign_key)
    return baseline
