"""Where does the smoke profile's time go? Per case, per run, per phase.

Runs `kit run --all` (the smoke profile, on this CPU) into a fresh run directory, or reads one
given with `--run DIR`, and prints for each case its wall time and, per independent run, the
phases of its slowest rank: start (process exec to the harness: interpreter and imports), build
(frameworks, model, engine), warm-up and measured steps, and the rest (the launcher starting the
ranks, teardown), with the totals per phase over the whole run and the preflight's share.

    python tests/benchmarks/smoke_duration.py [--run runs/<dir>] [--no-preflight] [--executor local|docker]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

PHASES = ("start", "build", "warmup", "measured", "rest")


def case_rows(run: Path):
    for path in sorted(run.glob("cases/*/result.json")):
        result = json.loads(path.read_text())
        span = (
            datetime.fromisoformat(result["finished_at"]) - datetime.fromisoformat(result["started_at"])
        ).total_seconds()
        runs = []
        for sample in result["samples"]:
            ranks = [rank.get("phases_s") or {} for rank in sample["ranks"]]
            slowest = max(ranks, key=lambda p: sum(p.values()), default={})
            phases = {name: slowest.get(name, 0.0) for name in PHASES[:-1]}
            phases["rest"] = max(0.0, sample["wall_s"] - sum(phases.values()))
            runs.append(phases)
        yield result["case_id"], result["status"], span, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, help="a finished run directory to read instead of running one")
    parser.add_argument("--no-preflight", action="store_true")
    parser.add_argument(
        "--executor",
        choices=["local", "docker"],
        default="local",
        help="local (default): as on a fresh machine without docker",
    )
    args = parser.parse_args()
    run, wall = args.run, None
    if run is None:
        run = Path(tempfile.mkdtemp(prefix="smoke-duration-")) / "run"
        started = time.monotonic()
        command = [
            sys.executable,
            "-m",
            "kit.cli",
            "run",
            "--all",
            "--profile",
            "smoke",
            "--executor",
            args.executor,
            "--out",
            str(run),
        ]
        subprocess.run(command + (["--no-preflight"] if args.no_preflight else []), check=False)
        wall = time.monotonic() - started
    totals: dict[str, float] = defaultdict(float)
    print(f"{'case':<36}{'status':>12}{'wall s':>8}  per run: " + " / ".join(PHASES))
    case_total = 0.0
    for case_id, status, span, runs in case_rows(run):
        case_total += span
        cells = "  ".join("/".join(f"{phases[name]:.1f}" for name in PHASES) for phases in runs)
        print(f"{case_id:<36}{status:>12}{span:>8.1f}  {cells}")
        for phases in runs:
            for name in PHASES:
                totals[name] += phases[name]
    info = json.loads((run / "run.json").read_text())
    preflight = (info.get("preflight") or {}).get("seconds", 0.0)
    print("totals over the runs (s): " + ", ".join(f"{name} {totals[name]:.0f}" for name in PHASES))
    print(
        f"cases {case_total:.0f} s, preflight {preflight:.0f} s"
        + (f", kit run --all {wall:.0f} s wall" if wall else "")
    )


if __name__ == "__main__":
    main()
