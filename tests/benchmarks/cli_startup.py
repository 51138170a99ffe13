"""How long does `kit` take to answer before it does any work? Start-up of the CLI, measured.

Runs `kit --help` and `kit list --profile paper` (output to a pipe, as a script would read it)
each `--rounds` times in a fresh interpreter, and a bare `python -c pass` as the floor every
command pays, and prints each one's median and fastest wall time, and its fastest CPU time (user
+ system, of the process and its children: on a shared machine the wall time waits for other
work, the CPU time much less); then the modules `import kit.cli` loads, to show what every
command pays for before it starts. `kit` is the one on PATH (a pyenv shim adds its own start).
Then `kit doctor` `--doctor-rounds` times in a kit cache of its own, without and with the
frameworks probe's entry there (kit/host/probe_cache.py).

    python tests/benchmarks/cli_startup.py [--rounds 10] [--doctor-rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def children_cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def wall_and_cpu_times(
    command: list[str], rounds: int, env: dict | None = None, before_each=lambda: None
) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(rounds):
        before_each()
        started, cpu_before = time.perf_counter(), children_cpu_seconds()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        walls.append(time.perf_counter() - started)
        cpus.append(children_cpu_seconds() - cpu_before)
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--doctor-rounds", type=int, default=3)
    args = parser.parse_args()
    kit = shutil.which("kit") or sys.exit("no `kit` on PATH: pip install -e .")
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "kit --help": [kit, "--help"],
        "kit list --profile paper": [kit, "list", "--profile", "paper"],
    }
    for name, command in commands.items():
        show(name, *wall_and_cpu_times(command, args.rounds))
    probe = (
        "import sys, kit.cli; print(' '.join(sorted(m for m in sys.modules if m.startswith('kit') or '.' not in m)))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.split()
    print(f"import kit.cli loads {len(loaded)} top-level and kit modules: {' '.join(loaded)}")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "KIT_CACHE": cache}
        probes = Path(cache) / "probes"
        show(
            "kit doctor, no probe entry",
            *wall_and_cpu_times(
                [kit, "doctor"], args.doctor_rounds, env, lambda: shutil.rmtree(probes, ignore_errors=True)
            ),
        )
        show("kit doctor, its probe kept", *wall_and_cpu_times([kit, "doctor"], args.doctor_rounds, env))


def show(name: str, walls: list[float], cpus: list[float]) -> None:
    print(
        f"{name:28} median {statistics.median(walls):.3f} s, fastest {min(walls):.3f} s, "
        f"CPU fastest {min(cpus):.3f} s ({len(walls)} rounds)"
    )


if __name__ == "__main__":
    main()
