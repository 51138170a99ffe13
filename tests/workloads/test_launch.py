"""The kit's launcher: the ranks of one run, their environment, and what happens when one fails."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

LAUNCH = [sys.executable, "-m", "kit.workloads.launch"]
# One write per line: the ranks share one pipe, unbuffered (PYTHONUNBUFFERED), and print() writes
# a line and its newline in two calls, which another rank's line can fall between.
REPORT = (
    "import json, os, sys; sys.stdout.write(json.dumps({k: os.environ[k] for k in "
    "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}) + '\\n')"
)


def test_each_rank_gets_the_rendezvous_environment():
    done = subprocess.run(
        [*LAUNCH, "--nproc", "3", "--", sys.executable, "-c", REPORT], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(int(r["RANK"]) for r in seen) == [0, 1, 2] and {r["WORLD_SIZE"] for r in seen} == {"3"}
    assert all(r["RANK"] == r["LOCAL_RANK"] for r in seen) and len({r["MASTER_PORT"] for r in seen}) == 1
    assert {r["MASTER_ADDR"] for r in seen} == {"127.0.0.1"}


def test_a_real_gloo_process_group_forms_over_it():
    script = (
        "import torch, torch.distributed as d; d.init_process_group('gloo'); t = torch.ones(1) * (d.get_rank() + 1); "
        "d.all_reduce(t); print(f'rank {d.get_rank()} sum {int(t.item())}', flush=True); d.destroy_process_group()"
    )
    done = subprocess.run(
        [*LAUNCH, "--nproc", "2", "--", sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(re.findall(r"rank (\d) sum (\d)", done.stdout)) == [("0", "3"), ("1", "3")]


def test_a_failed_rank_ends_the_run_with_its_status_and_stops_a_rank_that_waits():
    script = "import os, sys, time; r = int(os.environ['RANK']); sys.exit(7) if r == 1 else time.sleep(600)"
    started = time.monotonic()
    done = subprocess.run(
        [*LAUNCH, "--nproc", "2", "--", sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 7 and time.monotonic() - started < 60
