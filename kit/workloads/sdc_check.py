"""The silent-data-corruption check, inside each rank: the same short deterministic training on
this rank's device alone (the case's model cut to a few layers, seeded weights, fixed tokens,
deterministic algorithms, fp32), each step's loss and gradient norm kept with their bit patterns;
then, with every other rank, an all-reduce of known values per pair of ranks, verified element by
element. kit/measure/sdc.py compares the ranks' fingerprints.

A test corrupts one rank's arithmetic through KIT_TEST_SDC_FLIP_BIT="RANK:STEP": after that step,
that rank flips one bit of one weight, and of its all-reduce contribution, as a faulty device would.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from kit.host.health import SdcPair
from kit.plan.protocol import Case, SdcParams
from kit.rundir.schema import SdcDetails
from kit.workloads.harness import Device, SelfTimedWorkload

FLIP_HOOK = "KIT_TEST_SDC_FLIP_BIT"
FLIPPED_BIT = 22  # the highest mantissa bit of a float32: a large, silent change


def float_bits(value: float) -> str:
    """A float32's bit pattern, "0x3f800000": equal fingerprints are equal bits, not close values."""
    return f"0x{struct.unpack('>I', struct.pack('>f', value))[0]:08x}"


def flip_bit(tensor, index: int = 0) -> None:
    """Flip FLIPPED_BIT of one float32 element, in place."""
    import torch

    flat = tensor.detach().view(-1)
    as_int = flat[index : index + 1].view(torch.int32)
    as_int ^= 1 << FLIPPED_BIT


def flip_asked(rank: int) -> int | None:
    """The step after which this rank corrupts itself, where the test hook asks it to."""
    asked = os.environ.get(FLIP_HOOK, "")
    if not asked:
        return None
    target, step = asked.split(":")
    return int(step) if int(target) == rank else None


def _train(case: Case, where, flip_after: int | None) -> tuple[list[float], list[float]]:
    import torch
    from transformers import LlamaForCausalLM

    from kit.workloads.synthetic import llama_config

    params = case.params_as(SdcParams)
    _, shape = case.named_model
    shape = shape.model_copy(update={"num_layers": min(params.layers, shape.num_layers)})
    torch.manual_seed(params.seed)
    model = LlamaForCausalLM._from_config(llama_config(shape), dtype=torch.float32, attn_implementation="eager")
    model.to(where).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    tokens = torch.randint(
        0,
        shape.vocab_size,
        (params.steps, params.micro_batch, params.seq_len),
        generator=torch.Generator().manual_seed(params.seed),
    ).to(where)
    losses, norms = [], []
    for step in range(params.steps):
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens[step], labels=tokens[step]).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        optimizer.step()
        losses.append(float(loss.detach().float().item()))
        norms.append(float(norm.detach().float().item()))
        if flip_after == step:
            flip_bit(model.model.norm.weight.data)  # the final norm: every token's logits go through it
    return losses, norms


def _pairs(case: Case, where, flip: bool) -> list[SdcPair]:
    """An all-reduce per pair of ranks of known values (rank r gives r + 1 times 0, 1, 2, ... plus
    r: integers a float32 holds exactly), verified element by element on this rank."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    count = case.params_as(SdcParams).all_reduce_elements
    base = torch.arange(count, dtype=torch.float32, device=where)
    found = []
    for first in range(world):
        for second in range(first + 1, world):
            group = dist.new_group([first, second])  # every rank makes every group, in the same order
            if rank not in (first, second):
                continue
            data = base * (rank + 1) + rank
            if flip:
                flip_bit(data, count // 2)
            dist.all_reduce(data, group=group)
            expected = base * (first + second + 2) + first + second
            wrong = (data != expected).nonzero().flatten()
            first_wrong = None
            if len(wrong):
                at = int(wrong[0])
                first_wrong = f"element {at} on rank {rank}: {data[at].item():g}, expected {expected[at].item():g}"
            found.append(
                SdcPair(ranks=(first, second), elements=count, wrong_elements=len(wrong), first_wrong=first_wrong)
            )
    return found


def measure(case: Case, device: Device, out_dir: Path) -> tuple[SdcDetails, None]:
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    if device.kind == "cuda":
        where = torch.device("cuda", torch.cuda.current_device())
        label = f"GPU{torch.cuda.current_device()}: {device.name}"
    else:
        where, label = torch.device("cpu"), f"CPU rank {rank}"
    torch.use_deterministic_algorithms(True)
    flip_after = flip_asked(rank)
    losses, norms = _train(case, where, flip_after)
    pairs: list[SdcPair] = []
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("nccl" if device.kind == "cuda" else "gloo")
        try:
            pairs = _pairs(case, where, flip_after is not None)
        finally:
            dist.destroy_process_group()
    details = SdcDetails(
        device=label,
        losses=losses,
        grad_norms=norms,
        loss_bits=[float_bits(value) for value in losses],
        grad_norm_bits=[float_bits(value) for value in norms],
        all_reduce=pairs,
    )
    return details, None


WORKLOAD = SelfTimedWorkload(measure)
