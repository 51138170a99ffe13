"""Loading the YAML manifests into typed models, with errors a person can act on.

Every manifest (protocol, hardware, environment, references, images lock) goes through
`load_manifest`, so a malformed file always yields one line naming the file, the key and the
reason, and never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)

MANIFESTS_ENV = "KIT_MANIFESTS"
# libyaml's safe loader where PyYAML was built with it: the same documents, parsed about 10x faster
# (every command reads the protocol before it answers).
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(Exception):
    """A manifest that cannot be used: which file, which key, and why."""

    def __init__(self, path: Path | str, key: str, reason: str):
        self.path, self.key, self.reason = str(path), key, reason
        super().__init__(f"{self.path}: {key or '(top level)'}: {reason}")


def manifests_dir() -> Path:
    """The manifests folder: $KIT_MANIFESTS, else the one beside the package (source checkout)."""
    configured = os.environ.get(MANIFESTS_ENV)
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent.parent / "manifests"


def _key_path(location: tuple) -> str:
    return ".".join(str(part) for part in location)


def read_yaml(path: Path) -> object:
    """Parse one YAML file; a missing file or a syntax error becomes a ManifestError."""
    if not path.is_file():
        raise ManifestError(path, "", "file not found")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(path, where, f"invalid YAML: {problem}") from None


def validate(path: Path, data: object, model: type[M]) -> M:
    """Validate parsed data against a model, reporting the first error as one line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ManifestError(path, _key_path(first["loc"]), first["msg"]) from None


def load_manifest(path: Path, model: type[M]) -> M:
    """Read and validate one manifest file."""
    return validate(path, read_yaml(path), model)
