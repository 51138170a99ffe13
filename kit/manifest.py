"""Loading the YAML manifests into typed models, with errors a person can act on.

Every manifest (protocol, hardware, environment, references, images lock) goes through
`load_manifest`, so a malformed file always yields one line naming the file, the key and the
reason, and never a traceback.

PyYAML and pydantic are imported when a manifest is read, not with this module: where the
manifests are (`manifests_dir`) is asked by commands that answer from the plan cache
(kit.plan.plan_cache) without reading any.
"""

from __future__ import annotations

import functools
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound="BaseModel")

MANIFESTS_ENV = "KIT_MANIFESTS"


class ManifestError(Exception):
    """A manifest that cannot be used: which file, which key, and why."""

    def __init__(self, path: Path | str, key: str, reason: str):
        self.path, self.key, self.reason = str(path), key, reason
        super().__init__(f"{self.path}: {key or '(top level)'}: {reason}")


def package_data(folder: str) -> Path:
    """A folder the kit package ships (manifests, report templates), wherever the package is: an
    installed wheel's own copy, or in a source checkout the folder at its top (kit/<folder> links
    to it). pip installs a package as files, so the resource is a folder on disk."""
    from importlib.resources import files

    return Path(str(files("kit") / folder)).resolve()


def manifests_dir() -> Path:
    """The manifests folder: $KIT_MANIFESTS, else the one the package ships."""
    configured = os.environ.get(MANIFESTS_ENV)
    if configured:
        return Path(configured)
    return package_data("manifests")


def _key_path(location: tuple) -> str:
    return ".".join(str(part) for part in location)


def safe_loader():
    """libyaml's safe loader where PyYAML was built with it: the same documents, parsed about 10x
    faster (every command reads the protocol before it answers)."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def unique_key_loader():
    """The safe loader, refusing a key given twice in one mapping (YAML keeps the last silently,
    so a pasted block would override what is written above it)."""
    import yaml

    class UniqueKeyLoader(safe_loader()):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:  # the keys as written; those a merge (<<: *anchor) brings may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r}", key_node.start_mark
                    )
                seen.add(key_node.value)
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


MAX_DEPTH = 64  # far beyond any manifest's; libyaml's composer recurses in C and crashes the process past ~30000


def _refuse_deep_nesting(text: str) -> None:
    """Count the nesting from the parser's events (an explicit stack, no recursion) before the
    document is composed, which recurses; a RecursionError says it is too deep."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=safe_loader()):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise RecursionError
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def read_yaml(path: Path) -> object:
    """Parse one YAML file; a missing or unreadable file (or one that is not a regular file, or
    too large), a syntax error, a duplicate key, absurd nesting or a number too long to read
    becomes a ManifestError."""
    import yaml

    from kit.files.regular import MANIFEST_LIMIT, read_regular_text

    if not path.exists():
        raise ManifestError(path, "", "file not found")
    try:
        text = read_regular_text(path, MANIFEST_LIMIT)
        _refuse_deep_nesting(text)
        return yaml.load(text, Loader=unique_key_loader())
    except UnicodeDecodeError as exc:
        raise ManifestError(path, f"byte {exc.start}", "not UTF-8 text (a binary file?)") from None
    except OSError as exc:
        raise ManifestError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except RecursionError:
        raise ManifestError(path, "", f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # int() of a number beyond Python's digit limit, and the like
        raise ManifestError(path, "", f"unreadable value: {str(exc).splitlines()[0][:200]}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError(path, where, f"invalid YAML: {problem}") from None


# Every value of a manifest, counted as often as its aliases repeat it (the largest, the hardware
# table, has about 1,000): beyond this, a few lines of anchors ("billion laughs") would take
# hours to validate.
MAX_VALUES = 100_000
# The largest a manifest's number may be (the largest written is 8 GiB in bytes): beyond it an
# integer is no longer exact as a float, and a time or a size means nothing a host can do.
MAX_MAGNITUDE = 2**53


def _as_written(path: Path, data: object) -> object:
    """The parsed YAML with each list a tuple (what a manifest's sequences are), refusing what no
    manifest means: a number that is not finite (.nan, .inf: a bound, a peak or a cap that every
    comparison passes or fails), and what its aliases expand into beyond MAX_VALUES values or
    MAX_DEPTH levels (an alias of itself among them). Counted first, with a stack, in the
    document's order, so that the first offender is named with its key."""
    stack: list[tuple[object, tuple, int]] = [(data, (), 0)]
    count = 0
    while stack:
        value, location, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ManifestError(
                path, _key_path(location), f"more than {MAX_VALUES} values once its aliases are expanded"
            )
        if depth > MAX_DEPTH:
            raise ManifestError(
                path, _key_path(location), f"nested more than {MAX_DEPTH} levels deep once its aliases are expanded"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ManifestError(path, _key_path(location), f"{value} is not a finite number")
        if isinstance(value, (int, float)) and abs(value) > MAX_MAGNITUDE:
            written = str(value) if len(str(value)) <= 24 else f"a number of {len(str(value)):,} digits"
            raise ManifestError(path, _key_path(location), f"{written} is larger than any a manifest means (2**53)")
        if isinstance(value, dict):
            stack += reversed([(item, (*location, key), depth + 1) for key, item in value.items()])
        elif isinstance(value, list):
            stack += reversed([(item, (*location, index), depth + 1) for index, item in enumerate(value)])
    return _tuples(data)


def _tuples(value: object) -> object:
    if isinstance(value, dict):
        return {key: _tuples(item) for key, item in value.items()}
    if isinstance(value, list):
        return tuple(_tuples(item) for item in value)
    return value


def whole_number(value: object) -> object:
    """For a Literal of numbers, which in pydantic takes `false` and `0.0` for 0, `true` for 1:
    a whole number as written, or a ValueError."""
    if type(value) is not int:
        raise ValueError(f"{value!r} is not a whole number")
    return value


def validate(path: Path, data: object, model: type[M]) -> M:
    """Validate parsed data against a model, reporting the first error as one line. Values are
    read as written (pydantic's strict mode): `"128"` is not a number, `"no"` or `0` not a flag,
    `true` not 1; a manifest's sequences are tuples."""
    from pydantic import ValidationError

    try:
        return model.model_validate(_as_written(path, data), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ManifestError(path, _key_path(first["loc"]), first["msg"]) from None


def load_manifest(path: Path, model: type[M]) -> M:
    """Read and validate one manifest file."""
    return validate(path, read_yaml(path), model)


def first_problem(exc: ValidationError) -> str:
    """The first thing pydantic found wrong, in one line: the key, and what."""
    first = exc.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc']) or '(top level)'}: {first['msg']}"
