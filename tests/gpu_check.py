"""The prepared check of a GPU host: install the kit into a Python that has a CUDA build of torch,
fingerprint the host, check its images and engines, run the quick profile fitted to it, and leave
everything as one archive. Standard library only: it runs before the kit is installed.

    python tests/gpu_check.py wheels DIR            on a machine with network: the packages such a
                                                    host lacks, for CPython 3.12 on x86_64 Linux
    python tests/gpu_check.py run [--wheels DIR]    on the GPU host: install (from DIR, without
        [--out DIR] [--all] [--budget-s 540]        network, where given), kit doctor, kit preflight,
                                                    one case of each stage of the quick profile (the
                                                    cheapest that fits, by `kit list`'s estimates;
                                                    --all: every case), kit report; OUT/gpu-check.tgz

Each step's command, exit status, time and output go into OUT/steps.json and OUT/<step>.log; a
step that fails is recorded and the check goes on to the next where it can.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
# What a GPU host with a CUDA build of torch, transformers, peft and accelerate lacks of the kit's
# dependencies (a one-GPU test host, 2026-11-27, had none of these), pinned as the CPU path pins
# them (constraints-cpu.txt, the smoke image's versions). Resolved with their own dependencies:
LIGHT = [
    "pydantic==2.13.4",
    "docker==7.1.0",
    "hjson",
    "msgpack",
    "ninja",
    "einops",
    "py-cpuinfo",
    "psutil",
    "weasyprint==70.0",
    "pypdf",
    "setuptools",
    "wheel",
]
# Without their dependencies (each would pull a torch build): DeepSpeed as its source
# distribution, built there with DS_BUILD_OPS=0 (ops are built when a case needs one).
HEAVY_WHEELS = ["bitsandbytes==0.50.2"]
HEAVY_SOURCES = ["deepspeed==0.19.8"]
TARGET = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312"] + [
    argument
    for tag in ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24", "manylinux_2_17", "manylinux2014")
    for argument in ("--platform", f"{tag}_x86_64")
]
# Dependencies of those that such a host has already (matplotlib's, transformers'): left out of
# the folder, which then travels in less than 64 MiB.
ON_THE_HOST = {"pillow", "fonttools", "typing-extensions", "packaging", "numpy", "tqdm", "pyyaml"}
# The stages of the quick profile, each checked by one case unless --all.
STAGE_ORDER = ("pretrain", "finetune", "scaling", "maxbatch", "profile", "serve", "comm")


def pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", *args]


def download_wheels(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    common = ["download", "--dest", str(folder), "--only-binary=:all:", *TARGET]
    subprocess.run(pip(*common, *LIGHT), check=True)
    subprocess.run(pip(*common, "--no-deps", *HEAVY_WHEELS), check=True)
    subprocess.run(pip("download", "--dest", str(folder), "--no-deps", "--no-binary=:all:", *HEAVY_SOURCES), check=True)
    for path in folder.iterdir():
        if distribution_of(path) in ON_THE_HOST:
            path.unlink()
    size = sum(path.stat().st_size for path in folder.iterdir())
    print(f"{len(list(folder.iterdir()))} files, {size / 2**20:.1f} MiB in {folder}")


def distribution_of(path: Path) -> str:
    """The normalised distribution name of a wheel or sdist file name."""
    return re.sub(r"[-_.]+", "-", re.split(r"-\d", path.name, maxsplit=1)[0]).lower()


def installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


class Check:
    """The steps of one check, each recorded as it ends."""

    def __init__(self, out: Path, budget_s: float):
        self.out, self.deadline, self.steps = out, time.monotonic() + budget_s, []
        out.mkdir(parents=True, exist_ok=True)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def step(
        self, name: str, argv: list[str], timeout_s: float | None = None, env: dict | None = None
    ) -> subprocess.CompletedProcess | None:
        timeout_s = max(1.0, min(timeout_s or self.left_s(), self.left_s()))
        started = time.monotonic()
        print(f"[{name}] {' '.join(argv)} (at most {timeout_s:.0f} s)", flush=True)
        log = self.out / f"{name}.log"
        try:
            with log.open("w") as handle:
                done = subprocess.run(
                    argv,
                    stdout=subprocess.PIPE,
                    stderr=handle,
                    text=True,
                    timeout=timeout_s,
                    cwd=CHECKOUT,
                    env={**os.environ, **(env or {})},
                )
            status = done.returncode
        except subprocess.TimeoutExpired:
            done, status = None, "timeout"
        seconds = time.monotonic() - started
        if done is not None and done.stdout:
            (self.out / f"{name}.out").write_text(done.stdout)
        self.steps.append({"step": name, "argv": argv, "status": status, "seconds": round(seconds, 1)})
        (self.out / "steps.json").write_text(json.dumps(self.steps, indent=2))
        print(f"[{name}] {status} after {seconds:.0f} s", flush=True)
        return done

    def kit(self, name: str, *args: str, timeout_s: float | None = None) -> subprocess.CompletedProcess | None:
        return self.step(name, [sys.executable, "-m", "kit.cli", *args], timeout_s)


def install(check: Check, wheels: Path | None) -> None:
    """The kit's missing dependencies (from `wheels` without network where given: the wheels,
    then what is built from source, with setuptools among the wheels where the Python lacks it),
    then the kit; where pip cannot install the checkout, its folder goes on the Python's path."""
    if wheels is None:
        check.step("install-kit", pip("install", "-e", f"{CHECKOUT}[local]"), timeout_s=900, env={"DS_BUILD_OPS": "0"})
        return
    missing = sorted(path for path in wheels.iterdir() if not installed(distribution_of(path)))
    offline = ("install", "--no-index", "--no-deps", "--no-build-isolation")
    for name, group in (
        ("install-wheels", [p for p in missing if p.suffix == ".whl"]),
        ("install-sources", [p for p in missing if p.suffix != ".whl"]),
    ):
        if group:
            check.step(name, pip(*offline, *map(str, group)), timeout_s=600, env={"DS_BUILD_OPS": "0"})
    done = check.step("install-kit", pip(*offline, "-e", str(CHECKOUT)), timeout_s=120)
    if done is None or done.returncode != 0:
        import sysconfig

        (Path(sysconfig.get_paths()["purelib"]) / "kit-checkout.pth").write_text(f"{CHECKOUT}\n")
        print(f"[install-kit] {CHECKOUT} put on the path of {sys.executable} (kit-checkout.pth)", flush=True)


