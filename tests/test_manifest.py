"""A malformed manifest: one line naming file, key and reason; exit code 2; no traceback."""

from __future__ import annotations

import copy
import functools
import importlib
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.deadline import ends_within

from kit.manifest import ManifestError, manifests_dir


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
        pytest.param(
            "paper: arXiv:2311.03687\n",
            "paper: arXiv:2311.03687\nx: " + "[" * 50000 + "]" * 50000 + "\n",
            "",
            "nested more than 64 levels deep",
            id="nested 50000 deep",
        ),  # libyaml alone crashes on it
        ("      gpus: [1, 2, 4, 8]\n", "      gpus: [0, 2]\n", "stages.scaling.matrix.gpus.0", "greater than 0"),
        ("      gpus: [1, 2, 4, 8]\n", "      gpus: [true]\n", "stages.scaling.matrix.gpus.0", "valid integer"),
        (
            "      models: [llama2-7b]\n      methods: [q]\n",
            "      models: true\n      methods: [q]\n",
            "stages.scaling.matrix.models",
            "tuple",
        ),
        (
            "    device: cpu\n    comparable_to_reference: false\n",
            "    device: cpu\n    comparable_to_reference: true\n",
            "profiles.smoke",
            "CPU profile cannot be comparable_to_reference",
        ),
        (
            "params: &smoke_train {runs: 3,",
            "params: &smoke_train {zero_stage: 3, runs: 3,",
            "profiles.smoke.stages.pretrain.params.zero_stage",
            "method 'z2' sets it to 2; a profile cannot change it",
        ),
        pytest.param(
            "  seq_len: 350 ", "  seq_len: " + "9" * 5000 + " ", "", "unreadable value", id="a 5000-digit number"
        ),
        # Bounded where it is read: a time limit that would overflow a clock, a plan too large to list.
        pytest.param(
            "  timeout_s: 7200\n",
            "  timeout_s: " + "7" * 3000 + "\n",
            "timeout_s",
            "a number of 3,000 digits is larger than any a manifest means",
            id="a 3000-digit time limit",
        ),
        pytest.param(
            "optimizer_impl: torch, timeout_s: 300,",
            "optimizer_impl: torch, timeout_s: 9999999999,",
            "params.timeout_s",
            "less than or equal to 2592000",
            id="a time limit of 300 years",
        ),
        pytest.param(
            "      gpus: [1, 2, 4, 8]\n",
            "      gpus: [" + ", ".join(str(n) for n in range(1, 4097)) + "]\n",
            "stages.scaling",
            "more than the 5,000 a plan may hold",
            id="4096 GPU counts",
        ),
        # Read as written, not coerced: `true` is not 1 run, "5" not 5 steps, "yes" not on.
        (
            "&smoke_train {runs: 3,",
            "&smoke_train {runs: true,",
            "profiles.smoke.stages.pretrain (naive).params.runs",
            "valid integer",
        ),
        (
            "measured_steps: 5, optimizer_impl",
            'measured_steps: "5", optimizer_impl',
            "(naive).params.measured_steps",
            "valid integer",
        ),
        (
            "params: {recompute: true, micro_batch: 16}",
            'params: {recompute: "yes", micro_batch: 16}',
            "(r).params.recompute",
            "valid boolean",
        ),
        (
            "      min_bytes: 8\n",
            "      min_bytes: 2147483648\n",
            "params",
            "min_bytes (2147483648) is above max_bytes (1073741824)",
        ),
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


# --- generated mutants of every manifest -----------------------------------------------------------
# Each value of the real manifests, sampled, replaced by one of another type or a number that is
# not finite (a number as text, a flag as 0 or "no", .nan, .inf), and each file replaced by what
# is no manifest: every one is refused as a ManifestError naming the file, read by the function
# every command reads it with, in this process (a few go through the commands themselves below).

