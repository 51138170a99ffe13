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


def list_smoke(cache) -> subprocess.CompletedProcess:
    """`kit list --profile smoke` as a user runs it, bounded in time: a read that waits fails."""
    return subprocess.run(
        [sys.executable, "-m", "kit.cli", "list", "--profile", "smoke"],
        capture_output=True,
        text=True,
        env={**os.environ, "KIT_CACHE": str(cache), "COLUMNS": "400"},
        timeout=60,
    )


def plant(entry, how: str, plan: dict, elsewhere) -> None:
    """Damage or replace `entry` as `how` says."""
    sealed = entry.read_bytes()
    entry.unlink()
    if how == "cut short":
        entry.write_bytes(sealed[: len(sealed) // 2])
    elif how == "not JSON":
        entry.write_bytes(sealed.replace(b"{", b"<", 1))
    elif how == "nested 20000 deep":
        entry.write_text("[" * 20_000 + "]" * 20_000)
    elif how == "sparse 4 GiB":
        with entry.open("wb") as handle:
            handle.truncate(4 << 30)
    elif how == "of another shape":
        entry.write_text(json.dumps({"cases": "x", "profile": 1}))
    elif how == "a link to a file elsewhere":
        elsewhere.write_bytes(sealed)
        entry.symlink_to(elsewhere)
    elif how == "cases edited, seal kept":
        seal, _, _ = sealed.partition(b"\n")
        edited = {**plan, "cases": [{**case, "params": {**case["params"], "runs": 99}} for case in plan["cases"]]}
        entry.write_bytes(seal + b"\n" + json.dumps(edited).encode())
    elif how == "a case naming a path":
        entry.write_text(json.dumps(forged(plan)))
    elif how == "a FIFO":
        os.mkfifo(entry)  # a read of it would wait for a writer for ever


DAMAGE = (
    "cut short",
    "not JSON",
    "nested 20000 deep",
    "sparse 4 GiB",
    "of another shape",
    "a link to a file elsewhere",
    "cases edited, seal kept",
    "a case naming a path",
    "a FIFO",
)


def test_a_cache_entry_that_is_not_as_the_kit_kept_it_is_said_and_built_again(tmp_path):
    cache = tmp_path / "cache"
    clean = list_smoke(cache)
    (entry,) = (cache / "plans").glob("*.json")
    kept = entry.read_bytes()
    plan = json.loads(kept.partition(b"\n")[2])
    assert clean.returncode == 0 and not clean.stderr and kept.startswith(b"kit-sealed ")
    for how in DAMAGE:
        plant(entry, how, plan, tmp_path / "elsewhere.json")
        damaged = list_smoke(cache)
        assert (damaged.returncode, damaged.stdout) == (0, clean.stdout), (how, damaged.stderr)
        (line,) = damaged.stderr.splitlines()  # one line, no traceback
        assert line.startswith(f"kit: plan cache entry {entry} not used (") and "built again" in line, how
        assert entry.read_bytes() == kept and not entry.is_symlink(), how  # built again, the same
        assert list_smoke(cache).stderr == "", how  # and read as the kit's from then on
    assert (tmp_path / "elsewhere.json").read_bytes() == kept  # what the link pointed to is left as it was


def test_an_entry_sealed_under_another_name_or_another_key_is_not_read(tmp_path):
    """The seal covers the entry's name (a plan kept for another profile or host is not this
    one's) and is made with a key of this user's alone: one others may read is replaced."""
    cache = tmp_path / "cache"
    clean = list_smoke(cache)
    (entry,) = (cache / "plans").glob("*.json")
    subprocess.run(
        [sys.executable, "-m", "kit.cli", "list", "--profile", "paper"],
        capture_output=True,
        env={**os.environ, "KIT_CACHE": str(cache)},
        check=True,
    )
    (other,) = set((cache / "plans").glob("*.json")) - {entry}
    kept = entry.read_bytes()
    entry.write_bytes(other.read_bytes())
    renamed = list_smoke(cache)
    assert (renamed.returncode, renamed.stdout) == (0, clean.stdout) and "seal does not match" in renamed.stderr
    assert entry.read_bytes() == kept
    key = cache / "seal.key"
    key.chmod(0o644)  # readable by others: anyone could have sealed with it
    shared = list_smoke(cache)
    assert (shared.returncode, shared.stdout) == (0, clean.stdout) and "not used" in shared.stderr
    assert key.stat().st_mode & 0o077 == 0 and entry.read_bytes() != kept  # a new key, the entry sealed with it
