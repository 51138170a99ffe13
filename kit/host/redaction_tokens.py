"""Salted tokens in place of identifiers (GPU serials and UUIDs, node names): the same identifier
gives the same token under one salt, so a redacted run still tells its GPUs and nodes apart.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets

from kit.host.fingerprint import Fingerprint

REDACTION_SALT_ENV = "KIT_REDACTION_SALT"


_PROCESS_SALT = secrets.token_bytes(16)


def redaction_salt() -> bytes:
    """$KIT_REDACTION_SALT when set (a resumed run keeps its tokens), else one salt per process."""
    configured = os.environ.get(REDACTION_SALT_ENV)
    return configured.encode() if configured else _PROCESS_SALT


def redaction_token(value: str, salt: bytes) -> str:
    """A stable stand-in for an identifier: the same value and salt always give the same token."""
    return "redacted-" + hmac.new(salt, value.encode(), hashlib.sha256).hexdigest()[:16]


def redact_identifiers(fingerprint: Fingerprint, salt: bytes) -> Fingerprint:
    """Replace the hostname, GPU UUIDs (the health section's too) and serial numbers with salted tokens."""

    def token(value: str | None) -> str | None:
        return None if value is None else redaction_token(value, salt)

    host = fingerprint.host.model_copy(update={"hostname": token(fingerprint.host.hostname)})
    gpus = [
        gpu.model_copy(update={"uuid": token(gpu.uuid), "serial": token(gpu.serial)}) for gpu in fingerprint.gpus.gpus
    ]
    health = fingerprint.health
    if health is not None:
        health = health.model_copy(
            update={"gpus": [gpu.model_copy(update={"uuid": token(gpu.uuid)}) for gpu in health.gpus]}
        )
    return fingerprint.model_copy(
        update={
            "redacted": True,
            "host": host,
            "gpus": fingerprint.gpus.model_copy(update={"gpus": gpus}),
            "health": health,
        }
    )
