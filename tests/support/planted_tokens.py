"""Credentials planted in the environment `kit` runs in, and the files of a run that hold one.

Each value is unique, so that any copy of it anywhere is found: the test runs `kit` with them in
its environment (executors hand the Hugging Face tokens on to the processes and containers they
start) and then reads every file of the run, compressed ones decompressed, and the report's PDF as
its text."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

PLANTED = {
    "HF_TOKEN": "hf_plantedTokenValue0123456789abcdef",
    "HUGGING_FACE_HUB_TOKEN": "hf_plantedHubToken9876543210fedcba",
    "WANDB_API_KEY": "planted-wandb-key-5f2c1e9d",
    "MY_SERVICE_SECRET": "planted-service-secret-77aa",
    "NCCL_PLANTED_TOKEN": "hf_plantedInAnNcclVariable0123456789",  # the fingerprints record NCCL_ variables
    "NCCL_PLANTED_URL": "postgres://kit:planted-db-password@db/x",
}


def files_holding_a_token(run: Path, *outputs: str) -> list[tuple[str, str]]:
    """(file, variable) for each file of the run, and each of `outputs` (the command's own
    stdout and stderr), that holds a planted value."""
    texts = {
        str(path.relative_to(run)): gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        for path in run.rglob("*")
        if path.is_file()
    }
    if (run / "report.pdf").exists():
        texts["report.pdf (text)"] = subprocess.run(
            ["pdftotext", str(run / "report.pdf"), "-"], capture_output=True, check=True
        ).stdout
    texts.update({f"output {i}": output.encode() for i, output in enumerate(outputs)})
    return [
        (name, variable)
        for name, content in texts.items()
        for variable, value in PLANTED.items()
        if value.encode() in content
    ]
