"""The prepared check of a GPU host: install the kit into a Python that has a CUDA build of torch,
fingerprint the host, check its images and engines, run cases of the quick profile fitted to it,
report, and leave everything as one archive. Standard library only: it runs before the kit is
installed.

    python tests/gpu_check.py wheels DIR [--host test|bare] [--python 3.12]
        where there is network: what such a host lacks (README, "Verify on a GPU host")
    python tests/gpu_check.py run [--wheels DIR] [--out DIR] [--all] [--budget-s 540] [--profile quick]
        on the GPU host: install (from DIR, without network, where given), kit doctor, kit
        preflight, per stage the case `kit list` estimates cheapest among those it does not predict
        to fail, while their estimates fit the budget (--all: every case), kit report;
        OUT/gpu-check.tgz. --profile smoke: the same path on a CPU host.

Each step's command, exit status, time and output go into gpu-check/check.json and
gpu-check/<step>.log inside the archive, nothing beside it; a step that fails is recorded and the
check goes on. The report keeps REPORT_FLOOR_S whatever the cases took.
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
# What to bring, by the host's kind, for CPython 3.12 on x86_64 Linux, pinned as the CPU path pins
# them (constraints-cpu.txt, the smoke image's versions). "test": the GPU test host of
# ENVIRONMENT.md (torch, transformers, peft, accelerate, click, jinja2, rich, matplotlib,
# aiohttp, tokenizers, nvidia-ml-py, pyyaml, numpy there); "bare": a host with a CUDA build of
# torch alone. Resolved with their own dependencies, less those the host has (HOST_HAS):
MISSING_ON_TEST_HOST = [
    "pydantic==2.13.4",
    "docker==7.1.0",
    "hjson",
    "msgpack",
    "ninja",
    "einops",
    "py-cpuinfo",
    "prometheus-client==0.26.0",
]
LIGHT = {
    "test": MISSING_ON_TEST_HOST,
    "bare": [
        *MISSING_ON_TEST_HOST,
        "transformers==5.17.0",
        "click",
        "jinja2",
        "rich",
        "matplotlib",
        "aiohttp==3.14.5",
        "tokenizers",
        "nvidia-ml-py",
        "pyyaml",
        "psutil",
    ],
}
# Without their dependencies (each would pull a torch build): DeepSpeed as its source
# distribution, built there with DS_BUILD_OPS=0 (ops are built when a case needs one).
HEAVY_WHEELS = {
    "test": ["bitsandbytes==0.50.2"],
    "bare": ["bitsandbytes==0.50.2", "peft==0.21.0", "accelerate==1.15.0"],
}
HEAVY_SOURCES = ["deepspeed==0.19.8"]
HOST_HAS = {
    "test": {"pillow", "fonttools", "typing-extensions", "packaging", "numpy", "tqdm", "pyyaml", "idna", "psutil"},
    "bare": {"typing-extensions", "filelock", "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "fsspec"},
}


def target(python: str) -> list[str]:
    """pip's options for the wheels of CPython `python` ("3.12") on x86_64 Linux."""
    tag = python.replace(".", "")
    platforms = ("manylinux_2_28", "manylinux_2_27", "manylinux_2_24", "manylinux_2_17", "manylinux2014")
    return ["--python-version", python, "--implementation", "cp", "--abi", f"cp{tag}"] + [
        argument for platform in platforms for argument in ("--platform", f"{platform}_x86_64")
    ]


MOST_BROUGHT_MIB = 64  # what such a host can be brought in all, the checkout with the wheels
# The stages of the quick profile in the order the check tries them, one case each unless --all.
STAGE_ORDER = ("pretrain", "finetune", "scaling", "maxbatch", "profile", "serve", "comm")
# What the steps around the cases take, measured on the test host (ENVIRONMENT.md: the install
# about 90 s, `kit preflight --executor local` 35 s), and what the report and the archive are
# kept (a report of the quick profile's run: 20-40 s on a 2-core CPU).
REPORT_FLOOR_S = 60.0
ARCHIVE_FLOOR_S = 10.0
BUILD = {"DS_BUILD_OPS": "0"}  # DeepSpeed's ops are built when a case needs one
STOP_GRACE_S = 20.0  # between SIGTERM and SIGKILL of a step over its time: run.json says interrupted


def pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", *args]


