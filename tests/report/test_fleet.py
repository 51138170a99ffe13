"""kit report --fleet: which node of a fleet is unlike the others.

The rule (kit/report/outliers.py) is pure logic and is tested on values written here. The report
itself is tested on real runs only: the smoke profile's 2-process pre-training case run twice
through the real CLI, once as it is and once slowed for real (busy processes competing for the
same cores), and the fleet report must flag the slowed run and not the other.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

from kit.report.fleet import Node, fleet_report
from kit.report.load import load_run
from kit.report.outliers import NodeFigure, judge_fleet

CASE = "pretrain.tiny-llama.naive.g2"


def figure(node: str, *runs: float) -> NodeFigure:
    return NodeFigure(node=node, mean=sum(runs) / len(runs), per_run=list(runs))


def flagged(judged) -> dict[str, tuple[bool, bool]]:
    return {v.node: (v.below_tolerance, v.apart) for v in judged.verdicts if v.flagged or v.apart}


def test_of_two_nodes_only_the_slower_is_flagged():
    judged = judge_fleet([figure("a", 440, 450, 430), figure("b", 250, 260, 240)], tolerance=0.10)
    assert judged.median == 345
    assert flagged(judged) == {"b": (True, True)}
    deviations = {v.node: v.deviation for v in judged.verdicts}
    assert deviations["b"] == pytest.approx(-95 / 345) and deviations["a"] == pytest.approx(95 / 345)


def test_nodes_within_the_tolerance_whose_runs_overlap_are_not_flagged():
    judged = judge_fleet([figure("a", 100, 104, 96), figure("b", 98, 102, 95), figure("c", 101, 97, 99)])
    assert flagged(judged) == {}


def test_one_slow_node_does_not_move_the_median_the_others_are_held_to():
    judged = judge_fleet([figure(name, 100, 101, 99) for name in "abcd"] + [figure("e", 50, 51, 49)])
    assert judged.median == 100
    assert flagged(judged) == {"e": (True, True)}


def test_a_node_faster_than_the_fleet_is_not_flagged():
    judged = judge_fleet([figure("a", 100, 101, 99), figure("b", 100, 102, 98), figure("c", 150, 151, 149)])
    assert flagged(judged) == {}


def test_a_consistent_difference_within_the_tolerance_is_named_as_apart_and_not_flagged():
    judged = judge_fleet([figure("a", 100, 101, 100.5), figure("b", 100.2, 101.5, 100.8), figure("c", 96, 96.5, 97)])
    assert flagged(judged) == {"c": (False, True)}
    assert not any(verdict.flagged for verdict in judged.verdicts)  # by chance once in ten for two sound nodes


def test_a_node_beyond_the_tolerance_is_flagged_even_when_its_runs_overlap():
    judged = judge_fleet(
        [figure("a", 100, 140, 60), figure("b", 100, 100, 100), figure("c", 120, 40, 70)], tolerance=0.10
    )
    assert flagged(judged) == {"c": (True, False)}


def test_single_runs_have_no_spread_to_set_apart():
    judged = judge_fleet([figure("a", 100), figure("b", 99), figure("c", 101, 102)])
    assert flagged(judged) == {}
    assert flagged(judge_fleet([figure("a", 100), figure("b", 80)])) == {"b": (True, False)}


@pytest.mark.parametrize(
    "figures, tolerance",
    [
        ([figure("a", 1.0)], 0.1),
        ([figure("a", 1.0), figure("b", 1.0)], 0.0),
        ([figure("a", 1.0), figure("b", 1.0)], 1.5),
    ],
)
def test_the_rule_refuses_a_fleet_of_one_and_a_tolerance_out_of_range(figures, tolerance):
    with pytest.raises(ValueError):
        judge_fleet(figures, tolerance)


def kit(*args: str, env: dict | None = None, cwd: Path | None = None, **options) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "1000", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, env=environment, cwd=cwd, **options
    )


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "not-a-run").mkdir()
    for args, words in [
        (["report", "--fleet", str(tmp_path / "not-a-run")], "two or more run directories"),
        (["report", "--fleet", str(tmp_path / "not-a-run"), str(tmp_path / "missing")], "is not a run directory"),
        (["report", "--fleet", str(tmp_path / "not-a-run"), str(tmp_path / "not-a-run")], "more than once"),
        (["report", str(tmp_path / "not-a-run"), str(tmp_path / "missing")], "--fleet compares several"),
        (["report", str(tmp_path / "not-a-run"), "--tolerance", "5"], "--tolerance goes with --fleet"),
    ]:
        done = kit(*args)
        assert done.returncode == 2, done
        assert words in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def smoke_run(out: Path, env: dict | None = None, preexec_fn=None) -> None:
    done = kit(
        "run",
        "--profile",
        "smoke",
        "--case",
        CASE,
        "--executor",
        "local",
        "--no-preflight",
        "--out",
        str(out),
        env=env,
        preexec_fn=preexec_fn,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def slowed_smoke_run(out: Path, env: dict) -> None:
    """The smoke run with more busy processes than it has cores competing for them, pinned to
    the same cores; each in a session of its own, as the kit starts its ranks in one, so that a
    scheduler that shares the CPU between sessions (autogroup) cannot shield the ranks from them."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    busy = [
        subprocess.Popen(
            [sys.executable, "-c", "while True: pass"],
            start_new_session=True,
            preexec_fn=lambda: os.sched_setaffinity(0, cores),
        )
        for _ in range(len(cores) + 1)
    ]
    try:
        smoke_run(out, env, preexec_fn=lambda: os.sched_setaffinity(0, cores))
    finally:
        for process in busy:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    """Two real runs of one case: node-a as it is, node-b slowed and with NCCL_DEBUG set (a fact
    its fingerprint records, so the runs' fingerprints differ in one named way)."""
    root = tmp_path_factory.mktemp("fleet")
    smoke_run(root / "node-a")
    slowed_smoke_run(root / "node-b", env={"NCCL_DEBUG": "WARN"})
    return root


