"""A malformed manifest: one line naming file, key and reason; exit code 2; no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def kit(*args, env_manifests):
    env = {**__import__("os").environ, "KIT_MANIFESTS": str(env_manifests)}
    return subprocess.run([sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, env=env)


@pytest.mark.parametrize(
    "old, new, key, reason",
    [
        ("  seq_len: 350 ", "  seq_len: many ", "stages.pretrain", "valid integer"),
        ("    num_layers: 80\n", "    num_layers: 80\n    colour: red\n", "models.llama2-70b.colour", "Extra inputs"),
        ("    device: cpu\n", "    device: tpu\n", "profiles.smoke.device", "'cuda' or 'cpu'"),
        ("paper: arXiv:2311.03687", "paper: [unclosed", "line", "invalid YAML"),
        ("paper: arXiv:2311.03687\n", "paper: arXiv:2311.03687\npaper: other\n", "line", "duplicate key 'paper'"),
        ("    num_layers: 80\n", "    num_layers: 80\n    num_layers: 2\n", "line", "duplicate key 'num_layers'"),
        pytest.param("paper: arXiv:2311.03687\n", "paper: arXiv:2311.03687\nx: " + "[" * 50000 + "]" * 50000 + "\n", "",
                     "nested more than 64 levels deep", id="nested 50000 deep"),  # libyaml alone crashes on it
        ("      gpus: [1, 2, 4, 8]\n", "      gpus: [0, 2]\n", "stages.scaling.matrix.gpus.0", "greater than 0"),
        ("      gpus: [1, 2, 4, 8]\n", "      gpus: [true]\n", "stages.scaling.matrix.gpus.0", "valid integer"),
        ("      models: [llama2-7b]\n      methods: [q]\n", "      models: true\n      methods: [q]\n", "stages.scaling.matrix.models", "tuple"),
        ("    device: cpu\n    comparable_to_reference: false\n", "    device: cpu\n    comparable_to_reference: true\n",
         "profiles.smoke", "CPU profile cannot be comparable_to_reference"),
        ("params: &smoke_train {runs: 3,", "params: &smoke_train {zero_stage: 3, runs: 3,",
         "profiles.smoke.stages.pretrain.params.zero_stage", "method 'z2' sets it to 2; a profile cannot change it"),
        pytest.param("  seq_len: 350 ", "  seq_len: " + "9" * 5000 + " ", "", "unreadable value", id="a 5000-digit number"),
        # Read as written, not coerced: `true` is not 1 run, "5" not 5 steps, "yes" not on.
        ("&smoke_train {runs: 3,", "&smoke_train {runs: true,", "profiles.smoke.stages.pretrain (naive).params.runs", "valid integer"),
        ("measured_steps: 5, optimizer_impl", 'measured_steps: "5", optimizer_impl', "(naive).params.measured_steps", "valid integer"),
        ("params: {recompute: true, micro_batch: 16}", 'params: {recompute: "yes", micro_batch: 16}', "(r).params.recompute", "valid boolean"),
        ("      min_bytes: 8\n", "      min_bytes: 2147483648\n", "params", "min_bytes (2147483648) is above max_bytes (1073741824)"),
    ],
)
def test_malformed_protocol_gives_one_line_and_exit_2(manifests_copy, old, new, key, reason):
    path = manifests_copy / "protocol.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    done = kit("list", "--profile", "smoke", env_manifests=manifests_copy)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines[0].startswith(f"error: {path}: ")
    assert key in lines[0] and reason in lines[0]


def test_missing_protocol_file_is_named(manifests_copy):
    (manifests_copy / "protocol.yaml").unlink()
    done = kit("list", env_manifests=manifests_copy)
    assert done.returncode == 2
    assert "protocol.yaml" in done.stderr and "file not found" in done.stderr


def test_a_binary_protocol_file_is_named_not_a_traceback(manifests_copy):
    (manifests_copy / "protocol.yaml").write_bytes(bytes(range(256)) * 8)
    done = kit("list", env_manifests=manifests_copy)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "protocol.yaml" in done.stderr and "not UTF-8 text" in done.stderr
