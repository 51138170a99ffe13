"""The paper's burst: N synthetic prompts of exactly L tokens, as the served tokenizer counts them.

"Exactly" is checked, not assumed: a prompt is built from words that are one token each, then
re-encoded with the tokenizer the engine loads (its tokenizer.json, read with the `tokenizers`
library on the host; special tokens included, since the model
receives them: Llama-2's tokenizer puts <s> in front) and trimmed or extended word by word until
the count is L. Prompts differ from one another (drawn from the seed), so no engine can serve
one from another's cached prefix.
"""

from __future__ import annotations

import random

ADJUST_LIMIT = 64  # word edits per prompt before giving up: convergence takes one or two


def token_count(tokenizer, text: str) -> int:
    """Tokens the model receives for `text` (a `tokenizers.Tokenizer`), special tokens included."""
    return len(tokenizer.encode(text).ids)


def single_token_words(tokenizer, limit: int = 4000) -> list[str]:
    """Words (a leading space and letters) that add exactly one token after other text, the way
    they are used in a prompt (tested after an anchor word, which byte-level BPE and
    SentencePiece tokenizers both handle: neither merges tokens across a space)."""
    anchor = len(tokenizer.encode("a", add_special_tokens=False).ids)
    words = []
    for token_id in sorted(tokenizer.get_vocab().values()):
        text = tokenizer.decode([token_id]).strip()
        if not (text.isascii() and text.isalpha()):
            continue
        word = " " + text
        if len(tokenizer.encode("a" + word, add_special_tokens=False).ids) == anchor + 1:
            words.append(word)
            if len(words) >= limit:
                break
    if len(words) < 16:
        raise ValueError(f"the tokenizer has only {len(words)} single-token words; cannot build prompts")
    return words


def exact_prompt(tokenizer, words: list[str], length: int, rng: random.Random) -> str:
    """A prompt of exactly `length` tokens (special tokens included)."""
    overhead = token_count(tokenizer, "")
    if length <= overhead:
        raise ValueError(f"{length} tokens leave no room for text after {overhead} special tokens")
    chosen = rng.choices(words, k=length - overhead)
    for _ in range(ADJUST_LIMIT):
        count = token_count(tokenizer, "".join(chosen))
        if count == length:
            return "".join(chosen)
        if count > length:
            del chosen[-1]
        else:
            chosen.append(rng.choice(words))
    raise ValueError(f"could not build a prompt of exactly {length} tokens in {ADJUST_LIMIT} edits")


def burst_prompts(tokenizer, count: int, length: int, seed: int) -> list[str]:
    """The burst's prompts, reproducible from the seed, each exactly `length` tokens long."""
    return prompts_of_lengths(tokenizer, [length] * count, seed)


def prompts_of_lengths(tokenizer, lengths: list[int], seed: int) -> list[str]:
    """One prompt per length, each exactly that long, reproducible from the seed."""
    rng = random.Random(seed)
    words = single_token_words(tokenizer)
    return [exact_prompt(tokenizer, words, length, rng) for length in lengths]