def tokens_per_s(run_dir: Path) -> float:
    return json.loads((run_dir / "cases" / CASE / "result.json").read_text())["metrics"]["tokens_per_s"]["mean"]


@pytest.mark.e2e
def test_the_fleet_report_flags_the_slowed_node_and_not_the_other(fleet, tmp_path):
    print(
        f"tokens/s: node-a {tokens_per_s(fleet / 'node-a'):.1f}, node-b (slowed) {tokens_per_s(fleet / 'node-b'):.1f}"
    )
    nodes = [Node(name, load_run(fleet / name, redact=False)) for name in ("node-a", "node-b")]
    report = fleet_report(nodes)
    verdict = next(fact for fact in report.page_one.host if fact.label == "Flagged")
    assert verdict.tone == "bad" and verdict.value.startswith("node-b: ") and "node-a" not in verdict.value
    rows = {row.cells[0].text: row.cells[-1].text for row in report.sections[0].tables[0].rows if not row.heading}
    assert rows == {"node-a": "not flagged", "node-b": "flagged"}
    differing = report.sections[1].tables[0].rows
    assert [(row.cells[1].text, row.cells[2].text) for row in differing[:2]] == [
        ("none (a variant's own are in its case)", "node-a"),
        ("NCCL_DEBUG=WARN", "node-b"),
    ]
    assert differing[0].cells[0].text == "NCCL variables of the kit"

    done = kit("report", "--fleet", "node-a", "node-b", "--out", str(tmp_path), cwd=fleet)
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "fleet-report.html").read_text()
    assert (tmp_path / "fleet-report.pdf").read_bytes().startswith(b"%PDF")
    assert re.search(r"<th>Flagged</th><td class=\"tone-bad\">node-b: pretrain\.tiny-llama\.naive\.g2 tokens/s: ", html)


@pytest.mark.e2e
def test_a_tampered_run_is_refused_and_runs_of_two_profiles_are_not_compared(fleet, tmp_path):
    tampered = tmp_path / "tampered"
    shutil.copytree(fleet / "node-a", tampered)
    result = tampered / "cases" / CASE / "result.json"
    result.write_text(result.read_text().replace('"status": "ok"', '"status": "ok" '))
    done = kit("report", "--fleet", str(tampered), str(fleet / "node-b"), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and "does not match its evidence" in done.stdout + done.stderr, done
    assert not (tmp_path / "out").exists()

    other = tmp_path / "other-profile"
    shutil.copytree(fleet / "node-a", other)
    info = json.loads((other / "run.json").read_text())
    (other / "run.json").write_text(json.dumps({**info, "profile": "quick"}))
    done = kit("report", "--fleet", str(other), str(fleet / "node-b"), "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and "one profile" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done
