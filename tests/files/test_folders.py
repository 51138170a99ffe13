"""The check of a folder the kit is told to write in (kit.files.folders), as two kits started at once
meet it: each may remove the new folder its check made while the other is writing in it."""

from __future__ import annotations

import subprocess
import sys

CHECKING = """
import sys
from pathlib import Path
from kit.files.folders import writable_folder_problem
root = Path(sys.argv[1])
problems = [writable_folder_problem(root / str(index) / "run") for index in range(300)]
print(sum(problem is not None for problem in problems), next((p for p in problems if p), ""))
"""


def test_two_processes_checking_the_same_new_folders_at_once_each_find_them_writable(tmp_path):
    checking = [
        subprocess.Popen([sys.executable, "-c", CHECKING, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    said = [process.communicate(timeout=120)[0].strip() for process in checking]
    assert all(line.startswith("0 ") or line == "0" for line in said), said
    # what the checks made, they removed, but for a folder the other was writing in at that moment
    assert all(path.is_dir() for path in tmp_path.rglob("*"))
