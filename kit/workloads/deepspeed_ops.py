"""DeepSpeed's JIT-built ops, made once into the kit's cache and loaded from there.

DeepSpeed builds an op the first time it needs one (on CPU: the shared-memory comm op at every
init; CPUAdam for offload; FusedAdam on a GPU), through torch's JIT loader, in place, guarded by
a lock file that a killed build leaves behind: every later process then waits on it forever.
The kit builds each op the case needs like any other cache entry (kit.cache.ensure_entry: one
process, a staging folder, checked by loading it, renamed into place, marker last), then loads
the built module itself and hands it to DeepSpeed, whose own loader then has nothing to build.
An image that ships the op prebuilt (DS_BUILD_OPS) keeps using its own.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from kit.cache import CacheEntryInvalid, ensure_entry
from kit.plan.protocol import TrainParams
from kit.workloads.harness import SetupFailed, Unavailable

BUILD_TIMEOUT_S = 1800


def needed_ops(params: TrainParams, device: str, client_optimizer: bool) -> list[str]:
    """The op builders DeepSpeed will ask for in this case (names of deepspeed.ops.op_builder)."""
    ops = ["ShareMemCommBuilder"] if device == "cpu" else []  # deepspeed.comm builds it at init on CPU
    if not client_optimizer:
        ops.append("CPUAdamBuilder" if params.offload else "FusedAdamBuilder")
    return ops


def extensions_root() -> Path:
    """One folder per Python and torch build: an op built for another torch does not load."""
    import torch

    from kit.cache import torch_extensions_dir

    base = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or torch_extensions_dir())
    return base / f"py{sys.version_info.major}{sys.version_info.minor}-torch{torch.__version__}"


def _builder(name: str):
    from deepspeed.accelerator import get_accelerator

    return get_accelerator().create_op_builder(name)


def _import_built(name: str, folder: Path):
    """The op's Python module from its built library (what torch's JIT loader ends with)."""
    library = folder / f"{name}.so"
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None or not library.is_file():
        raise ImportError(f"{library} is missing")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _without_data_cap() -> None:
    """In the compiler's process: lift a CPU case's data cap (RLIMIT_DATA, set soft with the hard
    limit left open) so that the cap binds the measured process and not a one-off build of an op."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))


def _build_into(staging: Path, builder_name: str, op_name: str, say) -> dict:
    """Build the op in a fresh process (torch's JIT keeps per-process state) into `staging`."""
    scratch = staging / ".torch-build"
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(scratch)}
    say(f"building DeepSpeed op {op_name} (once; cached)")
    done = subprocess.run(
        [sys.executable, "-m", "kit.workloads.deepspeed_ops", builder_name],
        env=env,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        preexec_fn=_without_data_cap,
    )
    if done.returncode != 0:
        raise SetupFailed(f"building DeepSpeed op {op_name} failed: {(done.stderr or done.stdout)[-1500:]}")
    for path in (scratch / op_name).iterdir():
        if path.name != "lock":
            path.rename(staging / path.name)
    shutil.rmtree(scratch)
    _import_built(op_name, staging)  # the check: it loads
    return {"kind": "deepspeed-op", "op": op_name, "builder": builder_name}


def cuda_compiler() -> Path | None:
    """The nvcc a CUDA op would be JIT-built with (torch's CUDA_HOME), or None: a CUDA build of
    torch from the package index ships the CUDA runtime, not the compiler."""
    from torch.utils.cpp_extension import CUDA_HOME

    nvcc = Path(CUDA_HOME) / "bin" / "nvcc" if CUDA_HOME else None
    return nvcc if nvcc is not None and nvcc.is_file() else None


def prepare_ops(names: list[str], say=print) -> dict[str, str]:
    """Make sure every op named is built and loaded; op name -> where it came from. A CUDA op
    that is neither prebuilt nor buildable here makes the case unavailable, saying so, rather
    than failing in DeepSpeed's own build halfway through its initialisation."""
    import deepspeed
    from deepspeed.git_version_info import installed_ops
    from deepspeed.ops.op_builder.builder import CUDAOpBuilder, OpBuilder

    root = extensions_root()
    found = {}
    for builder_name in names:
        builder = _builder(builder_name)
        if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            continue  # DeepSpeed will not ask for it on this accelerator
        op_name = builder.name
        if installed_ops.get(op_name, False):
            found[op_name] = "prebuilt in this environment"
            continue
        if isinstance(builder, CUDAOpBuilder) and cuda_compiler() is None:
            raise Unavailable(
                f"DeepSpeed's {op_name} op is not prebuilt in this environment and there is no CUDA "
                "compiler (nvcc under CUDA_HOME) to build it: install the CUDA toolkit (or set CUDA_HOME "
                "to one), or run in the train image (--executor docker), which has it prebuilt"
            )
        target = root / op_name

        def build(staging: Path, builder: str = builder_name, op: str = op_name) -> dict:  # this op's, bound here
            return _build_into(staging, builder, op, say)

        ensure_entry(target, build, f"DeepSpeed op {op_name}", say)
        try:
            module = _import_built(op_name, target)
        except ImportError as exc:  # the right size, yet it does not load (another torch)
            raise CacheEntryInvalid(f"{target}: {exc}; remove the folder to rebuild it") from exc
        OpBuilder._loaded_ops[op_name] = module  # DeepSpeed's loader returns it instead of building
        found[op_name] = str(target)
    return found


if __name__ == "__main__":  # the building process of `_build_into`
    _builder(sys.argv[1]).load(verbose=False)
