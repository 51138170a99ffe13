"""How an engine starts on this host without its image: the command the image would run, found
in an environment of this host.

Where the engine's publisher ships a Python package (vLLM: its CPU build on a CPU host, its
CUDA wheel on a GPU host), the engine's environment is one the kit makes
(manifests/images.lock.yaml, `environments`): a virtual environment in the kit's cache with the
pinned distribution, made once like every cache entry (kit.cache.ensure_entry), in place since
a virtual environment cannot move; pip reads its usual variables (PIP_INDEX_URL, PIP_FIND_LINKS,
PIP_NO_INDEX) for a host with a mirror or a folder of wheels. An engine published as an image
only (TGI, LightLLM) must be installed here by the user (on PATH, or its module importable by
this Python), else the case is unavailable and says how to run it in its image instead.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kit.cache import cache_dir, ensure_entry
from kit.images import LockedEnvironment, load_lock
from kit.plan.protocol import Case
from kit.serve.engines import Engine
from kit.workloads.harness import Unavailable

INSTALL_TIMEOUT_S = 3600


def environment_for(engine: Engine, device: str) -> tuple[str, LockedEnvironment] | None:
    found = [
        (name, env)
        for name, env in load_lock().environments.items()
        if env.engine == engine.name and env.device == device
    ]
    return found[0] if found else None


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed: {(done.stderr or done.stdout).strip()[-1500:]}")


def make_environment(folder: Path, name: str, env: LockedEnvironment, say) -> dict:
    """A virtual environment with the pinned distribution, the broken extras taken out, and the
    dist-info the engine's command needs; checked by asking the command for its version."""
    say(f"making the {name} environment ({env.requirement}; minutes, once)")
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True, timeout=600)
    python = folder / "bin" / "python"
    # --no-compile: byte-compiling all of torch and vLLM up front took 45 s of the 100 s install on
    # 2 cores; the engine's first start compiles what it imports (its environment lets it write).
    _pip(python, "install", "--quiet", "--no-compile", env.requirement)
    if env.remove:
        _pip(python, "uninstall", "--yes", "--quiet", *env.remove)
    if env.provides:
        provided, version = env.provides.split("==")
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        info = Path(purelib) / f"{provided}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {provided}\nVersion: {version}\n")
        (info / "INSTALLER").write_text("kit\n")
    command = folder / "bin" / env.entrypoint[0]
    writes_bytecode = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([str(command), "--version"], capture_output=True, text=True, timeout=300, env=writes_bytecode)
    if done.returncode != 0:
        raise RuntimeError(f"{command} --version failed: {(done.stderr or done.stdout).strip()[-800:]}")
    version = done.stdout.strip().splitlines()[-1]
    say(f"{name}: {env.entrypoint[0]} {version}")
    return {"kind": "engine-environment", "environment": name, "requirement": env.requirement, "version": version}


def local_command(engine: Engine, case: Case, say) -> tuple[list[str], str | None, str]:
    """The engine's entrypoint as a command of this host, its version where known, and the bin
    folder to put first on its PATH."""
    found = environment_for(engine, case.device)
    if found is not None:
        name, env = found
        folder = cache_dir() / "engines" / f"{name}-{env.requirement.split('==')[1]}"
        try:
            marker = ensure_entry(
                folder,
                lambda target: make_environment(target, name, env, say),
                f"engine environment {name}",
                say,
                in_place=True,
            )
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            raise Unavailable(f"the {name} environment could not be made: {exc}") from None
        bin_dir = folder / "bin"
        return [str(bin_dir / env.entrypoint[0]), *env.entrypoint[1:]], marker.get("version"), str(bin_dir)
    program, rest = engine.entrypoint[0], list(engine.entrypoint[1:])
    if program in ("python", "python3"):
        module = rest[1] if rest[:1] == ["-m"] else None
        if module and importlib.util.find_spec(module.split(".")[0]) is not None:
            return [sys.executable, *rest], None, str(Path(sys.executable).parent)
    elif on_path := shutil.which(program):
        return [on_path, *rest], None, str(Path(on_path).parent)
    raise Unavailable(
        f"{engine.label} is published as an image only and is not installed here ({' '.join(engine.entrypoint)}): "
        f"it runs in its image (kit images pull {engine.image}, then --executor docker)"
    )
