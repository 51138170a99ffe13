"""Synthetic inputs: Llama configs from the protocol's shapes, random-weight checkpoints, token ids.

Throughput does not depend on weight values or on the text, so the kit never downloads either:
pre-training starts from random initialisation, and cases that must load a checkpoint (4-bit
quantisation happens at load time; fine-tuning starts from one) load a synthetic one with the
real shapes, made once per shape and seed and cached with the SHA-256 of each file, in the
form every pinned engine reads (transformers 4.4x to 5.x).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from kit.cache import cache_dir, ensure_entry, entry_digest, read_marker
from kit.protocol import ModelSpec

TOKENIZER_FILE = "tokenizer.json"
# Llama-2's special token ids (tokenizer_config.json of the meta-llama/Llama-2-*-hf models),
# which LlamaConfig's defaults (bos 1, eos 2) expect.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
# Weights are written in shards of at most this size, named and indexed as transformers names
# them (model-00001-of-0000N.safetensors, model.safetensors.index.json); 5 GB is the
# max_shard_size of transformers 4.x, whose engines must read them.
SHARD_BYTES = 5 * 10**9
WEIGHTS_DTYPE = "bfloat16"
INIT_STD = 0.02  # Llama-2's initializer_range (config.json of the meta-llama/Llama-2-*-hf models)


def config_json(shape: ModelSpec) -> dict:
    """config.json in the keys of the meta-llama/Llama-2-*-hf checkpoints: what transformers 4.4x
    through 5.x and every pinned engine read (5.x's rope_parameters is derived from rope_theta)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_layers,
        "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads,
        "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "pretraining_tp": 1,
        "initializer_range": INIT_STD,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": shape.tie_embeddings,
        "use_cache": True,
        "torch_dtype": WEIGHTS_DTYPE,
    }


def llama_config(shape: ModelSpec):
    from transformers import LlamaConfig

    values = {key: value for key, value in config_json(shape).items() if key != "torch_dtype"}
    return LlamaConfig.from_dict(values)


def checkpoint_key(name: str, shape: ModelSpec, seed: int) -> str:
    identity = json.dumps({"name": name, "shape": shape.model_dump(), "seed": seed}, sort_keys=True)
    return f"{name}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def synthetic_checkpoint(name: str, shape: ModelSpec, seed: int, root: Path | None = None, say=print) -> Path:
    """A cached random-weight checkpoint of this shape: made once, by one process, whole
    (kit.cache.ensure_entry), whichever rank or run asks first; the others wait for it."""
    root = root or cache_dir() / "checkpoints"
    target = root / checkpoint_key(name, shape, seed)
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
        ["model.safetensors"] if len(shards) == 1
        else [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)]
    )  # fmt: skip
    for file, names in zip(files, shards):
        save_file({n: _random_tensor(n, layout[n], seed) for n in names}, folder / file, metadata={"format": "pt"})
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(element_bytes * math.prod(dims) for dims in layout.values())},
            "weight_map": {n: file for file, names in zip(files, shards) for n in names},
        }
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (folder / "config.json").write_text(json.dumps(config_json(shape), indent=2) + "\n")
    generation = {"bos_token_id": 1, "eos_token_id": 2}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    tokenizer = local_tokenizer(shape.vocab_size, seed)
    tokenizer.backend_tokenizer.save(str(folder / TOKENIZER_FILE))
    unk, bos, eos = SPECIAL_TOKENS
    # The base class by name, not transformers 5's "TokenizersBackend", which 4.4x cannot load.
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos, "eos_token": eos, "unk_token": unk,
        "model_max_length": shape.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    check_checkpoint(folder, shape, layout, files)
    return {"kind": "synthetic-checkpoint", "model": name, "shape": shape.model_dump(), "seed": seed,
            "weights_dtype": WEIGHTS_DTYPE}  # fmt: skip


def check_checkpoint(folder: Path, shape: ModelSpec, layout: dict[str, tuple[int, ...]], files: list[str]) -> None:
    """Read the made checkpoint back the way its users will: config, every tensor's name, shape
    and dtype from the safetensors headers, and the tokenizer; raise on the first difference."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    if (config.model_type, config.hidden_size, config.num_hidden_layers) != ("llama", shape.hidden_size, shape.num_layers):
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
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if len(tokenizer) != shape.vocab_size or tokenizer("a")["input_ids"][0] != tokenizer.bos_token_id:
        raise RuntimeError(f"{folder}: the tokenizer does not read back ({len(tokenizer)} entries, not {shape.vocab_size})")


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


def random_batches(vocab_size: int, micro_batch: int, seq_len: int, count: int, seed: int):
    """`count` batches of random token ids, exactly seq_len long, reproducible from the seed."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (micro_batch, seq_len), generator=generator) for _ in range(count)]
