"""A test that would hang ends in a failure instead, where a hang would stop the session."""

from __future__ import annotations

import contextlib
import signal


class RanTooLong(BaseException):
    """Not an Exception: no `except Exception` (nor OSError, as TimeoutError is) of the kit takes it."""


@contextlib.contextmanager
def ends_within(seconds: int, what: str):
    """Fails what runs in it after `seconds` (SIGALRM), where a hang would stop the session."""

    def too_long(signum, frame):
        raise RanTooLong(f"{what} ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
