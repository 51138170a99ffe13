"""The kit as a wheel: built from the sources, installed into a fresh environment, and run from a
folder that is no checkout, it finds its manifests and report templates in the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from support import FIXTURES, REPO

ROOT = REPO
# What the distribution is built from (pyproject.toml names the readme and the licence file).
DISTRIBUTION_SOURCES = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "constraints-cpu.txt",
    "kit",
    "manifests",
    "report_templates",
)
RECORDED_RUN = FIXTURES / "h100x1-run" / "run.tgz"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built without the network from a copy of the sources (a build folder left in
    the checkout by an earlier build could carry modules since removed)."""
    source = tmp_path_factory.mktemp("source")
    for name in DISTRIBUTION_SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "-q",
            str(source),
            "-w",
            str(out),
        ],
        check=True,
    )
    [built] = out.glob("*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """`kit ARGS` from the wheel installed into a fresh environment (this Python's packages
    beside it, for the dependencies), run in an empty folder with a fresh kit cache and no
    PYTHONPATH, so that nothing of the checkout is in reach."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "KIT_MANIFESTS", "KIT_REPORT_TEMPLATES")
    }
    env.update(KIT_CACHE=str(tmp_path_factory.mktemp("cache")), COLUMNS="200")
    environment = tmp_path_factory.mktemp("venv")
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(environment)], check=True
    )
    python = environment / "bin" / "python"
    # Away from the checkout, whose metadata (an editable install's egg-info) would pass for the kit installed.
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        cwd=elsewhere,
        env=env,
    )

    def run(*args: str, program: tuple[str, ...] = (str(environment / "bin" / "kit"),)) -> subprocess.CompletedProcess:
        return subprocess.run([*program, *args], capture_output=True, text=True, cwd=elsewhere, env=env, timeout=300)

    run.python = str(python)
    run.folder = elsewhere
    return run


def test_the_wheel_is_its_own_distribution_and_carries_the_manifests_the_templates_and_the_licence(wheel):
    assert wheel.name.startswith("llm_runtime_kit-")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "kit/__main__.py",
        "kit/manifests/protocol.yaml",
        "kit/manifests/references/arxiv-2311.03687.yaml",
        "kit/report_templates/report.html.j2",
        "kit/report_templates/style.css",
        "kit/constraints-cpu.txt",  # the CPU path's pins, for a wheel installed on CPU (README)
    } <= names
    pins = zipfile.ZipFile(wheel).read("kit/constraints-cpu.txt").decode()
    assert pins == (ROOT / "constraints-cpu.txt").read_text() and "torch==" in pins
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    metadata = (
        zipfile.ZipFile(wheel).read(next(name for name in names if name.endswith(".dist-info/METADATA"))).decode()
    )
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_the_installed_kit_is_the_wheels_not_the_checkouts(installed):
    done = installed("-c", "import kit; print(kit.__file__)", program=(installed.python,))
    assert done.returncode == 0 and str(ROOT) not in done.stdout and "site-packages" in done.stdout, done


def test_an_installed_kit_lists_the_paper_profile(installed):
    done = installed("list", "--profile", "paper")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("paper: ") and "pretrain.llama2-70b.z3+o.g8" in done.stdout


def test_an_installed_kit_checks_the_host(installed):
    done = installed("doctor")
    assert done.returncode == 0, done.stderr
    assert "gpu_count_matches_profile" in done.stdout


def test_an_installed_kit_renders_a_recorded_run_and_runs_as_a_module(installed):
    with tarfile.open(RECORDED_RUN) as archive:
        archive.extractall(installed.folder, filter="data")
    done = installed(
        "-m", "kit", "report", "runh100", "--format", "html", "--out", "report", program=(installed.python,)
    )
    assert done.returncode == 0, done.stderr
    html = (installed.folder / "report" / "report.html").read_text()
    stylesheet = (ROOT / "report_templates" / "style.css").read_text()
    assert "llama2-7b" in html and stylesheet.splitlines()[0] in html


def test_an_installed_kit_lists_the_images_and_says_their_build_contexts_are_in_a_checkout(installed):
    done = installed("images", "list")
    assert done.returncode == 0, done.stderr
    assert "context not here: a source checkout builds it" in done.stdout
