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
TOKENIZER_FILE = "tokenizer.json"
# Llama-2's special token ids (tokenizer_config.json of the meta-llama/Llama-2-*-hf models),
# which LlamaConfig's defaults (bos 1, eos 2) expect.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")


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
        if not (target / MARKER).is_file() or not (target / TOKENIZER_FILE).is_file():
            _write_checkpoint(target, shape, seed)  # also upgrades a cached one made without a tokenizer
    return target


def _write_checkpoint(target: Path, shape: ModelSpec, seed: int) -> None:
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(llama_config(shape), dtype=torch.bfloat16)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    model.save_pretrained(staging)
    local_tokenizer(shape.vocab_size, seed).save_pretrained(staging)
    files = {p.name: sha256_file(p) for p in sorted(staging.iterdir()) if p.is_file()}
    (staging / MARKER).write_text(json.dumps({"shape": shape.model_dump(), "seed": seed, "sha256": files}, indent=2))
    if target.exists():
        shutil.rmtree(target)
    staging.rename(target)


def training_text(seed: int, words: int) -> list[str]:
    """Lines of made-up words (syllables drawn with a Zipf-like skew), made here from the seed:
    enough distinct words for a BPE of Llama-2's 32000 entries, and nothing downloaded."""
    import itertools
    import random

    rng = random.Random(seed)
    onsets = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t", "v", "w", "z",
              "br", "ch", "dr", "fl", "gr", "pl", "sh", "st", "th", "tr"]  # fmt: skip
    syllables = [o + v + c for o in onsets for v in "aeiouy" for c in ("", "n", "r", "s", "t", "l")]
    rng.shuffle(syllables)
    weights = list(itertools.accumulate(1.0 / (rank + 1) ** 0.8 for rank in range(len(syllables))))
    lengths = rng.choices((1, 2, 3, 4), (2, 3, 2, 1), k=words)
    picks = iter(rng.choices(syllables, cum_weights=weights, k=sum(lengths)))
    made = ["".join(next(picks) for _ in range(n)) for n in lengths]
    lines, start = [], 0
    while start < words:
        end = start + rng.randint(8, 24)
        lines.append(" ".join(made[start:end]).capitalize() + rng.choice(".,!?;"))
        start = end
    return lines


def local_tokenizer(vocab_size: int, seed: int):
    """A byte-level BPE tokenizer with exactly `vocab_size` entries, trained on `training_text`:
    the served tokenizer of a synthetic checkpoint. It adds <s> in front of every text, as
    Llama-2's tokenizer does, so prompt lengths are counted as the model receives them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(training_text(seed, words=max(40_000, 5 * vocab_size)), trainer)
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(f"the local BPE reached {tokenizer.get_vocab_size()} entries, not {vocab_size}")
    bos = SPECIAL_TOKENS[1]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.token_to_id(bos))]
    )
    unk, bos, eos = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token=unk, bos_token=bos, eos_token=eos)


def checkpoint_digest(path: Path) -> str:
    """One digest for a checkpoint: the SHA-256 over the digests of its files."""
    files = json.loads((path / MARKER).read_text())["sha256"]
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def random_batches(vocab_size: int, micro_batch: int, seq_len: int, count: int, seed: int):
    """`count` batches of random token ids, exactly seq_len long, reproducible from the seed."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (micro_batch, seq_len), generator=generator) for _ in range(count)]
