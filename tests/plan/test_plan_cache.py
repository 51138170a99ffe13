"""`kit list` from the plan cache: the same answer as from the manifest, without pydantic, and a
new answer as soon as protocol.yaml changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# `kit list` run in one interpreter that then names the modules it imported.
LIST_AND_NAME_MODULES = """
import runpy, sys
sys.argv = ["kit", *sys.argv[1:]]
try:
    runpy.run_module("kit.cli", run_name="__main__")
except SystemExit as done:
    assert not done.code, done.code
print("MODULES", " ".join(sorted(sys.modules)))
"""


def kit_list(*args, cache):
    env = {**os.environ, "KIT_CACHE": str(cache), "COLUMNS": "400"}
    done = subprocess.run(
        [sys.executable, "-c", LIST_AND_NAME_MODULES, "list", *args],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    output, _, modules = done.stdout.rpartition("MODULES ")
    return output, set(modules.split())


def without_free_disk(listed: str) -> str:
    """A listing without the one figure that changes between two calls (the free disk, in --json)."""
    if not listed.startswith("{"):
        return listed
    found = json.loads(listed)
    found["host"]["resources"].pop("disk_free_bytes")
    return json.dumps(found)


def test_a_listed_plan_reads_the_same_from_the_cache_without_pydantic_or_yaml(tmp_path):
    for args in (["--profile", "paper"], ["--profile", "paper", "--json"]):
        cache = tmp_path / args[-1]  # empty: the first call builds the plan, the second reads it
        built, modules_built = kit_list(*args, cache=cache)
        cached, modules_cached = kit_list(*args, cache=cache)
        assert without_free_disk(cached) == without_free_disk(built) and "pydantic" in modules_built
        assert not modules_cached & {
            "pydantic",
            "yaml",
            "kit.plan.protocol",
            "kit.theory.analytic",
            "kit.rundir.schema",
        }, args


def test_a_cpu_profiles_estimates_need_no_protocol_models(tmp_path):
    """The smoke profile's cases run here: each is estimated from the run history by its id, and
    the analytic model (of GPUs) is not asked, so the cases stay as read from the cache."""
    built, _ = kit_list("--profile", "smoke", cache=tmp_path)
    cached, modules = kit_list("--profile", "smoke", cache=tmp_path)
    assert cached == built and "estimate" in cached.splitlines()[0]
    assert not modules & {"kit.plan.protocol", "kit.theory.analytic", "kit.plan.predictions", "yaml"}


def test_an_edited_protocol_is_read_again(tmp_path, manifests_copy):
    protocol = manifests_copy / "protocol.yaml"
    before = json.loads(kit_list("--profile", "smoke", "--json", cache=tmp_path)[0])
    assert {case["params"]["runs"] for case in before["cases"] if case["stage"] == "pretrain"} == {3}
    protocol.write_text(protocol.read_text().replace("&smoke_train {runs: 3,", "&smoke_train {runs: 4,"))
    after = json.loads(kit_list("--profile", "smoke", "--json", cache=tmp_path)[0])
    assert {case["params"]["runs"] for case in after["cases"] if case["stage"] == "pretrain"} == {4}


def test_an_invalid_protocol_is_refused_after_a_valid_one_was_cached(tmp_path, manifests_copy):
    kit_list("--profile", "paper", cache=tmp_path)  # on a host without GPUs, read from the cache alone
    protocol = manifests_copy / "protocol.yaml"
    protocol.write_text(protocol.read_text().replace("    device: cpu\n", "    device: tpu\n"))
    done = subprocess.run(
        [sys.executable, "-m", "kit.cli", "list", "--profile", "paper"],
        capture_output=True,
        text=True,
        env={**os.environ, "KIT_CACHE": str(tmp_path)},
    )
    assert done.returncode == 2 and "profiles.smoke.device" in done.stderr


def forged(entry: dict) -> dict:
    """An entry as anyone who can write the cache could leave it: well formed, naming a path."""
    case = {**entry["cases"][0], "id": "../../forged"}
    return {**entry, "cases": [case, *entry["cases"][1:]]}


def test_a_cache_entry_that_is_not_a_plan_the_kit_wrote_is_not_read(tmp_path, monkeypatch, kit_in_process):
    monkeypatch.setenv("KIT_CACHE", str(tmp_path))
    code, listed, _ = kit_in_process("list", "--profile", "smoke")
    (entry,) = (tmp_path / "plans").glob("*.json")
    for content in (forged(json.loads(entry.read_text())), [1, 2], {"profile": "smoke"}, {"cases": "x", "profile": 1}):
        entry.write_text(json.dumps(content))
        code, out, err = kit_in_process("list", "--profile", "smoke")
        assert (code, out) == (0, listed) and "forged" not in out, err
    entry.write_text("[" * 100_000 + "]" * 100_000)  # nested past any plan: a RecursionError once
    code, out, err = kit_in_process("list", "--profile", "smoke")
    assert (code, out) == (0, listed) and "Traceback" not in err, err
    entry.unlink()
    os.mkfifo(entry)  # a read of it would wait for a writer for ever
    assert kit_in_process("list", "--profile", "smoke", seconds=30)[:2] == (0, listed)
