"""The kit's caches: an entry is made once, by one process, whole; a broken one is made again."""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.cache import MARKER, CacheEntryInvalid, ensure_entry, read_marker
from kit.plan.protocol import load_protocol


def _make_counted(staging: Path, log: Path) -> dict:
    with log.open("a") as handle:
        handle.write(f"{os.getpid()}\n")
    time.sleep(1.0)  # long enough for the other process to arrive while this one makes it
    (staging / "payload.bin").write_bytes(b"x" * 1000)
    return {"kind": "test"}


def _ensure_in_process(target: str, log: str) -> None:
    ensure_entry(Path(target), lambda staging: _make_counted(staging, Path(log)), "test entry", say=lambda _: None)


def test_two_processes_make_one_cold_entry_once_and_both_see_it_whole(tmp_path):
    target, log = tmp_path / "entry", tmp_path / "makers.log"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_ensure_in_process, args=(str(target), str(log))) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert len(log.read_text().split()) == 1, "the entry was made by more than one process"
    assert read_marker(target)["files"]["payload.bin"]["bytes"] == 1000
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_an_entry_whose_maker_failed_is_neither_left_nor_used(tmp_path):
    target = tmp_path / "entry"

    def broken(staging: Path) -> dict:
        (staging / "half.bin").write_bytes(b"x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        ensure_entry(target, broken, "test entry", say=lambda _: None)
    assert not target.exists() and not any(tmp_path.glob(".entry.*"))


def test_an_entry_with_a_marker_but_a_missing_or_cut_file_is_invalid(tmp_path):
    target = tmp_path / "entry"
    ensure_entry(target, lambda staging: (staging / "w.bin").write_bytes(b"abc") and {}, "e", say=lambda _: None)
    (target / "w.bin").write_bytes(b"ab")
    with pytest.raises(CacheEntryInvalid, match="3"):
        read_marker(target)
    (target / "w.bin").unlink()
    with pytest.raises(CacheEntryInvalid, match="lacks w.bin"):
        read_marker(target)


# --- the synthetic checkpoint, as the workloads make it -------------------------------------------

RANKS_SCRIPT = """
import os, sys, time
import torch.distributed as dist
from kit.plan.protocol import load_protocol
from kit.workloads.synthetic import synthetic_checkpoint
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    time.sleep(3)  # rank 1 reaches the cold cache first: the order that once left no weights
path = synthetic_checkpoint("tiny-llama", load_protocol().models["tiny-llama"], 1234)
# Each rank's answer in a file of its own: two ranks' prints to one pipe can share a line.
open(os.path.join(os.environ["PATHS_DIR"], str(dist.get_rank())), "w").write(str(path))
dist.barrier()
dist.destroy_process_group()
"""


def test_two_ranks_against_one_cold_checkpoint_get_one_whole_loadable_checkpoint(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "paths").mkdir()
    env = {**os.environ, "KIT_CACHE": str(tmp_path / "cache"), "PATHS_DIR": str(tmp_path / "paths")}
    script = tmp_path / "ranks.py"
    script.write_text(RANKS_SCRIPT)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    paths = {answer.read_text() for answer in (tmp_path / "paths").iterdir()}
    assert len(list((tmp_path / "paths").iterdir())) == 2 and len(paths) == 1
    path = Path(paths.pop())
    files = set(read_marker(path)["files"])
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    from transformers import AutoTokenizer, LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(path)
    assert model.config.hidden_size == load_protocol().models["tiny-llama"].hidden_size
    assert len(AutoTokenizer.from_pretrained(path)) == load_protocol().models["tiny-llama"].vocab_size


def test_a_checkpoint_left_with_a_marker_and_no_weights_is_rebuilt(tmp_path):
    pytest.importorskip("torch")
    from kit.plan.model_key import model_key
    from kit.workloads.synthetic import synthetic_checkpoint

    shape = load_protocol().models["tiny-llama"]
    broken = tmp_path / model_key("tiny-llama", shape, 1234)
    broken.mkdir(parents=True)
    # What a 2-rank case left on users' machines: the old marker and a tokenizer, no config, no weights.
    (broken / "kit-checkpoint.json").write_text(json.dumps({"seed": 1234, "sha256": {}}))
    (broken / "tokenizer.json").write_text("{}")
    said = []
    path = synthetic_checkpoint("tiny-llama", shape, 1234, root=tmp_path, say=said.append)
    assert path == broken and (path / "model.safetensors").is_file() and (path / MARKER).is_file()
    assert any("rebuilding a broken cache entry" in line for line in said)
    assert synthetic_checkpoint("tiny-llama", shape, 1234, root=tmp_path, say=said.append) == path


@pytest.mark.e2e
def test_a_deepspeed_op_builds_in_a_process_under_a_cpu_cases_data_cap(smoke_plan, tmp_path):
    """A maxbatch case's ranks run under its data cap, and the first run on a machine builds the
    shared-memory comm op from inside a rank: the compiler needs more than the cap, so the build
    must lift it (the executors leave the hard limit open for that) or the case ends `oom`."""
    from kit.execute import memory_cap_bytes

    case = next(c for c in smoke_plan.cases if memory_cap_bytes(c) is not None)
    cap = memory_cap_bytes(case)
    script = "from kit.workloads.deepspeed_ops import prepare_ops; print(prepare_ops(['ShareMemCommBuilder']))"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (cap, resource.RLIM_INFINITY)),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert str(tmp_path) in done.stdout
