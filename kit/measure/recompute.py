"""Every figure the report shows, recomputed from the raw rank samples of the run directory.

SHA256SUMS proves that files did not change after the run; it cannot prove that result.json's
aggregates are what its samples give (someone could edit a mean and re-hash). So each ok result's
metrics are computed again, by its stage's unit (kit.measure.registry) as the runner computed them, from the
rank files (runs/<k>/rank-<r>.json) beside it, and a report is refused where a stored figure differs.
"""

from __future__ import annotations

import math

from kit.measure.registry import measure, unit_of
from kit.rundir.directory import RunDir, read_model
from kit.rundir.schema import RankSample, Result

NOT_STORED = "is not stored"  # a figure this kit computes that the run did not store


def raw_runs(run: RunDir, result: Result) -> list:
    """The result's runs with their ranks read from the rank files, not from result.json."""
    runs = []
    for sample in result.samples:
        folder = run.case_dir(result.case_id) / "runs" / str(sample.index)
        files = sorted(folder.glob("rank-*.json"), key=lambda path: int(path.stem.split("-")[1]))
        runs.append(sample.model_copy(update={"ranks": [read_model(path, RankSample) for path in files]}))
    return runs


def differences(run: RunDir, result: Result) -> list[str]:
    """Each stored figure of an ok result that its raw samples do not give, in one line each."""
    unit = unit_of(result.case)
    if result.status != "ok" or unit is None or unit.case_metrics is None:
        return []
    try:
        fresh, _ = measure(result.case, raw_runs(run, result))
    except Exception as exc:  # noqa: BLE001 - raw samples that cannot give the figures are the finding
        return [f"{result.case_id}: its raw samples give no figures ({type(exc).__name__}: {str(exc)[:200]})"]
    found = []
    for name in sorted(set(result.metrics) | set(fresh)):
        stored, again = result.metrics.get(name), fresh.get(name)
        if stored is None or again is None:
            found.append(f"{result.case_id}: {name} {NOT_STORED if stored is None else 'is not in the raw samples'}")
        elif not all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
            for a, b in zip([stored.mean, *stored.per_run], [again.mean, *again.per_run], strict=False)
        ) or len(stored.per_run) != len(again.per_run):
            found.append(f"{result.case_id}: {name} stored {stored.mean:.6g}, the raw samples give {again.mean:.6g}")
    return found
