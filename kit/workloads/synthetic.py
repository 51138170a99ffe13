"""Synthetic inputs: random-weight checkpoints of the protocol's shapes, and token ids.

Throughput does not depend on weight values or on the text, so the kit never downloads either:
pre-training starts from random initialisation, and cases that must load a checkpoint (4-bit
quantisation happens at load time; fine-tuning starts from one; engines that cannot make random
weights themselves) load a synthetic one with the real shapes: the model's description
(kit.plan.model_files) plus safetensors weights, made once per shape and seed and cached with the
SHA-256 of each file, in the form every pinned engine reads (transformers 4.4x to 5.x).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from kit.cache import cache_dir, ensure_entry, entry_digest, read_marker
from kit.plan.model_files import (
    INIT_STD,
    WEIGHTS_DTYPE,
    config_json,
    write_description,
)
from kit.plan.model_key import model_key
from kit.plan.protocol import ModelSpec

# Weights are written in shards of at most this size, named and indexed as transformers names
# them (model-00001-of-0000N.safetensors, model.safetensors.index.json); 5 GB is the
# max_shard_size of transformers 4.x, whose engines must read them.
SHARD_BYTES = 5 * 10**9


def llama_config(shape: ModelSpec):
    from transformers import LlamaConfig

    values = {key: value for key, value in config_json(shape).items() if key != "torch_dtype"}
    return LlamaConfig.from_dict(values)


def synthetic_checkpoint(name: str, shape: ModelSpec, seed: int, root: Path | None = None, say=print) -> Path:
    """A cached random-weight checkpoint of this shape: made once, by one process, whole
    (kit.cache.ensure_entry), whichever rank or run asks first; the others wait for it."""
    root = root or cache_dir() / "checkpoints"
    target = root / model_key(name, shape, seed)
    ensure_entry(target, lambda staging: write_checkpoint(staging, name, shape, seed), f"checkpoint {target.name}", say)
    return target


def checkpoint_files(path: Path) -> dict[str, str]:
    """File name -> SHA-256 of a whole checkpoint, as its marker records them."""
    return {rel: facts["sha256"] for rel, facts in read_marker(path)["files"].items()}


def checkpoint_digest(path: Path) -> str:
    """One digest for a checkpoint: the SHA-256 over the digests of its files."""
    return entry_digest(read_marker(path))


def _tensor_layout(shape: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor a Llama of this shape saves, read off a model on the meta
    device (no memory used), without the LM head when it is tied to the embedding."""
    import torch
    from transformers import LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(llama_config(shape))
    layout = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    if shape.tie_embeddings:
        layout.pop("lm_head.weight", None)
    return layout


def _shards(layout: dict[str, tuple[int, ...]], element_bytes: int) -> list[list[str]]:
    shards: list[list[str]] = [[]]
    size = 0
    for name, dims in layout.items():
        nbytes = element_bytes * math.prod(dims)
        if shards[-1] and size + nbytes > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def _random_tensor(name: str, dims: tuple[int, ...], seed: int):
    """Llama's initialisation: norms at one, every other weight drawn from N(0, 0.02), each
    tensor from its own generator so that a shard is reproducible on its own."""
    import torch

    dtype = getattr(torch, WEIGHTS_DTYPE)
    if name.endswith("norm.weight"):
        return torch.ones(dims, dtype=dtype)
    generator = torch.Generator().manual_seed(int(hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()[:15], 16))
    return torch.empty(dims, dtype=torch.float32).normal_(0.0, INIT_STD, generator=generator).to(dtype)


def write_checkpoint(folder: Path, name: str, shape: ModelSpec, seed: int) -> dict:
    """Config, weights (shard by shard: a 70B checkpoint never sits in memory whole) and
    tokenizer, in the files every pinned engine reads; then read back and checked."""
    import torch
    from safetensors.torch import save_file

    layout = _tensor_layout(shape)
    element_bytes = torch.empty((), dtype=getattr(torch, WEIGHTS_DTYPE)).element_size()
    shards = _shards(layout, element_bytes)
    files = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    )
    for file, names in zip(files, shards):
        save_file({n: _random_tensor(n, layout[n], seed) for n in names}, folder / file, metadata={"format": "pt"})
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(element_bytes * math.prod(dims) for dims in layout.values())},
            "weight_map": {n: file for file, names in zip(files, shards) for n in names},
        }
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    write_description(folder, shape, seed)
    check_checkpoint(folder, shape, layout, files)
    return {
        "kind": "synthetic-checkpoint",
        "model": name,
        "shape": shape.model_dump(),
        "seed": seed,
        "weights_dtype": WEIGHTS_DTYPE,
    }


def check_checkpoint(folder: Path, shape: ModelSpec, layout: dict[str, tuple[int, ...]], files: list[str]) -> None:
    """Read the made checkpoint back the way transformers will: config and tokenizer through its
    Auto classes, every tensor's name, shape and dtype from the safetensors headers."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    if (config.model_type, config.hidden_size, config.num_hidden_layers) != (
        "llama",
        shape.hidden_size,
        shape.num_layers,
    ):
        raise RuntimeError(f"{folder}/config.json does not read back as the model's shape")
    found: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(folder / file), framework="pt") as shard:
            for key in shard.keys():
                found[key] = tuple(shard.get_slice(key).get_shape())
                if shard.get_slice(key).get_dtype() != "BF16":
                    raise RuntimeError(f"{file}: {key} is {shard.get_slice(key).get_dtype()}, not BF16")
    if found != layout:
        missing, extra = sorted(set(layout) - set(found)), sorted(set(found) - set(layout))
        raise RuntimeError(f"the weights do not match the model: missing {missing[:5]}, unexpected {extra[:5]}")
    if len(AutoTokenizer.from_pretrained(folder)) != shape.vocab_size:
        raise RuntimeError(f"{folder}: transformers does not read the tokenizer back with {shape.vocab_size} entries")


def random_batches(vocab_size: int, micro_batch: int, seq_len: int, count: int, seed: int):
    """`count` batches of random token ids, exactly seq_len long, reproducible from the seed."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (micro_batch, seq_len), generator=generator) for _ in range(count)]


def main(argv: list[str] | None = None) -> None:
    """`python -m kit.workloads.synthetic NAME SEED SHAPE_JSON`: make (or find) the checkpoint in
    $KIT_CACHE and print its folder; how the host has one made inside the kit's own image."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kit.workloads.synthetic")
    parser.add_argument("name")
    parser.add_argument("seed", type=int)
    parser.add_argument("shape", help="the model's shape, as the protocol's ModelSpec in JSON")
    args = parser.parse_args(argv)
    path = synthetic_checkpoint(args.name, ModelSpec.model_validate_json(args.shape), args.seed)
    print(f"checkpoint: {path}", flush=True)


if __name__ == "__main__":
    main()
