"""nccl-tests cases: NVIDIA's `<collective>_perf` binary is the case's one process.

One process drives all the case's GPUs (`-g N`), as nccl-tests runs on one host without MPI;
no torch and no kit code run beside it. The executor starts the binary (local: a subprocess;
docker: the comm image with the binary as its command) and keeps its output in the run folder;
this module, on the host side, gives the command line and reads that output (kit.comm.nccl_tests_output's
parse_nccl_tests) into the run's rank sample.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kit.comm.collectives import COLLECTIVES
from kit.comm.nccl_tests_output import parse_nccl_tests
from kit.comm.sweep import CommSweep, TopologyFacts
from kit.files.atomic import atomic_write_text
from kit.plan.protocol import Case, CommParams
from kit.rundir.schema import RankSample

NCCL_TESTS_DIR_ENV = "KIT_NCCL_TESTS_DIR"  # where the binaries are (the comm image sets it)
# nccl-tests' -d names (src/common.cu, test_typenames) for the kit's dtypes.
DTYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16"}
TIME_STATISTIC = "mean over the timed iterations, averaged over the ranks (nccl-tests' default -a 1)"


def runs_binary(case: Case) -> bool:
    return case.workload == "comm" and case.params_as(CommParams).backend == "nccl-tests"


def binary_name(case: Case) -> str:
    return COLLECTIVES[case.params_as(CommParams).collective].nccl_tests_binary


def command(case: Case, binary: str, gpus_per_process: int | None = None) -> list[str]:
    """The case's sweep as nccl-tests arguments, all its GPUs driven by this one process; or, for
    a binary built with MPI=1 that srun or mpirun starts once per GPU, `gpus_per_process=1`
    (MPI gives the number of processes)."""
    params = case.params_as(CommParams)
    return [
        binary,
        "-b",
        str(params.min_bytes),
        "-e",
        str(params.max_bytes),
        "-f",
        str(params.step_factor),
        "-g",
        str(gpus_per_process or case.gpus),
        "-w",
        str(params.warmup_iters),
        "-n",
        str(params.iters),
        "-d",
        DTYPES[params.dtype],
        "-c",
        "1",
    ]


def find_binary(case: Case) -> tuple[Path | None, str]:
    """The binary on this host: in $KIT_NCCL_TESTS_DIR, else on PATH; or why it is not here."""
    name = binary_name(case)
    configured = os.environ.get(NCCL_TESTS_DIR_ENV)
    if configured and (Path(configured) / name).is_file():
        return Path(configured) / name, ""
    found = shutil.which(name)
    if found:
        return Path(found), ""
    where = f"${NCCL_TESTS_DIR_ENV} ({configured})" if configured else f"${NCCL_TESTS_DIR_ENV} (not set)"
    return None, f"nccl-tests binary {name} not found in {where} nor on PATH; it ships in the comm image"


def keep_output(out_dir: Path, binary: str, stdout: str, stderr: str) -> str:
    """The binary's output, as printed, beside the run's sample; its file name."""
    name = f"{Path(binary).name}.out.txt"
    atomic_write_text(out_dir / name, stdout + (f"\n--- stderr ---\n{stderr}" if stderr else ""))
    return name


def rank_sample(
    case: Case,
    argv: list[str],
    stdout: str,
    stderr: str,
    exit_code: int | None,
    raw_name: str,
    started_at: str,
    finished_at: str,
    topology: TopologyFacts | None,
) -> RankSample:
    """What the binary's run amounts to: its sweep, or an error saying why there is none. Wrong
    elements (or "Out of bounds values: N FAILED") make it an error too, the rows kept."""
    params = case.params_as(CommParams)
    parsed = parse_nccl_tests(stdout)
    base = {
        "rank": 0,
        "world_size": 1,
        "device": case.device,
        "started_at": started_at,
        "finished_at": finished_at,
        "device_name": ", ".join(sorted(set(parsed.devices))) or "unknown",
    }
    name = Path(argv[0]).name
    sweep = CommSweep(
        collective=params.collective,
        backend="nccl-tests",
        ranks=len(parsed.ranks) or case.gpus,
        dtype=params.dtype,
        warmup_iters=params.warmup_iters,
        iters=params.iters,
        time_statistic=TIME_STATISTIC,
        rows=parsed.rows,
        device_names=sorted(set(parsed.devices)),
        topology=topology,
        rank_nodes=parsed.rank_hosts if all(parsed.rank_hosts) else [],
        out_of_bounds=parsed.out_of_bounds,
        out_of_bounds_failed=parsed.out_of_bounds_failed,
        avg_busbw_gbps=parsed.avg_busbw_gbps,
        command=argv,
        raw_output_file=raw_name,
        unparsed=parsed.unparsed,
    ).model_dump(mode="json")
    if parsed.failure:  # nccl-tests then exits non-zero too; the failure says more
        return RankSample(
            **base, status="error", reason=f"{name}: {parsed.failure} (output in {raw_name})", details=sweep
        )
    if exit_code != 0:
        tail = stderr.strip()[-500:] or stdout.strip()[-500:]
        return RankSample(
            **base,
            status="error",
            reason=f"{name} exited with {exit_code}: {tail} (output in {raw_name})",
            details=sweep,
        )
    if not parsed.rows:
        return RankSample(
            **base, status="error", reason=f"{name} printed no result rows (output in {raw_name})", details=sweep
        )
    return RankSample(**base, status="ok", details=sweep)