def download_wheels(folder: Path, host: str, python: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    common = ["download", "--dest", str(folder), "--only-binary=:all:", *target(python)]
    subprocess.run(pip(*common, *LIGHT[host]), check=True)
    subprocess.run(pip(*common, "--no-deps", *HEAVY_WHEELS[host]), check=True)
    subprocess.run(pip("download", "--dest", str(folder), "--no-deps", "--no-binary=:all:", *HEAVY_SOURCES), check=True)
    for path in folder.iterdir():
        if distribution_of(path) in HOST_HAS[host]:
            path.unlink()
    files = sorted(folder.iterdir(), key=lambda path: -path.stat().st_size)
    size = sum(path.stat().st_size for path in files) / 2**20
    for path in files:
        print(f"{path.stat().st_size / 2**20:7.1f} MiB  {path.name}")
    print(f"{len(files)} files, {size:.1f} MiB in {folder} (for the {host} host)")
    if size > MOST_BROUGHT_MIB:
        print(
            f"over the {MOST_BROUGHT_MIB} MiB such a host can be brought: leave out bitsandbytes (its 4-bit cases "
            "are then not chosen) or install from an index"
        )


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

    def __init__(self, work: Path, budget_s: float):
        self.work, self.deadline, self.steps = work, time.monotonic() + budget_s, []
        work.mkdir(parents=True, exist_ok=True)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def before_report(self, seconds: float) -> float:
        """At most `seconds`, and never into the time kept for the report and the archive."""
        return min(seconds, self.left_s() - REPORT_FLOOR_S - ARCHIVE_FLOOR_S)

    def step(self, name: str, argv: list[str], timeout_s: float, env: dict | None = None) -> tuple[int | str, str]:
        """Run one step for at most `timeout_s` (SIGTERM, then SIGKILL after STOP_GRACE_S: the kit
        records an interrupted run as such); its exit status ("timeout" when stopped) and stdout."""
        timeout_s = max(1.0, timeout_s)
        started = time.monotonic()
        print(f"[{name}] {' '.join(argv)} (at most {timeout_s:.0f} s)", flush=True)
        with (self.work / f"{name}.log").open("w") as log, (self.work / f"{name}.out").open("w+") as out:
            process = subprocess.Popen(
                argv, stdout=out, stderr=log, text=True, cwd=CHECKOUT, env={**os.environ, **(env or {})}
            )
            try:
                status: int | str = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.terminate()
                try:
                    process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                status = "timeout"
            out.seek(0)
            stdout = out.read()
        if not stdout:
            (self.work / f"{name}.out").unlink()
        seconds = time.monotonic() - started
        self.steps.append({"step": name, "argv": argv, "status": status, "seconds": round(seconds, 1)})
        print(f"[{name}] {status} after {seconds:.0f} s", flush=True)
        return status, stdout

    def kit(self, name: str, *args: str, timeout_s: float) -> tuple[int | str, str]:
        return self.step(name, [sys.executable, "-m", "kit.cli", *args], timeout_s)


def install(check: Check, wheels: Path | None) -> None:
    """The kit's missing dependencies (from `wheels` without network where given: the wheels,
    then what is built from source, with setuptools among the wheels where the Python lacks it),
    then the kit; where pip cannot install the checkout, its folder goes on the Python's path."""
    if wheels is None:
        check.step("install-kit", pip("install", "-e", f"{CHECKOUT}[local]"), check.before_report(900), env=BUILD)
        return
    missing = sorted(path for path in wheels.iterdir() if not installed(distribution_of(path)))
    offline = ("install", "--no-index", "--no-deps", "--no-build-isolation")
    for name, group in (
        ("install-wheels", [p for p in missing if p.suffix == ".whl"]),
        ("install-sources", [p for p in missing if p.suffix != ".whl"]),
    ):
        if group:
            check.step(name, pip(*offline, *map(str, group)), check.before_report(600), env=BUILD)
    status, _ = check.step("install-kit", pip(*offline, "-e", str(CHECKOUT)), check.before_report(120))
    if status != 0:
        import sysconfig

        (Path(sysconfig.get_paths()["purelib"]) / "kit-checkout.pth").write_text(f"{CHECKOUT}\n")
        print(f"[install-kit] {CHECKOUT} put on the path of {sys.executable} (kit-checkout.pth)", flush=True)


def chosen_cases(listed: dict, every: bool, budget_s: float = float("inf"), serving: bool = True) -> list[str]:
    """From `kit list --json`: every case this host runs (`every`), or per stage the one `kit list`
    estimates cheapest, taken while the estimates add up to no more than `budget_s`; never one it
    cannot run or predicts to fail (GPU or host memory, disk, software: a compiler, flash-attn,
    DeepSpeed or bitsandbytes the host lacks), nor, without `serving`, a serving case."""
    host = listed["host"]
    estimates, cannot = host["estimates"], {**host["skipped"], **host["predicted_failures"]}
    runnable = [case for case in listed["cases"] if case["id"] not in cannot and (serving or case["stage"] != "serve")]
    if every:
        return [case["id"] for case in runnable]
    chosen, spent = [], 0.0
    for stage in STAGE_ORDER:
        priced = [
            (seconds, case["id"])
            for case in runnable
            if case["stage"] == stage
            and case["variant"] is None
            and (seconds := estimates.get(case["id"], {}).get("seconds")) is not None
        ]
        if priced and spent + min(priced)[0] <= budget_s:
            seconds, case_id = min(priced)
            chosen.append(case_id)
            spent += seconds
    return chosen


def kit_commit() -> dict:
    """The checkout's commit and whether it had changes, where it is a git checkout."""
    head = subprocess.run(["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return {"commit": None, "why": "not a git checkout: the fingerprint's kit.source_sha256 names the source"}
    changes = subprocess.run(["git", "-C", str(CHECKOUT), "status", "--porcelain"], capture_output=True, text=True)
    return {"commit": head.stdout.strip(), "dirty": bool(changes.stdout.strip())}


def identifiers() -> list[str]:
    """This host's name and its GPUs' UUIDs and serial numbers: what --redact replaces."""
    import socket

    found = [socket.gethostname()]
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=uuid,serial", "--format=csv,noheader"]
        listed = subprocess.run(query, capture_output=True, text=True)
        found += [part.strip() for line in listed.stdout.splitlines() for part in line.split(",")]
    return [value for value in found if len(value) >= 4 and value not in ("[N/A]", "N/A")]


def scrub(folder: Path, secrets: list[str]) -> int:
    """Replace each of `secrets` in every text file under `folder` (the steps' logs: the kit's own
    files are already redacted by --redact); how many files changed."""
    changed = 0
    for path in folder.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        scrubbed = text
        for index, secret in enumerate(secrets):
            scrubbed = scrubbed.replace(secret, f"redacted-{index}")
        if scrubbed != text:
            path.write_text(scrubbed)
            changed += 1
    return changed


def run_check(out: Path, wheels: Path | None, every: bool, budget_s: float, profile: str) -> int:
    gpu = profile != "smoke"
    if gpu and shutil.which("nvidia-smi") is None:
        print(
            "no nvidia-smi here: this check is for a GPU host (--profile smoke checks the path on CPU)", file=sys.stderr
        )
        return 2
    work = out / "gpu-check"
    if work.exists():
        shutil.rmtree(work)
    check = Check(work, budget_s)
    record = {"profile": profile, "budget_s": budget_s, "kit": kit_commit(), "steps": check.steps}
    if gpu:
        check.step("nvidia-smi", ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"], 30)
    install(check, wheels)
    check.kit("doctor", "doctor", "--profile", profile, "--json", "--redact", timeout_s=check.before_report(120))
    check.kit(
        "preflight",
        "preflight",
        "--profile",
        profile,
        "--executor",
        "local",
        "--json",
        timeout_s=check.before_report(300),
    )
    status, listed = check.kit("list", "list", "--profile", profile, "--json", timeout_s=check.before_report(60))
    run_dir = work / "run"
    if status == 0:
        plan = json.loads(listed)
        can_serve = not wheels or plan["host"]["resources"]["packages"].get("vllm") is not None
        cases = chosen_cases(plan, every, check.before_report(budget_s), serving=can_serve)
        record["chosen"] = {case: plan["host"]["estimates"][case] for case in cases}
        if not can_serve:
            record["not_checked"] = "serving: no vLLM here, and its CUDA wheel (hundreds of MB) cannot be brought"
        arguments = [argument for case in cases for argument in ("--case", case)]
        check.kit(
            "run",
            *("run", "--profile", profile, "--executor", "local", "--no-preflight", "--redact"),
            *("--out", str(run_dir), *arguments),
            timeout_s=check.before_report(budget_s),
        )
    if (run_dir / "run.json").is_file():
        formats = "html,pdf,json" if installed("weasyprint") else "html,json"
        check.kit(
            "report",
            *("report", str(run_dir), "--compare", "reference", "--format", formats),
            timeout_s=max(check.left_s() - ARCHIVE_FLOOR_S, REPORT_FLOOR_S),
        )
    (work / "check.json").write_text(json.dumps(record, indent=2))
    scrub(work, identifiers())
    with tarfile.open(out / "gpu-check.tgz", "w:gz") as archive:
        archive.add(work, arcname="gpu-check")
    shutil.rmtree(work)  # the archive holds it: each file comes back once
    failed = [step["step"] for step in check.steps if step["status"] != 0]
    print(
        f"gpu check: {len(check.steps)} steps, {sum(s['seconds'] for s in check.steps):.0f} s; "
        f"not 0: {', '.join(failed) or 'none'}; {out / 'gpu-check.tgz'}"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    wheels = commands.add_parser("wheels", help="download what a GPU host lacks")
    wheels.add_argument("folder", type=Path)
    wheels.add_argument(
        "--host", choices=sorted(LIGHT), default="test", help="the test host of ENVIRONMENT.md, or torch alone"
    )
    wheels.add_argument("--python", default="3.12", help="the host's CPython version")
    run = commands.add_parser("run", help="the check, on the GPU host")
    run.add_argument("--wheels", type=Path, help="install from this folder, without network")
    run.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-check"), help="where the archive goes ($OUT)"
    )
    run.add_argument("--all", action="store_true", help="every case of the profile, not one per stage")
    run.add_argument("--budget-s", type=float, default=540.0, help="the whole check's time")
    run.add_argument("--profile", default="quick", help="smoke: the install and report path on a CPU host")
    args = parser.parse_args()
    if args.command == "wheels":
        download_wheels(args.folder, args.host, args.python)
        return 0
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    return run_check(out, args.wheels.resolve() if args.wheels else None, args.all, args.budget_s, args.profile)


if __name__ == "__main__":
    sys.exit(main())