def chosen_cases(listed: dict, every: bool) -> list[str]:
    """From `kit list --json`: every case this host runs (`every`), or per stage the one `kit
    list` estimates cheapest; never one it cannot run or predicts to fail (GPU or host memory,
    disk, software: a compiler or flash-attn the host lacks)."""
    host = listed["host"]
    estimates, cannot = host["estimates"], {**host["skipped"], **host["predicted_failures"]}
    runnable = [case for case in listed["cases"] if case["id"] not in cannot]
    if every:
        return [case["id"] for case in runnable]
    chosen = []
    for stage in STAGE_ORDER:
        fits = [case["id"] for case in runnable if case["stage"] == stage and case["variant"] is None]
        if fits:
            chosen.append(min(fits, key=lambda cid: estimates.get(cid, {}).get("seconds") or float("inf")))
    return chosen


def run_check(out: Path, wheels: Path | None, every: bool, budget_s: float) -> int:
    if shutil.which("nvidia-smi") is None:
        print("no nvidia-smi here: this check is for a GPU host", file=sys.stderr)
        return 2
    check = Check(out, budget_s)
    check.step("nvidia-smi", ["nvidia-smi"], timeout_s=30)
    install(check, wheels)
    check.kit("doctor", "doctor", "--profile", "quick", "--json", timeout_s=120)
    check.kit("preflight", "preflight", "--profile", "quick", "--executor", "local", "--json", timeout_s=300)
    listed = check.kit("list", "list", "--profile", "quick", "--json", timeout_s=60)
    run_dir = out / "run"
    if listed is not None and listed.returncode == 0:
        cases = chosen_cases(json.loads(listed.stdout), every)
        check.kit(
            "run",
            "run",
            "--profile",
            "quick",
            "--executor",
            "local",
            "--no-preflight",
            "--out",
            str(run_dir),
            *[argument for case in cases for argument in ("--case", case)],
        )
    if (run_dir / "run.json").is_file():
        formats = "html,pdf,json" if installed("weasyprint") else "html,json"
        check.kit(
            "report",
            "report",
            str(run_dir),
            "--compare",
            "reference",
            "--format",
            formats,
            timeout_s=max(check.left_s(), 60),
        )
    with tarfile.open(out / "gpu-check.tgz", "w:gz") as archive:
        for path in sorted(out.iterdir()):
            if path.name != "gpu-check.tgz":
                archive.add(path, arcname=path.name)
    failed = [step["step"] for step in check.steps if step["status"] not in (0,)]
    print(
        f"gpu check: {len(check.steps)} steps, {sum(s['seconds'] for s in check.steps):.0f} s; "
        f"not 0: {', '.join(failed) or 'none'}; {out / 'gpu-check.tgz'}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    wheels = commands.add_parser("wheels", help="download what a GPU host with torch lacks, for CPython 3.12")
    wheels.add_argument("folder", type=Path)
    run = commands.add_parser("run", help="the check, on the GPU host")
    run.add_argument("--wheels", type=Path, help="install from this folder, without network")
    run.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check"), help="where results go ($OUT)"
    )
    run.add_argument("--all", action="store_true", help="every case of the quick profile, not one per stage")
    run.add_argument("--budget-s", type=float, default=540.0, help="stop starting steps after this many seconds")
    args = parser.parse_args()
    if args.command == "wheels":
        download_wheels(args.folder)
        return 0
    return run_check(args.out.resolve(), args.wheels.resolve() if args.wheels else None, args.all, args.budget_s)


if __name__ == "__main__":
    sys.exit(main())
