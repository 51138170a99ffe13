"""kit.report.forked: pieces of report work in forked children, their results and exceptions back
in this process as if they had run here."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from kit.manifest import ManifestError
from kit.report import forked
from kit.rundir.directory import UnreadableRun
from kit.rundir.evidence import EvidenceError


@pytest.mark.parametrize(
    "error",
    [
        EvidenceError(Path("/runs/a"), ["changed: cases/pretrain.tiny-llama.naive.g2/result.json"]),
        UnreadableRun("/runs/a/run.json: plan: Field required"),
        ValueError("--compare takes 'reference' or a run directory; /runs/b has no run.json"),
        ManifestError(
            Path("/m/hardware.yaml"), "gpus.a100.memory.value", "Input should be a valid number"
        ),  # __init__ takes 3
    ],
    ids=type,
)
def test_a_piece_that_raises_in_a_forked_child_raises_here_with_its_type_and_message(error, monkeypatch):
    """On two cores the first piece runs in a child (children take from the front) while this
    process holds the last one until the child has started."""
    monkeypatch.setattr(forked, "usable_cpus", lambda: 2)
    context = multiprocessing.get_context("fork")
    child_started, raised_by = context.Event(), context.Value("i", 0)

    def failing():
        raised_by.value = os.getpid()
        child_started.set()
        raise error

    with pytest.raises(type(error)) as raised:
        forked.in_parallel([failing, lambda: child_started.wait(timeout=60)])
    assert raised_by.value not in (0, os.getpid()), "the piece ran here, not in a forked child"
    assert (
        type(raised.value) is type(error)
        and str(raised.value) == str(error)
        and vars(raised.value).keys() >= vars(error).keys()
    )
    assert "raised in a forked process" in "".join(raised.value.__notes__)


def test_results_come_back_in_the_pieces_order_and_one_cpu_forks_nothing(monkeypatch):
    monkeypatch.setattr(forked, "usable_cpus", lambda: 2)
    assert forked.in_parallel([lambda n=n: n * n for n in range(7)]) == [n * n for n in range(7)]
    monkeypatch.setattr(forked, "usable_cpus", lambda: 1)
    ran = []

    def second():
        ran.append(os.getpid())
        raise ValueError("second")

    with pytest.raises(ValueError, match="second"):
        forked.in_parallel([lambda: ran.append(os.getpid()), second, lambda: ran.append("third")])
    assert ran == [os.getpid(), os.getpid()]
