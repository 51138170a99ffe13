"""The names that become path components (case folders, cache entries, container names).

One segment of letters, digits, '.', '_', '+', '-', starting with a letter or digit, so that no
name (a case id read back from a run.json or a cache entry, a model of a manifest) can be '..',
hold a '/' or be absolute, and nothing is ever written, removed or shown outside the folder
meant for it. Apart from kit.plan.protocol, so that what answers from the plan cache checks names
without importing pydantic.
"""

from __future__ import annotations

import re

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def checked_name(value: str) -> str:
    if not NAME_PATTERN.fullmatch(value):
        raise ValueError(
            f"{value[:80]!r} is not a usable name (letters, digits, '.', '_', '+', '-'; "
            "starting with a letter or digit; at most 128 characters)"
        )
    return value
