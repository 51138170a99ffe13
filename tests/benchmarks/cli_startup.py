"""How long does `kit` take to answer before it does any work? Start-up of the CLI, measured.

Runs `kit --help` and `kit list --profile paper` (output to a pipe, as a script would read it)
each `--rounds` times in a fresh interpreter, and a bare `python -c pass` as the floor every
command pays, and prints each one's median and fastest wall time, and its fastest CPU time (user
+ system, of the process and its children: on a shared machine the wall time waits for other
work, the CPU time much less); then the modules `import kit.cli` loads, to show what every
command pays for before it starts. `kit` is the one on PATH (a pyenv shim adds its own start).

    python tests/benchmarks/cli_startup.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import time


def children_cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def wall_and_cpu_times(command: list[str], rounds: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(rounds):
        started, cpu_before = time.perf_counter(), children_cpu_seconds()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - started)
        cpus.append(children_cpu_seconds() - cpu_before)
    return walls, cpus


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
        walls, cpus = wall_and_cpu_times(command, args.rounds)
        print(f"{name:28} median {statistics.median(walls):.3f} s, fastest {min(walls):.3f} s, "
              f"CPU fastest {min(cpus):.3f} s ({args.rounds} rounds)")
    probe = "import sys, kit.cli; print(' '.join(sorted(m for m in sys.modules if m.startswith('kit') or '.' not in m)))"
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    print(f"import kit.cli loads {len(loaded)} top-level and kit modules: {' '.join(loaded)}")


if __name__ == "__main__":
    main()
