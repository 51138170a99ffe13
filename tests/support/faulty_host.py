"""A copy of a real run as a faulty host would have left it: its fingerprint holding a recorded
faulty GPU's health (tests/fixtures/health: an A100 with a row remapping pending, its SOURCE
beside it), its serving check failed (tests/support/wrong_output.py), its evidence sealed again
as a run that recorded them would have."""

from __future__ import annotations

import shutil
from pathlib import Path

from kit.host.fingerprint import Fingerprint
from kit.host.health import HostHealth, XidLog
from kit.host.health_checks import judged
from kit.host.nvidia_smi_query import parse_query
from kit.rundir.directory import RunDir, atomic_write_model, read_model
from kit.rundir.schema import Result
from support import FIXTURES
from support.wrong_output import with_wrong_output

ROW_REMAP_PENDING = FIXTURES / "health" / "nvidia-smi-q-a100-sxm4x4-row-remap-pending.txt"


def faulty_copy(real_run: Path, run: Path) -> Path:
    """`real_run` copied to `run`, made faulty (see the module's docstring)."""
    shutil.copytree(real_run, run, symlinks=True)
    driver, gpus = parse_query(ROW_REMAP_PENDING.read_text())
    fingerprint = read_model(run / "fingerprint.json", Fingerprint)
    health = judged(
        HostHealth(
            catalog="",
            driver_version=driver,
            gpus=gpus,
            xid=XidLog(source="dmesg -T"),
            silent_data_corruption=fingerprint.health.silent_data_corruption if fingerprint.health else None,
        )
    )
    atomic_write_model(run / "fingerprint.json", fingerprint.model_copy(update={"health": health}))
    (serve,) = run.glob("cases/serve.*/result.json")
    atomic_write_model(serve, with_wrong_output(read_model(serve, Result)))
    (run / "SHA256SUMS.sig").unlink(missing_ok=True)
    RunDir(run).write_sums()
    return run
