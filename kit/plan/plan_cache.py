"""A profile's plan kept as JSON in the kit's cache, so that `kit list` answers without pydantic.

Validating the protocol means importing pydantic and building its models, two thirds of what
`kit list --profile paper` took; the plan they yield changes only when the manifests, the kit's
code, or pydantic and PyYAML change. So an entry is named by the digest of all of them (every
manifest and every module of the kit: 4 ms to read and hash, against guessing which modules a
plan depends on) and of the profile and the host GPUs (count and memory) it was built for: any change names
another entry, and the protocol is validated again, its errors reported as before. Nothing
invalid is ever kept: an entry is written only after the whole protocol validated, sealed
(kit.cache.keep); one that is not as the kit kept it (edited, cut short, a link) is said in one
line on stderr and built again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import kit
from kit.cache import CacheEntryInvalid, cache_dir, drop_oldest, keep, read_kept
from kit.files.names import NAME_PATTERN
from kit.files.regular import MANIFEST_LIMIT, MiB, parsed_json, read_regular
from kit.manifest import manifests_dir

# Entries kept (about half a megabyte each for the paper profile): every edit of the protocol
# makes new ones, and the oldest go when one is written.
ENTRIES_KEPT = 16
PLAN_LIMIT = 64 * MiB  # bytes of an entry read at most: the paper profile's is about half a megabyte
STEPS = ("warmup_steps", "measured_steps")  # a case's step counts, which `kit list` shows


def _dependency_file(package: str, name: str) -> Path:
    """A file of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    return Path(spec.submodule_search_locations[0]) / name  # type: ignore[union-attr,index]


def plan_key(protocol_file: Path, profile: str, host_gpus: int | None, gpu_memory_bytes: int | None = None) -> str:
    """The digest of everything a plan is built from; pydantic's and PyYAML's versions are in
    the files hashed."""
    package = Path(kit.__file__).parent
    sources = [
        protocol_file,
        *sorted(set(protocol_file.parent.glob("*.yaml")) - {protocol_file}),
        *sorted(package.rglob("*.py")),
        _dependency_file("pydantic", "version.py"),
        _dependency_file("yaml", "__init__.py"),
    ]
    digest = hashlib.sha256(f"{profile}\0{host_gpus}\0{gpu_memory_bytes}".encode())
    for source in sources:  # a FIFO or a link to /dev/zero named notes.yaml is refused, not read
        digest.update(b"\0" + read_regular(source, MANIFEST_LIMIT))
    return digest.hexdigest()


def plan_data(profile: str, host_gpus: int | None, gpu_memory_bytes: int | None = None) -> dict:
    """The plan of `profile` as `Plan.model_dump(mode="json")` (fitted to `host_gpus` of
    `gpu_memory_bytes` as
    kit.plan.protocol.build_plan fits it), from the cache where an entry for the same inputs is there;
    else the protocol is loaded and validated (a ManifestError as ever), and the entry written."""
    protocol_file = manifests_dir() / "protocol.yaml"
    try:
        entry = cache_dir() / "plans" / f"{plan_key(protocol_file, profile, host_gpus, gpu_memory_bytes)}.json"
    except OSError:  # no protocol file, an unreadable one, or an odd file beside it: loading says what matters
        entry = None
    if entry is not None:
        data = _kept_plan(entry)
        if data is not None:
            return data
    from kit.plan.protocol import build_plan, load_protocol

    plan = build_plan(
        load_protocol(protocol_file),
        profile,
        path=protocol_file,
        host_gpus=host_gpus,
        gpu_memory_bytes=gpu_memory_bytes,
    )
    data = plan.model_dump(mode="json")
    if entry is not None:
        try:
            keep(entry, json.dumps(data).encode())
            drop_oldest(entry.parent, ENTRIES_KEPT)
        except OSError:
            pass  # a cache that cannot be written costs time, not the answer
    return data


def _kept_plan(entry: Path) -> dict | None:
    """The plan kept at `entry`; None where there is none, or (said on stderr) where what is
    there is not the kit's."""
    try:
        kept = read_kept(entry, PLAN_LIMIT)
        if kept is None:
            return None
        data = parsed_json(kept)
        if reads_as_plan(data):
            return data
        problem = "not a plan"
    except (CacheEntryInvalid, ValueError) as exc:
        problem = str(exc)
    print(f"kit: plan cache entry {entry} not used ({problem}); the plan is built again", file=sys.stderr)
    return None


def reads_as_plan(data: object) -> bool:
    """Whether a cache entry holds what `kit list` reads of a Plan (an entry is JSON anyone who
    can write the cache could have put there): the fields it shows, of their types, and only
    names kit.files.names accepts, so that nothing shown or used is a path out of a folder."""
    if not (
        isinstance(data, dict)
        and isinstance(data.get("profile"), str)
        and NAME_PATTERN.fullmatch(data["profile"])
        and isinstance(data.get("description"), str)
        and isinstance(data.get("cases"), list)
    ):
        return False
    return all(_reads_as_case(case) for case in data["cases"])


def _reads_as_case(case: object) -> bool:
    if not isinstance(case, dict) or not isinstance(case.get("params"), dict):
        return False
    names = [case.get(key) for key in ("id", "stage", "image", "method")] + [case["model"]] * (
        case.get("model") is not None
    )
    counts = [case.get("gpus"), case["params"].get("runs")] + [
        case["params"][key] for key in STEPS if key in case["params"]
    ]
    return (
        all(isinstance(name, str) and NAME_PATTERN.fullmatch(name) for name in names)
        and all(type(count) is int and count >= 0 for count in counts)
        and case.get("device") in ("cuda", "cpu")
        and isinstance(case.get("workload"), str)
    )


def case_view(data: dict) -> SimpleNamespace:
    """A case of `plan_data` read as kit.plan.protocol.Case reads (case.gpus, case.params.runs, the
    step parameters and soak of a case), for what only shows or sorts cases (kit.plan.view,
    kit.plan.fit.skip_reason, kit.plan.estimate)."""
    params = SimpleNamespace(**data["params"])
    step = params if data["params"].get("kind") in ("train", "profile") else None
    soak = data["params"].get("soak")
    return SimpleNamespace(
        **{**data, "params": params, "step": step, "soak": SimpleNamespace(**soak) if soak else None}
    )


def profile_names() -> list[str]:
    """The protocol's profiles, read without its models (shell completion); none where it cannot be read."""
    from kit.manifest import ManifestError, read_yaml

    try:
        protocol = read_yaml(manifests_dir() / "protocol.yaml")
    except ManifestError:
        return []
    profiles = protocol.get("profiles") if isinstance(protocol, dict) else None
    return [name for name in profiles or () if isinstance(name, str)]
