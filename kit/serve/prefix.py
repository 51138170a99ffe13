"""A multi-turn chat workload whose prompts share prefixes (ServeParams.prefix), with the engine's
prefix cache on, and off on a second start of the engine.

Chat traffic repeats itself: every request of a deployment starts with the same system prompt,
and each turn of a conversation resends the conversation so far. An engine that caches prefixes
(vLLM's automatic prefix caching, on by default) serves those tokens from its KV cache instead of
computing them again; AIPerf and guidellm replay such conversations for that reason. Here
`conversations` users talk at once, each sending its next turn when the previous one ended. Turn
t's prompt is the shared system prefix, then for each earlier turn its user text and an answer,
then the new user text, every segment of words that are one token each (kit.serve.burst), seeded.
The answer resent is the kit's own text of `answer_tokens`, not what the engine generated (its
tokens are random-weight output): the cache sees the same growing prefixes a chat would send. The
engine's own counters say how many prompt tokens it looked up in its cache and found there; the
rows go to prefix/<on|off>/requests.jsonl.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path

from kit.plan.protocol import Case, ServeParams, SharedPrefix
from kit.rundir.serving import (
    PointFiles,
    PrefixCacheCounts,
    PrefixRunDetails,
    RequestRecord,
    SharedPrefixDetails,
)
from kit.serve.burst import single_token_words, token_count
from kit.serve.client import fire_conversations
from kit.serve.engines import Engine
from kit.serve.placement import EngineHandle, Placement, wait_ready
from kit.serve.process import EngineFailed
from kit.serve.prometheus import read_page

SEED_OFFSET = 7000  # apart from the burst's, the sweep's and the rate search's prompts


class Conversations:
    """Every turn's prompt, in conversation order, and the chains that send them in turn."""

    def __init__(self, tokenizer, shape: SharedPrefix, seed: int):
        rng = random.Random(seed)
        words = single_token_words(tokenizer)

        def text(tokens: int) -> str:
            return "".join(rng.choices(words, k=tokens))

        system = text(shape.shared_tokens)
        self.prompts: list[str] = []
        self.chains: list[list[int]] = []
        for _ in range(shape.conversations):
            so_far, chain = system, []
            for turn in range(shape.turns):
                so_far += text(shape.turn_tokens)
                chain.append(len(self.prompts))
                self.prompts.append(so_far)
                if turn < shape.turns - 1:
                    so_far += text(shape.answer_tokens)
            self.chains.append(chain)
        self.input_tokens = [token_count(tokenizer, prompt) for prompt in self.prompts]


def cache_counts(engine: Engine, before: list | str, after: list | str) -> PrefixCacheCounts:
    """The prefix cache's counters over a workload, from the /metrics pages read before and after."""
    if engine.prefix_cache_queries is None or engine.prefix_cache_hits is None:
        return PrefixCacheCounts(unavailable=f"{engine.label} exposes no prefix cache counters")
    if isinstance(before, str) or isinstance(after, str):
        return PrefixCacheCounts(unavailable=before if isinstance(before, str) else after)
    found = {}
    for field, counter in (("queried_tokens", engine.prefix_cache_queries), ("hit_tokens", engine.prefix_cache_hits)):
        start, end = counter.total(before), counter.total(after)
        if start is None or end is None:
            return PrefixCacheCounts(unavailable=f"/metrics has no {counter.name}")
        found[field] = end - start
    return PrefixCacheCounts(**found)


def run_conversations(
    case: Case, engine: Engine, handle: EngineHandle, conversations: Conversations, out_dir: Path, label: str, say
) -> tuple[PrefixRunDetails, list[RequestRecord]]:
    """The conversations against a started engine; their rows in prefix/<label>/requests.jsonl."""
    params = case.params_as(ServeParams)
    shape = params.prefix
    assert shape is not None, "a shared-prefix workload is a case's with prefix"
    say(f"serve: shared prefixes, caching {label}: {shape.conversations} conversations of {shape.turns} turns")
    before = read_page(handle.base_url)
    fired = fire_conversations(
        handle.base_url,
        engine,
        params,
        conversations.prompts,
        conversations.input_tokens,
        params.timeout_s,
        conversations.chains,
        [shape.answer_tokens] * len(conversations.prompts),
    )
    after = read_page(handle.base_url)
    folder = f"prefix/{label}"
    (out_dir / folder).mkdir(parents=True, exist_ok=True)
    totals, _client = fired.kept(out_dir / folder / "requests.jsonl", all_at_once=False)
    counts = cache_counts(engine, before, after)
    rate = counts.hit_rate
    say(
        f"serve: shared prefixes, caching {label}: prefix cache hit rate "
        + (f"{rate:.1%}" if rate is not None else f"unknown ({counts.unavailable})")
    )
    details = PrefixRunDetails(
        caching=label == "on",
        conversations=shape.conversations,
        turns=shape.turns,
        requests=len(fired.records),
        files=PointFiles(requests=f"{folder}/requests.jsonl"),
        aggregates=totals,
        cache=counts,
        engine_log="engine.log" if label == "on" else f"{folder}/engine.log",
        cut_short=fired.cut_short,
    )
    return details, fired.records


def plan_conversations(tokenizer, params: ServeParams) -> Conversations | None:
    return None if params.prefix is None else Conversations(tokenizer, params.prefix, params.seed + SEED_OFFSET)


def without_caching(
    case: Case,
    engine: Engine,
    placement: Placement,
    model_dir: Path,
    out_dir: Path,
    conversations: Conversations,
    say,
    cpus: Sequence[int] | None,
) -> tuple[PrefixRunDetails | None, str | None]:
    """The same conversations on a second start of the engine with its prefix cache off; or why not."""
    if engine.prefix_caching_off is None:
        return None, f"{engine.label} has no documented argument that turns its prefix cache off"
    params = case.params_as(ServeParams)
    off = case.model_copy(update={"params": params.model_copy(update={"prefix_caching": False})})
    folder = out_dir / "prefix" / "off"
    folder.mkdir(parents=True, exist_ok=True)
    handle = None
    try:
        handle, _record = placement.start(engine, off, model_dir, folder, say, cpus=cpus)
        started = time.monotonic()
        wait_ready(handle, engine.health_path, params.ready_timeout_s)
        say(
            f"serve: the engine with {' '.join(engine.prefix_caching_off)} ready after {time.monotonic() - started:.0f} s"
        )
        details, _rows = run_conversations(off, engine, handle, conversations, out_dir, "off", say)
        return details, None
    except EngineFailed as exc:
        return None, f"the engine with its prefix cache off failed: {exc}"
    finally:
        if handle is not None:
            handle.stop()


def describe(shape: SharedPrefix) -> SharedPrefixDetails:
    return SharedPrefixDetails(
        shared_tokens=shape.shared_tokens, turn_tokens=shape.turn_tokens, answer_tokens=shape.answer_tokens
    )
