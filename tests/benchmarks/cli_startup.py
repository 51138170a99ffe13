"""How long does `kit` take to answer before it does any work? Start-up of the CLI, measured.

Runs `kit --help` and `kit list --profile paper` (output to a pipe, as a script would read it)
each `--rounds` times in a fresh interpreter, and a bare `python -c pass` as the floor every
command pays, and prints each one's median and fastest wall time; then the modules
`import kit.cli` loads, to show what every command pays for before it starts.

    python tests/benchmarks/cli_startup.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def wall_times(command: list[str], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    kit = shutil.which("kit") or sys.exit("no `kit` on PATH: pip install -e .")
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "kit --help": [kit, "--help"],
        "kit list --profile paper": [kit, "list", "--profile", "paper"],
    }
    for name, command in commands.items():
        times = wall_times(command, args.rounds)
        print(f"{name:28} median {statistics.median(times):.3f} s, fastest {min(times):.3f} s ({args.rounds} rounds)")
    probe = "import sys, kit.cli; print(' '.join(sorted(m for m in sys.modules if m.startswith('kit') or '.' not in m)))"
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    print(f"import kit.cli loads {len(loaded)} top-level and kit modules: {' '.join(loaded)}")


if __name__ == "__main__":
    main()
