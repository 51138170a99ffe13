"""The description of a model that every engine reads, made on the host without torch.

A model directory is config.json (the keys of the meta-llama/Llama-2-*-hf checkpoints, which
transformers 4.4x through 5.x and every pinned engine read), generation_config.json, and a local
tokenizer (tokenizer.json, with a tokenizer_config.json naming the base class
`PreTrainedTokenizerFast`, which transformers 4.4x loads and 5.x maps to its own). Nothing is
downloaded: the tokenizer is a byte-level BPE trained here on made-up words. An engine that
initialises random weights itself (vLLM `--load-format dummy`) needs no more; the weights of a
full synthetic checkpoint are added by kit.workloads.synthetic.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.cache import cache_dir, ensure_entry
from kit.plan.model_key import model_key
from kit.plan.protocol import ModelSpec

TOKENIZER_FILE = "tokenizer.json"
DESCRIPTION_FILES = ("config.json", "generation_config.json", TOKENIZER_FILE, "tokenizer_config.json")
# Llama-2's special token ids (tokenizer_config.json of the meta-llama/Llama-2-*-hf models),
# which LlamaConfig's defaults (bos 1, eos 2) expect.
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")
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


def training_text(seed: int, words: int) -> list[str]:
    """Lines of made-up words (syllables drawn with a Zipf-like skew), made here from the seed:
    enough distinct words for a BPE of Llama-2's 32000 entries, and nothing downloaded."""
    import itertools
    import random

    rng = random.Random(seed)
    onsets = [
        "",
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "j",
        "k",
        "l",
        "m",
        "n",
        "p",
        "qu",
        "r",
        "s",
        "t",
        "v",
        "w",
        "z",
        "br",
        "ch",
        "dr",
        "fl",
        "gr",
        "pl",
        "sh",
        "st",
        "th",
        "tr",
    ]
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
    """A byte-level BPE tokenizer (`tokenizers.Tokenizer`) with exactly `vocab_size` entries,
    trained on `training_text`. It adds <s> in front of every text, as Llama-2's tokenizer does,
    so prompt lengths are counted as the model receives them."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

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
    return tokenizer


def write_description(folder: Path, shape: ModelSpec, seed: int) -> None:
    """config.json, generation_config.json and the tokenizer files of a model into `folder`."""
    (folder / "config.json").write_text(json.dumps(config_json(shape), indent=2) + "\n")
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}, indent=2) + "\n")
    local_tokenizer(shape.vocab_size, seed).save(str(folder / TOKENIZER_FILE))
    unk, bos, eos = SPECIAL_TOKENS
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": unk,
        "model_max_length": shape.max_position_embeddings,
        "clean_up_tokenization_spaces": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    check_description(folder, shape)


def check_description(folder: Path, shape: ModelSpec) -> None:
    """Read a model's description back as its users will; raise on the first difference."""
    config = json.loads((folder / "config.json").read_text())
    wanted = config_json(shape)
    differ = [
        key
        for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
        if config.get(key) != wanted[key]
    ]
    if config.get("model_type") != "llama" or differ:
        raise RuntimeError(f"{folder}/config.json does not describe the model (differs in {differ or 'model_type'})")
    tokenizer = load_tokenizer(folder)
    if tokenizer.get_vocab_size() != shape.vocab_size:
        raise RuntimeError(f"{folder}: the tokenizer has {tokenizer.get_vocab_size()} entries, not {shape.vocab_size}")
    if tokenizer.encode("a").ids[0] != tokenizer.token_to_id(SPECIAL_TOKENS[1]):
        raise RuntimeError(f"{folder}: the tokenizer does not put <s> in front of a text")


def load_tokenizer(folder: Path | str):
    """The tokenizer engines load from a model directory (its tokenizer.json), without torch."""
    from tokenizers import Tokenizer

    path = Path(folder) / TOKENIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no {TOKENIZER_FILE}: the kit counts prompt tokens with it")
    return Tokenizer.from_file(str(path))


def weightless_model(name: str, shape: ModelSpec, seed: int, root: Path | None = None, say=print) -> Path:
    """A cached model description without weights, for an engine that makes random weights
    itself (vLLM --load-format dummy): made once, whole (kit.cache.ensure_entry)."""
    root = root or cache_dir() / "models"
    target = root / model_key(name, shape, seed)

    def make(staging: Path) -> dict:
        write_description(staging, shape, seed)
        return {"kind": "model-description", "model": name, "shape": shape.model_dump(), "seed": seed}

    ensure_entry(target, make, f"model description {target.name}", say)
    return target