LOADERS = {
    "protocol.yaml": ("kit.plan.protocol", "load_protocol"),
    "hardware.yaml": ("kit.theory.hardware", "load_hardware"),
    "references/arxiv-2311.03687.yaml": ("kit.reference.published", "load_reference"),
    "environment.yaml": ("kit.host.environment", "load_expectations"),
    "images.lock.yaml": ("kit.images", "load_lock"),
}
SAMPLED = {
    "protocol.yaml": 40,
    "hardware.yaml": 40,
    "references/arxiv-2311.03687.yaml": 40,
    "environment.yaml": 20,
    "images.lock.yaml": 20,
}


def load(name: str, folder: Path):
    module, function = LOADERS[name]
    return getattr(importlib.import_module(module), function)(folder / name)


def leaves(data, location=()):
    """(key path, value) of every scalar of a parsed manifest but null."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from leaves(value, (*location, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from leaves(value, (*location, index))
    elif data is not None:
        yield location, data


def other_types(value) -> list:
    """What a value is not, as a careless or hostile edit writes it."""
    if isinstance(value, bool):
        return ["no", 0, 1, "true"]
    if isinstance(value, int):
        return [str(value), True, False, math.nan]
    if isinstance(value, float):
        return [str(value), True, math.nan, math.inf, -math.inf]
    return [7, True, 2.5, [value]]


@functools.cache
def parsed(name: str):
    return yaml.load((manifests_dir() / name).read_text(), Loader=yaml.CSafeLoader)


def typed_mutants() -> list:
    chosen = random.Random(33)
    mutants = []
    for name, count in SAMPLED.items():
        for location, value in chosen.sample(list(leaves(parsed(name))), count):
            new = chosen.choice(other_types(value))
            mutants.append(pytest.param(name, location, new, id=f"{name}:{'.'.join(map(str, location))}={new!r}"))
    return mutants


def written_with(name: str, location: tuple, new) -> str:
    data = copy.deepcopy(parsed(name))
    holder = data
    for key in location[:-1]:
        holder = holder[key]
    holder[location[-1]] = new
    return yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True)


@pytest.mark.parametrize("name, location, new", typed_mutants())
def test_a_value_of_another_type_or_not_finite_is_refused_naming_the_file(manifests_copy, name, location, new):
    (manifests_copy / name).write_text(written_with(name, location, new))
    with pytest.raises(ManifestError) as refused:
        load(name, manifests_copy)
    assert refused.value.path == str(manifests_copy / name) and "\n" not in str(refused.value)


def no_manifest(kind: str, path: Path) -> None:
    path.unlink()
    if kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "a folder":
        path.mkdir()
    elif kind == "17 MiB":
        with path.open("wb") as grown:
            grown.truncate(17 << 20)
    else:
        path.write_bytes({"empty": b"", "binary": bytes(range(256)) * 4, "not UTF-8": b"paper: \xff\xfe\n"}[kind])


@pytest.mark.parametrize(
    "kind", ["a FIFO", "a link to /dev/zero", "a folder", "17 MiB", "empty", "binary", "not UTF-8"]
)
@pytest.mark.parametrize("name", sorted(LOADERS))
def test_a_file_that_is_no_manifest_is_refused_at_once(manifests_copy, name, kind):
    no_manifest(kind, manifests_copy / name)
    with pytest.raises(ManifestError), ends_within(10, f"reading {kind} as {name}"):
        load(name, manifests_copy)


def lock_cuts() -> list[int]:
    """Offsets into the images lock before its last line of data: a lock cut there lost a part."""
    text = (manifests_dir() / "images.lock.yaml").read_text()
    last = text.rstrip().rindex("\n")
    return [last * k // 6 for k in range(1, 6)] + [last]


@pytest.mark.parametrize("offset", lock_cuts())
def test_an_images_lock_cut_short_is_refused(manifests_copy, offset):
    path = manifests_copy / "images.lock.yaml"
    path.write_text(path.read_text()[:offset])
    with pytest.raises(ManifestError):
        load("images.lock.yaml", manifests_copy)


LAUGHS = "".join(f"_l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]\n" for i in range(1, 9))


@pytest.mark.parametrize(
    "name, old, new, reason",
    [
        (
            "protocol.yaml",
            "paper: arXiv:2311.03687\n",
            "paper: arXiv:2311.03687\n_l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n" + LAUGHS + "laughs: *l8\n",
            "values once its aliases are expanded",
        ),
        (
            "protocol.yaml",
            "    comparable_to_reference: false\n",
            '    comparable_to_reference: "no"\n',
            "valid boolean",
        ),
        ("protocol.yaml", "    comparable_to_reference: false\n", "    comparable_to_reference: 0\n", "valid boolean"),
        ("protocol.yaml", "    hidden_size: 4096\n", '    hidden_size: "4096"\n', "valid integer"),
        ("protocol.yaml", "    image: train\n", '    image: " "\n', "is not a usable name"),
        ("protocol.yaml", "learning_rate: 1.0e-5", "learning_rate: .inf", "not a finite number"),
        ("protocol.yaml", "memory_cap_gib: 1.5", "memory_cap_gib: .inf", "not a finite number"),
        ("references/arxiv-2311.03687.yaml", "tolerance: 0.05", "tolerance: .inf", "not a finite number"),
        (
            "references/arxiv-2311.03687.yaml",
            "        metric: tokens_per_s\n        quantised: false\n        published: {value: 50, tolerance: 10}\n"
            "    for_each: {rtx: [RTX4090, RTX3090]}\n",
            '        metric: "tokens_per_s{x0}{x1}{x2}{x3}{x4}"\n        quantised: false\n        published: {value: 50, tolerance: 10}\n'
            "    for_each: {rtx: [RTX4090, RTX3090], "
            + ", ".join(f"x{i}: [{', '.join(f'v{j}' for j in range(30))}]" for i in range(5))
            + "}\n",
            "more than 1000 relations",
        ),  # 2 x 30^5
        ("images.lock.yaml", "reference: kit/train:0.1.0", 'reference: "--help:0.1.0"', "must be repo:tag"),
        ("hardware.yaml", "value: 989.4", "value: .nan", "not a finite number"),
        ("hardware.yaml", "value: 989.4", 'value: "989.4"', "valid number"),
        ("hardware.yaml", "value: 989.4", "value: true", "valid number"),
    ],
)
def test_a_value_read_otherwise_than_written_is_refused(manifests_copy, name, old, new, reason):
    path = manifests_copy / name
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(ManifestError, match=re.escape(reason)):
        load(name, manifests_copy)


def test_a_bad_manifest_read_by_a_forked_piece_of_the_report_is_one_line(
    manifests_copy, real_smoke_run, tmp_path, kit_in_process
):
    """The report reads the hardware table on the machine's cores at once (kit.report.forked):
    the error comes back of its own type, and the command says it in one line."""
    (manifests_copy / "hardware.yaml").write_text("x: [\n")
    code, out, err = kit_in_process(
        "report", real_smoke_run, "--compare", "reference", "--format", "json", "--out", tmp_path / "out"
    )
    assert code == 2 and "Traceback" not in err, err
    assert (
        err.strip().splitlines()[-1]
        == f"error: {manifests_copy / 'hardware.yaml'}: line 2, column 1: invalid YAML: did not find expected node content"
    )


def test_an_odd_yaml_beside_the_protocol_neither_hangs_nor_fills_the_memory(manifests_copy, kit_in_process):
    os.mkfifo(manifests_copy / "notes.yaml")
    (manifests_copy / "zero.yaml").symlink_to("/dev/zero")
    code, out, err = kit_in_process("list", "--profile", "smoke", seconds=30)
    assert code == 0 and "comm.all_reduce.g2" in out, err
