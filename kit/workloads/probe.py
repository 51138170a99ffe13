"""Framework versions inside an image, printed as one JSON object.

Executors run `python -m kit.workloads.probe` once per image; the host reads the last line of
stdout into kit.host.fingerprint.ImageProbe. Each framework is imported inside try/except, so a
missing one is reported as not installed and a broken one (an ABI mismatch, a missing CUDA
library) as an import error, instead of ending the probe.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import json
import os
import platform
import sys

from kit.host.resources import cuda_compiler_path

# distribution name -> module name
FRAMEWORKS = {
    "deepspeed": "deepspeed",
    "transformers": "transformers",
    "peft": "peft",
    "bitsandbytes": "bitsandbytes",
    "flash-attn": "flash_attn",
    "vllm": "vllm",
}


@contextlib.contextmanager
def _stdout_to_stderr():
    """Send everything written to stdout to stderr, C libraries included.

    Some frameworks print banners on import (bitsandbytes did, for instance); the JSON line must
    be the only thing on stdout.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


def cudnn_version_text(encoded: int) -> str:
    """cuDNN's version integer: major*1000 + minor*100 + patch in 8.x, major*10000 + ... in 9."""
    major, rest = divmod(encoded, 10000 if encoded >= 90000 else 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _torch_versions(report: dict) -> None:
    try:
        import torch
    except Exception as exc:  # not installed, or a broken build: both are facts to report
        if not isinstance(exc, ModuleNotFoundError) or exc.name != "torch":
            report["import_errors"]["torch"] = _reason(exc)
        return
    report["torch"] = torch.__version__
    report["cuda_runtime"] = torch.version.cuda
    try:
        encoded = torch.backends.cudnn.version()
        report["cudnn"] = cudnn_version_text(encoded) if encoded else None
    except Exception as exc:
        report["import_errors"]["cudnn"] = _reason(exc)
    try:
        # A CPU build of torch has no NCCL: the call raises rather than answering None.
        report["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    except Exception as exc:
        if torch.version.cuda:
            report["import_errors"]["nccl"] = _reason(exc)


def probe() -> dict:
    """Python, torch, CUDA runtime, cuDNN, NCCL and the frameworks' versions in this Python."""
    report: dict = {
        "python": platform.python_version(),
        "torch": None,
        "cuda_runtime": None,
        "cudnn": None,
        "nccl": None,
        "packages": {},
        "cuda_compiler_found": cuda_compiler_path() is not None,
        "import_errors": {},
    }
    with _stdout_to_stderr():
        _torch_versions(report)
        for distribution, module in FRAMEWORKS.items():
            try:
                version = importlib.metadata.version(distribution)
            except importlib.metadata.PackageNotFoundError:
                report["packages"][distribution] = None
                continue
            report["packages"][distribution] = version
            try:
                importlib.import_module(module)
            except Exception as exc:
                report["import_errors"][distribution] = _reason(exc)
    return report


if __name__ == "__main__":
    print(json.dumps(probe(), sort_keys=True))
