"""Serving correctness beside speed: before a serving case's burst, a few fixed prompts decoded
greedily by the engine, their first tokens compared with the greedy tokens of the same weights
in transformers. A fast engine that generates the wrong tokens (a broken kernel, a quantization
or configuration gone wrong) fails here, and its figures are invalid (kit.measure.validity).

Both sides must load the same weights: the engine is given the kit's seeded synthetic checkpoint
instead of making its own random weights, for a model small enough that transformers decodes it
on the CPU in seconds (kit.serve.engines.loads_checkpoint). The engine's own tokenization of each prompt
(`prompt_token_ids` of its answer, with `return_token_ids`) is what the reference decodes from,
so that a difference is the model's, never the tokenizers'.
"""

from __future__ import annotations

import importlib.metadata
import json
import urllib.request

from kit.plan.protocol import Case, ServeParams
from kit.rundir.serving import OutputCheck
from kit.serve.burst import burst_prompts
from kit.serve.engines import REFERENCE_MAX_PARAMETERS, Engine, loads_checkpoint
from kit.theory.analytic import parameter_count

PROMPTS = 3
PROMPT_TOKENS = 16
# The first K greedy tokens must be equal. At fp32 both sides compute the same logits up to
# summation order, so K tokens; at bf16/fp16 the engine's logits carry the format's rounding
# (8 bits of mantissa for bf16), and a near-tie between two tokens may flip after a few steps,
# so fewer.
TOKENS_COMPARED = {"fp32": 16, "bf16": 4, "fp16": 4}
TOLERANCE = "the first {k} greedy tokens equal (engine at {dtype}, reference at fp32)"
SEED_OFFSET = 2  # the check's prompts are drawn apart from the burst's and the warm-up's
ENGINES_CHECKED = ("vllm",)  # whose answers carry the token ids (return_token_ids)
REQUEST_TIMEOUT_S = 120


def not_checked_because(case: Case, engine: Engine) -> str | None:
    """Why this case's output is not checked (None: it is)."""
    params = case.params_as(ServeParams)
    if engine.name not in ENGINES_CHECKED:
        return f"{engine.label}'s answers do not list their token ids; only {', '.join(ENGINES_CHECKED)} is checked"
    if params.model_path:
        return "a user-given model: the reference would need its weights loaded twice"
    if not loads_checkpoint(case, engine):
        return (
            f"{parameter_count(case.model_shape) / 1e9:.1f} B parameters: above the "
            f"{REFERENCE_MAX_PARAMETERS / 1e6:.0f} M the CPU reference decodes; the engine makes its own random weights"
        )
    return None


def engine_answer(engine: Engine, base_url: str, prompt: str, params: ServeParams, tokens: int) -> tuple[list, list]:
    """The engine's greedy completion of `prompt`, not streamed: (its prompt's token ids, the ids it generated)."""
    path, body = engine.request(prompt, params.model_copy(update={"max_output_tokens": tokens}))
    body = {**body, "stream": False}
    body.pop("stream_options", None)
    request = urllib.request.Request(
        base_url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
        choice = json.loads(response.read())["choices"][0]
    prompt_ids, generated = choice.get("prompt_token_ids"), choice.get("token_ids")
    if prompt_ids is None or generated is None:
        raise ValueError("the engine's answer lists no prompt_token_ids or token_ids")
    return list(prompt_ids), list(generated)


def greedy_reference(model_dir, prompts: list[list[int]], tokens: int) -> list[list[int]]:
    """Each prompt's next `tokens` greedy tokens by transformers, fp32 on the CPU, EOS ignored."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()  # runs within `kit run`, whose console is the run's progress
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    found = []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt])
            for _ in range(tokens):
                next_id = model(input_ids=ids).logits[0, -1].argmax()
                ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
            found.append(ids[0, len(prompt) :].tolist())
    return found


def compared(engine_tokens: list[list[int]], reference: list[list[int]], tokens: int) -> tuple[int, list[str]]:
    """How many prompts agree on their first `tokens` tokens, and where each other first differs."""
    agreed, mismatches = 0, []
    for number, (mine, theirs) in enumerate(zip(engine_tokens, reference, strict=True), start=1):
        differ = next((i for i in range(tokens) if i >= len(mine) or mine[i] != theirs[i]), None)
        if differ is None:
            agreed += 1
        else:
            engine_token = mine[differ] if differ < len(mine) else "none"
            mismatches.append(
                f"prompt {number}, token {differ + 1}: engine {engine_token}, transformers {theirs[differ]}"
            )
    return agreed, mismatches


def check_output(case: Case, engine: Engine, base_url: str, model_dir, tokenizer) -> OutputCheck:
    """The engine's greedy tokens of PROMPTS fixed prompts against transformers' on the same weights."""
    params = case.params_as(ServeParams)
    why = not_checked_because(case, engine)
    if why is not None:
        return OutputCheck(status="not_checked", note=why)
    tokens = min(TOKENS_COMPARED[params.dtype], params.max_output_tokens)  # the engine's context holds no more
    prompts = burst_prompts(tokenizer, PROMPTS, min(PROMPT_TOKENS, params.input_tokens), params.seed + SEED_OFFSET)
    checked = {
        "prompts": len(prompts),
        "tokens_compared": tokens,
        "tolerance": TOLERANCE.format(k=tokens, dtype=params.dtype),
    }
    try:
        answers = [engine_answer(engine, base_url, prompt, params, tokens) for prompt in prompts]
    except (OSError, ValueError, KeyError, IndexError) as exc:  # an answer that is not a completion is no right one
        return OutputCheck(
            status="fail", **checked, note=f"the engine's answer could not be read: {type(exc).__name__}: {exc}"[:300]
        )
    reference = greedy_reference(model_dir, [prompt_ids for prompt_ids, _ in answers], tokens)
    agreed, mismatches = compared([generated for _, generated in answers], reference, tokens)
    return OutputCheck(
        status="pass" if agreed == len(prompts) else "fail",
        **checked,
        agreed=agreed,
        reference=f"transformers {importlib.metadata.version('transformers')}, fp32, CPU, greedy",
        mismatches=mismatches,
    )
