"""kit.files.atomic: a file the kit writes is one it created, never one a link planted in its
place points to, nor a FIFO that would hold the write for ever."""

from __future__ import annotations

import os

import pytest

from kit.files.atomic import UnsafeWrite, appending, atomic_write_text, write_into


@pytest.fixture
def victim(tmp_path):
    """A file of someone else's, outside the folder the kit writes into."""
    path = tmp_path / "elsewhere" / "bashrc"
    path.parent.mkdir()
    path.write_text("the owner's own\n")
    return path


def test_a_link_planted_where_a_file_goes_is_replaced_and_its_target_left_alone(tmp_path, victim):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").symlink_to(victim)
    atomic_write_text(out / "report.json", "{}")
    assert victim.read_text() == "the owner's own\n"
    assert not (out / "report.json").is_symlink() and (out / "report.json").read_text() == "{}"
    assert sorted(os.listdir(out)) == ["report.json"]  # no temporary left


@pytest.mark.parametrize(
    "plant",
    [
        pytest.param(lambda path, victim: path.symlink_to(victim), id="a symbolic link"),
        pytest.param(lambda path, victim: os.link(victim, path), id="a hard link"),
        pytest.param(lambda path, victim: os.mkfifo(path), id="a FIFO"),
        pytest.param(lambda path, victim: path.mkdir(), id="a folder"),
    ],
)
def test_a_log_or_a_temporary_planted_as_a_link_or_a_fifo_is_refused_not_written(tmp_path, victim, plant):
    for target, write in (
        (tmp_path / "log.txt", lambda path: appending(path).write("line\n")),
        (tmp_path / ".report.pdf.x1y2.tmp", lambda path: write_into(path, b"%PDF")),
    ):
        plant(target, victim)
        with pytest.raises(UnsafeWrite) as refused:
            write(target)  # a FIFO would block an open() for writing until a reader came
        assert refused.value.filename == str(target)
        assert victim.read_text() == "the owner's own\n"


def test_a_log_is_appended_to_and_keeps_its_name(tmp_path):
    with appending(tmp_path / "log.txt") as log:
        log.write("first\n")
        assert log.name == str(tmp_path / "log.txt")  # a launcher is given the log by its name
    with appending(tmp_path / "log.txt") as log:
        log.write("second\n")
    assert (tmp_path / "log.txt").read_text() == "first\nsecond\n"
