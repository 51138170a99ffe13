"""nccl-tests binaries for tests: each prints a real run's recorded output (tests/fixtures/nccl_tests),
and only when asked the command that run was given, as the real binary would answer it.

No GPU here, so the binary cannot run; a stand-in that printed a 16-rank log to an 8-GPU command
would let a test pass on output the real binary never gives. So each recording carries the run's
command (from its .source file, with nccl-tests' defaults spelled out: -w 5 -n 20 -d float -c 1),
`case_for` shapes a plan's case to ask exactly that, and the stand-in refuses any other command.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

import support
from kit.plan.protocol import Case

FIXTURES = support.FIXTURES / "nccl_tests"


@dataclass(frozen=True)
class Recording:
    collective: str
    gpus: int  # ranks of the recorded run
    min_bytes: int
    max_bytes: int
    exit_code: int = 0  # what the real binary exited with, where the output shows it failed


RECORDINGS = {
    # NVIDIA/nccl#340: all_gather_perf -b 8 -e 128M -f 2 -g 2, two GeForce RTX 2080 Ti with an NVLink bridge.
    "rtx2080ti-nvlink-old-format-headerless": Recording("all_gather", 2, 8, 128 << 20),
    # NVIDIA/nccl#1706: all_reduce_perf -b 8 -e 128M -f 2 -g 2 on one host (2 ranks).
    "two-gpus-nccl-info-lines": Recording("all_reduce", 2, 8, 128 << 20),
    # NVIDIA/nccl#1184: all_reduce_perf -b 8 -e 128M -f 2, 2 ranks; wrong elements from 512 KiB on.
    "dgx-h100-wrong-elements": Recording("all_reduce", 2, 8, 128 << 20, exit_code=1),
}


def case_for(plan_cases: list[Case], name: str) -> Case:
    """The plan's case of the recording's collective, asking what the recorded run was asked."""
    recording = RECORDINGS[name]
    case = next(c for c in plan_cases if c.workload == "comm" and c.params.collective == recording.collective)
    params = case.params.model_copy(
        update={
            "min_bytes": recording.min_bytes,
            "max_bytes": recording.max_bytes,
            "step_factor": 2,
            "warmup_iters": 5,
            "iters": 20,
            "dtype": "float32",
        }
    )
    return case.model_copy(
        update={
            "gpus": recording.gpus,
            "params": params,
            "id": case.id.replace(f".g{case.gpus}", f".g{recording.gpus}"),
        }
    )


def stand_in(folder: Path, name: str, output_at: str | None = None) -> Path:
    """The recording's binary in `folder`: prints the output (read from `output_at`, default the
    fixture itself) for the recorded command, and exits 64 naming both commands for any other."""
    recording = RECORDINGS[name]
    binary_name = f"{recording.collective}_perf"
    expected = f"-b {recording.min_bytes} -e {recording.max_bytes} -f 2 -g {recording.gpus} -w 5 -n 20 -d float -c 1"
    binary = folder / binary_name
    binary.write_text(
        "#!/bin/sh\n"
        f'if [ "$*" != "{expected}" ]; then\n'
        f'  echo "recorded for {binary_name} {expected}; asked: $*" >&2; exit 64\n'
        "fi\n"
        f"cat {shlex.quote(output_at or str(FIXTURES / f'{name}.txt'))}\n"
        f"exit {recording.exit_code}\n"
    )
    binary.chmod(0o755)
    return binary
