"""Independent pieces of report work on the machine's other cores, in forked processes.

WeasyPrint is single-threaded and takes most of a report's time: the PDF's parts are printed
at once (kit.report.printer), and the Python work before them (hashing the evidence, reading the
runs, drawing each stage's charts) is split over the cores too.
A forked child inherits its piece's inputs; only the result (or the exception) is pickled back."""

from __future__ import annotations

import copyreg
import multiprocessing
import os
import pickle
import signal
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the platform tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def in_parallel(pieces: Sequence[Callable[[], T]]) -> list[T]:
    """Each piece's result, in the pieces' order. Forked children take pieces from the front,
    this process from the back, so that with two pieces the last stays here and its result is
    not pickled. A piece that raised raises here with its type and message (the first in order
    where several did), after every piece has finished. With one CPU or one piece, no fork: the
    pieces run here in order and the first exception stops them."""
    workers = min(len(pieces), usable_cpus())
    if workers <= 1:
        return [piece() for piece in pieces]
    context = multiprocessing.get_context("fork")
    bounds = context.Array("i", [0, len(pieces)])  # [next from the front, one past the next from the back]

    def take(from_front: bool) -> int | None:
        with bounds.get_lock():
            if bounds[0] >= bounds[1]:
                return None
            if from_front:
                bounds[0] += 1
                return bounds[0] - 1
            bounds[1] -= 1
            return bounds[1]

    def work(from_front: bool) -> dict[int, tuple[bool, Any]]:
        """(True, result) or (False, exception) of each piece taken. A child hands back even what
        is not an Exception (WeasyPrint's refusal to fetch is a BaseException); this process lets
        such an exception (Ctrl-C) through at once."""
        done: dict[int, tuple[bool, Any]] = {}
        while (index := take(from_front)) is not None:
            try:
                done[index] = (True, pieces[index]())
            except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
                if not from_front and not isinstance(exc, Exception):
                    raise
                done[index] = (False, portable(exc))
        return done

    def child(sender) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is this process's to handle: it ends the children
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # and ending one ends it, whatever this process does on SIGTERM
        sender.send(work(from_front=True))
        sender.close()

    children = []
    try:
        for _ in range(workers - 1):
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(target=child, args=(sender,))
            process.start()
            sender.close()
            children.append((process, receiver))
        outcomes = work(from_front=False)
        for process, receiver in children:
            try:
                outcomes.update(receiver.recv())
            except EOFError:
                process.join()
                raise ChildProcessError(f"a forked piece of report work died (exit code {process.exitcode})") from None
            process.join()
    finally:
        for process, receiver in children:
            receiver.close()
            if process.is_alive():  # this process was interrupted: its children's work is of no use
                process.terminate()
                process.join()
    for ok, value in (outcomes[index] for index in range(len(pieces))):
        if not ok:
            raise value
    return [outcomes[index][1] for index in range(len(pieces))]


def both_in_parallel(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """in_parallel of two pieces that return different types, each result typed as its piece's
    (a list's one type parameter cannot tell them apart)."""
    a, b = in_parallel([first, second])
    return cast(A, a), cast(B, b)


def portable(exc: BaseException) -> BaseException:
    """The exception as the parent will raise it, of its own type (which the CLI catches by type),
    with the child's traceback as a note. Pickle rebuilds an exception by calling its class with
    its `args`, which fails for one whose __init__ takes other arguments (kit.manifest's
    ManifestError takes three, and its args hold one message): such a type is pickled from its
    args and attributes instead, without calling __init__. Only what still does not pickle (an
    attribute that cannot be) becomes a RuntimeError naming its type and message."""
    exc.add_note("raised in a forked process:\n" + "".join(traceback.format_exception(exc)).rstrip())
    if not _survives_pickling(exc):
        copyreg.pickle(type(exc), _by_state)
        if not _survives_pickling(exc):
            return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def _survives_pickling(exc: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - whatever fails to pickle or to be rebuilt
        return False
    return True


def _by_state(exc: BaseException) -> tuple:
    return _rebuilt, (type(exc), exc.args, vars(exc))


def _rebuilt(kind: type[BaseException], args: tuple, state: dict) -> BaseException:
    exc = kind.__new__(kind, *args)
    exc.args = args
    vars(exc).update(state)
    return exc
