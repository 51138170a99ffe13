"""Does the kit's harness measure what a bare training loop measures?

One process, one tiny Llama, the same random batches, alternating blocks of steps:
  harness  - the kit's path: `train.build` (DeepSpeed engine) timed step by step by
             `harness.timed_steps`, tokens/s from `kit.measure.metrics`;
  bare-ds  - the same DeepSpeed engine driven by a plain loop under one timer;
  bare-pt  - plain PyTorch (model, AdamW, backward, step) under one timer, no DeepSpeed.
harness / bare-ds is the harness's own overhead (the issue's >= 0.97 criterion);
harness / bare-pt also includes what DeepSpeed's engine costs over plain PyTorch.

    python tests/benchmarks/harness_overhead.py [--steps 40] [--blocks 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from kit.cache import torch_extensions_dir
from kit.measure.metrics import tokens_per_second
from kit.plan.protocol import build_plan, load_protocol
from kit.workloads import harness, train
from kit.workloads.synthetic import llama_config, random_batches

CASE = "pretrain.tiny-llama.naive.g2"


def bare_loop_tokens_per_s(step, steps: int, tokens_per_step: int) -> float:
    """Tokens/s of `steps` steps under a single timer: nothing measured inside the loop."""
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * tokens_per_step / (time.perf_counter() - start)


def plain_pytorch_step(case):
    import torch
    from transformers import LlamaForCausalLM

    params = case.params
    model = LlamaForCausalLM._from_config(
        llama_config(case.shape), dtype=torch.bfloat16, attn_implementation=params.attention
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.learning_rate, weight_decay=0.0)
    batches = random_batches(case.shape.vocab_size, params.micro_batch, params.seq_len, train.BATCH_POOL, params.seed)
    index = 0

    def step():
        nonlocal index
        ids = batches[index % len(batches)]
        index += 1
        model(input_ids=ids, labels=ids).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # DeepSpeed's config clips at 1.0 too
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="steps per block")
    parser.add_argument("--blocks", type=int, default=5, help="alternating blocks per variant")
    args = parser.parse_args()
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(torch_extensions_dir()))
    for key, value in {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29533",
    }.items():
        os.environ.setdefault(key, value)

    base = next(c for c in build_plan(load_protocol(), "smoke").cases if c.id == CASE)
    case = base.model_copy(update={"gpus": 1, "params": base.params.model_copy(update={"warmup_steps": 5})})
    harness.seed_everything(case.params.seed)
    workload = train.build(case)
    pytorch_step = plain_pytorch_step(case)
    tokens = workload.tokens_per_step
    for _ in range(case.params.warmup_steps):  # warm both paths before any block is timed
        workload.step()
        pytorch_step()

    measure = {
        "harness": lambda: tokens_per_second(tokens, harness.timed_steps(workload.step, args.steps, lambda: None)),
        "bare-ds": lambda: bare_loop_tokens_per_s(workload.step, args.steps, tokens),
        "bare-pt": lambda: bare_loop_tokens_per_s(pytorch_step, args.steps, tokens),
    }
    names = list(measure)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for block in range(args.blocks):
        # Rotate the order each round, so that no variant always follows the same one.
        for name in names[block % 3 :] + names[: block % 3]:
            figures[name].append(measure[name]())
    workload.close()

    print(f"case {case.id} on 1 process, {args.blocks} alternating blocks of {args.steps} steps, {tokens} tokens/step")
    for name, values in figures.items():
        print(f"  {name:8s} tokens/s median {statistics.median(values):9.1f}  blocks {[round(v) for v in values]}")
    harness_median = statistics.median(figures["harness"])
    for other in ("bare-ds", "bare-pt"):
        print(f"  ratio harness / {other}: {harness_median / statistics.median(figures[other]):.3f}")


if __name__ == "__main__":
    main()
