"""Synthetic inputs: Llama configs from the protocol's shapes, random-weight checkpoints, token ids.

Throughput does not depend on weight values or on the text, so the kit never downloads either:
pre-training starts from random initialisation, and cases that must load a checkpoint (4-bit
quantisation happens at load time; fine-tuning starts from one) load a synthetic one with the
real shapes, made once per shape and seed and cached with the SHA-256 of each file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from kit.cache import cache_dir
from kit.protocol import ModelSpec
from kit.results import sha256_file

MARKER = "kit-checkpoint.json"


def llama_config(shape: ModelSpec):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        vocab_size=shape.vocab_size,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=1e-5,  # Llama-2's value (config.json of the meta-llama/Llama-2-*-hf models)
        tie_word_embeddings=shape.tie_embeddings,
    )


def checkpoint_key(name: str, shape: ModelSpec, seed: int) -> str:
    identity = json.dumps({"name": name, "shape": shape.model_dump(), "seed": seed}, sort_keys=True)
    return f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def synthetic_checkpoint(name: str, shape: ModelSpec, seed: int, root: Path | None = None) -> Path:
    """A cached random-weight checkpoint of this shape; made under a lock by whichever process
    comes first, so the ranks of a run never race to write it."""
    root = root or cache_dir() / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    target = root / checkpoint_key(name, shape, seed)
    with (root / f"{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / MARKER).is_file():
            _write_checkpoint(target, shape, seed)
    return target


def _write_checkpoint(target: Path, shape: ModelSpec, seed: int) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(llama_config(shape), dtype=torch.bfloat16)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    model.save_pretrained(staging)
    files = {p.name: sha256_file(p) for p in sorted(staging.iterdir()) if p.is_file()}
    (staging / MARKER).write_text(json.dumps({"shape": shape.model_dump(), "seed": seed, "sha256": files}, indent=2))
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)


def checkpoint_digest(path: Path) -> str:
    """One digest for a checkpoint: the SHA-256 over the digests of its files."""
    files = json.loads((path / MARKER).read_text())["sha256"]
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def random_batches(vocab_size: int, micro_batch: int, seq_len: int, count: int, seed: int):
    """`count` batches of random token ids, exactly seq_len long, reproducible from the seed."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (micro_batch, seq_len), generator=generator) for _ in range(count)]
