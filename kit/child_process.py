"""A child process that never outlives the kit: an engine server, a container's client, a
workload's fork server each ask the kernel to end them when the process that started them dies
(a kit killed with SIGKILL runs no cleanup of its own)."""

from __future__ import annotations

import ctypes
import signal


def die_with_parent() -> None:
    """Runs in a child before exec: SIGTERM it when the parent (kit) dies, whatever the cause."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
