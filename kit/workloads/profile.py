"""One pre-training step, dissected by phase, module and device activity (paper Tables V-VIII).

The model is train.py's pre-training model (random initialisation, the same config and
recomputation). It is stepped by plain torch AdamW rather than by the DeepSpeed engine: one
process has nothing to partition, and the phase edges (forward, backward, optimizer) are then
our own calls instead of points inside the engine. The states of that AdamW take the
parameters' dtype with no fp32 master copy, which is what lets a 7B step fit on one 80 GB GPU.

Four kinds of step, each measured on its own so that one measurement does not perturb another:
1. warm-up steps, not recorded;
2. plain steps: phase edges only, on the device's clock (CUDA events on a GPU; perf_counter on
   a CPU, where every operator runs synchronously in the calling thread);
3. instrumented steps: a mark at each edge of every part's forward and backward pass, on the
   same clock, attributed to the paper's parts by kit.breakdown; then as many steps with only
   the blocks (decoder layers, self-attention, MLP) marked, so their marks cost the parts nothing;
4. one profiled step (torch.profiler, after one profiler warm-up step), exported as a Chrome
   trace into the run folder, from which the device's activity per phase is measured.
"""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import os
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

from kit.breakdown import (
    BLOCKS,
    PARTS,
    PHASE_RANGES,
    RECOMPUTE,
    Breakdown,
    Mark,
    StepBounds,
    average_module_times,
    paper_block,
    paper_part,
    phase_times,
    step_ms,
    step_times,
    trace_activity,
)
from kit.protocol import Case, ProfileParams
from kit.results import DeviceTelemetry
from kit.workloads.synthetic import llama_config, random_batches
from kit.workloads.train import BATCH_POOL, DTYPES, _enable_recompute, check_available

LEARNING_RATE = 1.0e-5  # the pre-training stage's value; a step's time does not depend on it
GRADIENT_CLIPPING = 1.0  # as in the pre-training stage's DeepSpeed config (zero_config.py)

TIMERS = {
    "cuda": "CUDA events recorded on the compute stream at each edge; a time is the elapsed time "
    "between two events (no host timer around asynchronous work)",
    "cpu": "time.perf_counter at each edge: on a CPU every operator runs synchronously in the "
    "calling thread, forward and backward alike",
}
ACTIVITY_METHODS = {
    "cuda": "profiled step: each phase is a torch.profiler range ending with a device "
    "synchronisation, so the range holds all of the phase's GPU work; busy time is the union of "
    "the GPU kernels, memcpy and memset inside the range (kernel time: kernels only); idle share "
    "= 1 - busy / range. The profiler's own host work can widen the gaps between kernels: compare "
    "each range (activity.window_ms) with the phase's time in the plain steps (wall_ms)",
    "cpu": "idle share not measurable on a CPU: operators run synchronously in the calling "
    "thread, so there is no device queue to run dry. Recorded instead: the share of each phase's "
    "profiler range spent inside CPU operators (union of the trace's cpu_op events); the rest "
    "is the framework's Python between operators",
}
METHOD = [
    "phases: forward = model forward and loss; backward = loss.backward(); optimizer = gradient "
    "clipping, AdamW step and zero_grad",
    "module forward: from its forward pre-hook to its forward hook (torch.nn.Module hooks)",
    "module backward: from the moment the gradients of its outputs exist (an identity autograd "
    "node on its outputs) to the moment the gradients of its inputs exist or of its own "
    "parameters are accumulated, whichever is later",
    "RoPE and Attention are functions in transformers' modeling_llama (apply_rotary_pos_emb and "
    "the attention interface it looks up per call), not modules: they are timed by wrapping "
    "those functions with the same marks; RoPE also counts the rotary_emb module (cos/sin "
    "tables); Loss is the causal-LM cross entropy",
    "parts are summed over layers and averaged over the instrumented steps; blocks are measured "
    "the same way in steps of their own, in which only they are marked",
]
RECOMPUTE_METHOD = (
    "recomputation: forward passes run inside the backward phase are recompute time; each "
    "checkpointed layer's re-run is marked by the recompute context of torch.utils.checkpoint, "
    "and that window is taken out of the backward time of the part or block it ran inside"
)


class Clock:
    """Stamps on the device's own timeline, resolved to milliseconds after the step."""

    def __init__(self, kind: str):
        import time

        import torch

        self.kind = kind
        self._event = functools.partial(torch.cuda.Event, enable_timing=True)
        self._perf_counter = time.perf_counter

    def stamp(self):
        if self.kind == "cuda":
            event = self._event()
            event.record()
            return event
        return self._perf_counter()

    def milliseconds(self, origin, stamps: list) -> list[float]:
        if self.kind == "cuda":
            import torch

            torch.cuda.synchronize()
            return [origin.elapsed_time(stamp) for stamp in stamps]
        return [(stamp - origin) * 1e3 for stamp in stamps]


@functools.cache
def _gradient_mark():
    """An identity autograd function whose backward calls back when the gradients of its
    outputs have arrived (the pattern of torch.utils.hooks.BackwardHook)."""
    import torch

    class GradientMark(torch.autograd.Function):
        @staticmethod
        def forward(ctx, callback, *tensors):
            ctx.callback = callback
            return tensors

        @staticmethod
        def backward(ctx, *grads):
            ctx.callback()
            return (None, *grads)

    return GradientMark


def _through_mark(values: list, callback: Callable[[], None]) -> list:
    """`values` with each tensor that requires grad passed through one GradientMark."""
    import torch

    if not torch.is_grad_enabled():
        return values
    at = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor) and v.requires_grad]
    if not at:
        return values
    marked = _gradient_mark().apply(callback, *(values[i] for i in at))
    values = list(values)
    for i, tensor in zip(at, marked):
        values[i] = tensor
    return values


class Recorder:
    """Collects the marks of one instrumented step (from the main and the autograd threads)."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.raw: list[tuple] = []

    def mark(self, key: str, label: str, direction: str, edge: str) -> None:
        self.raw.append((self.clock.stamp(), key, label, direction, edge))

    def inputs(self, key: str, label: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        values = _through_mark([*args, *kwargs.values()], lambda: self.mark(key, label, "backward", "end"))
        return tuple(values[: len(args)]), dict(zip(kwargs, values[len(args) :]))

    def outputs(self, key: str, label: str, output):
        import torch

        def begin() -> None:
            self.mark(key, label, "backward", "begin")

        if isinstance(output, torch.Tensor):
            return _through_mark([output], begin)[0]
        if isinstance(output, tuple) and not hasattr(output, "_fields"):
            return tuple(_through_mark(list(output), begin))
        return output

    def timed(self, function: Callable, label: str, serial: itertools.count) -> Callable:
        """`function` with marks at the edges of its forward and backward passes."""

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            key = f"{label}#{next(serial)}"
            args, kwargs = self.inputs(key, label, args, kwargs)
            self.mark(key, label, "forward", "begin")
            output = function(*args, **kwargs)
            self.mark(key, label, "forward", "end")
            return self.outputs(key, label, output)

        return wrapper

    def take(self, origin) -> list[Mark]:
        raw, self.raw = self.raw, []
        times = self.clock.milliseconds(origin, [r[0] for r in raw])
        return [Mark(t, *r[1:]) for t, r in zip(times, raw)]


class _TimedAttentionInterfaces:
    """Stands in for transformers' ALL_ATTENTION_FUNCTIONS inside modeling_llama: the same
    interfaces, each returned wrapped with marks."""

    def __init__(self, inner, wrap: Callable[[Callable], Callable]):
        self._inner, self._wrap = inner, wrap

    def get_interface(self, name, default):
        return self._wrap(self._inner.get_interface(name, default))

    def __getattr__(self, name):
        return getattr(self._inner, name)


@contextmanager
def instrumented(model, recorder: Recorder, what: str):
    """Marks on every module that is a part ("parts", with RoPE and the attention call of
    transformers' Llama) or a block ("blocks") of the paper; all removed on exit. Parts and
    blocks are marked in separate steps, so that the blocks' marks add no time between parts."""
    import transformers.models.llama.modeling_llama as llama

    label_of = paper_part if what == "parts" else paper_block
    # A parameter shared by two modules (tied embeddings) is accumulated once, after both
    # backward passes: its hook would mark the end of neither, so it gets none.
    owners = Counter(id(p) for _, m in model.named_modules() for p in m.parameters(recurse=False))
    shared = {key for key, count in owners.items() if count > 1}
    handles = []
    for name, module in model.named_modules():
        label = label_of(name)
        if label is not None:
            handles += _hook_module(module, name, label, recorder, shared)
    serial = itertools.count()
    rope, interfaces = llama.apply_rotary_pos_emb, llama.ALL_ATTENTION_FUNCTIONS
    if what == "parts":
        llama.apply_rotary_pos_emb = recorder.timed(rope, "RoPE", serial)
        llama.ALL_ATTENTION_FUNCTIONS = _TimedAttentionInterfaces(
            interfaces, lambda function: recorder.timed(function, "Attention", serial)
        )
    try:
        yield
    finally:
        llama.apply_rotary_pos_emb, llama.ALL_ATTENTION_FUNCTIONS = rope, interfaces
        for handle in handles:
            handle.remove()


def _hook_module(module, key: str, label: str, recorder: Recorder, shared: set[int]) -> list:
    def before(module, args, kwargs):
        args, kwargs = recorder.inputs(key, label, args, kwargs)
        recorder.mark(key, label, "forward", "begin")
        return args, kwargs

    def after(module, args, kwargs, output):
        recorder.mark(key, label, "forward", "end")
        return recorder.outputs(key, label, output)

    def accumulated(parameter) -> None:
        recorder.mark(key, label, "backward", "end")

    handles = [
        module.register_forward_pre_hook(before, with_kwargs=True),
        module.register_forward_hook(after, with_kwargs=True),
    ]
    for parameter in module.parameters(recurse=False):
        if parameter.requires_grad and id(parameter) not in shared:
            handles.append(parameter.register_post_accumulate_grad_hook(accumulated))
    return handles


class RecomputeMarks:
    """torch.utils.checkpoint `context_fn`: marks each re-run of a checkpointed layer."""

    def __init__(self):
        self.recorder: Recorder | None = None
        self._serial = itertools.count()

    def __call__(self):
        return nullcontext(), self._window()

    @contextmanager
    def _window(self):
        recorder, key = self.recorder, f"{RECOMPUTE}#{next(self._serial)}"
        if recorder is not None:
            recorder.mark(key, RECOMPUTE, "forward", "begin")
        try:
            yield
        finally:  # also when the recomputation stops early (torch's early stop raises through here)
            if recorder is not None:
                recorder.mark(key, RECOMPUTE, "forward", "end")


class ProfileStep:
    """One pre-training step with its phase edges stamped."""

    def __init__(self, model, optimizer, batches, clock: Clock, synchronize: Callable[[], None]):
        import torch

        self.model, self.optimizer, self.batches = model, optimizer, batches
        self.clock, self.synchronize = clock, synchronize
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self._clip = torch.nn.utils.clip_grad_norm_
        self._index = 0

    def loss(self, logits, labels):
        return self.model.loss_function(logits=logits, labels=labels, vocab_size=self.model.config.vocab_size)

    def run(self, loss=None, profiled: bool = False) -> list:
        """Stamps at the step's begin and at the end of each phase. A profiled step names each
        phase with a profiler range that ends once the device has drained."""
        from torch.profiler import record_function

        @contextmanager
        def phase(name):
            if not profiled:
                yield
                return
            with record_function(PHASE_RANGES[name]):
                yield
                self.synchronize()

        loss = loss or self.loss
        input_ids = self.batches[self._index % len(self.batches)]
        self._index += 1
        self.synchronize()
        stamps = [self.clock.stamp()]
        with phase("forward"):
            value = loss(self.model(input_ids=input_ids).logits, input_ids)
        stamps.append(self.clock.stamp())
        with phase("backward"):
            value.backward()
        stamps.append(self.clock.stamp())
        with phase("optimizer"):
            self._clip(self.parameters, GRADIENT_CLIPPING)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        stamps.append(self.clock.stamp())
        return stamps

    def bounds(self, stamps: list) -> StepBounds:
        return StepBounds(*self.clock.milliseconds(stamps[0], stamps))


def _build_model(case: Case, recompute_marks: RecomputeMarks):
    import torch
    from transformers import LlamaForCausalLM

    params: ProfileParams = case.params
    placement = f"cuda:{torch.cuda.current_device()}" if case.device == "cuda" else "cpu"
    dtype = getattr(torch, DTYPES[params.dtype])
    with torch.device(placement):
        model = LlamaForCausalLM._from_config(llama_config(case.shape), dtype=dtype, attn_implementation=params.attention)
    model.train()
    if params.recompute:
        _enable_recompute(model, context_fn=recompute_marks)
    return model, placement


def _profiled_activity(step: ProfileStep, device_kind: str, trace_path: Path) -> dict:
    """Run one profiler warm-up step and one recorded step; export the trace; read it back."""
    from torch.profiler import ProfilerActivity, profile, schedule

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_kind == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=0, warmup=1, active=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(trace_path)),
    ) as prof:
        for _ in range(2):
            step.run(profiled=True)
            prof.step()
    with gzip.open(trace_path, "rt", encoding="utf-8") as handle:
        return trace_activity(json.load(handle), device_kind)


def _instrumented_steps(step: ProfileStep, model, recorder: Recorder, what: str, params: ProfileParams) -> list:
    """The measured steps with parts or blocks marked, after one discarded step that pays for
    the hooks' first use."""
    found = []
    with instrumented(model, recorder, what):
        loss = recorder.timed(step.loss, "Loss", itertools.count()) if what == "parts" else None
        for index in range(params.measured_steps + (1 if params.warmup_steps else 0)):
            stamps = step.run(loss=loss)
            marks = recorder.take(stamps[0])
            if params.warmup_steps and index == 0:
                continue
            found.append(step_times(marks, step.bounds(stamps)))
    return found


def measure(case: Case, device, out_dir: Path) -> tuple[dict, DeviceTelemetry]:
    """The breakdown, and NVML's telemetry over the plain measured steps (kit.energy)."""
    params: ProfileParams = case.params
    check_available(case)
    import torch

    recompute_marks = RecomputeMarks()
    model, placement = _build_model(case, recompute_marks)
    # Fused on a GPU: one kernel per step and no temporaries (foreach would copy the states once
    # more, 13 GB at 7B); the plain loop on a CPU.
    fused = case.device == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=fused)
    batches = [
        batch.to(placement)
        for batch in random_batches(case.shape.vocab_size, params.micro_batch, params.seq_len, BATCH_POOL, params.seed)
    ]
    clock = Clock(case.device)
    step = ProfileStep(model, optimizer, batches, clock, device.synchronize)

    for _ in range(params.warmup_steps):
        step.run()
    device.synchronize()
    sampler = device.telemetry_sampler()
    sampler.start()
    try:
        plain = [step.bounds(step.run()) for _ in range(params.measured_steps)]
        device.synchronize()
    finally:
        telemetry = sampler.stop()

    recorder = Recorder(clock)
    recompute_marks.recorder = recorder
    instrumented_steps = _instrumented_steps(step, model, recorder, "parts", params)
    block_steps = _instrumented_steps(step, model, recorder, "blocks", params)
    recompute_marks.recorder = None

    rank = int(os.environ.get("RANK", "0"))
    trace_path = Path(out_dir) / f"profile-trace-rank{rank}.json.gz"
    activity = _profiled_activity(step, case.device, trace_path)

    modules = average_module_times(instrumented_steps, PARTS)
    method = list(METHOD) + ([RECOMPUTE_METHOD] if params.recompute else [])
    missing = [part for part in PARTS if part not in {m.name for m in modules}]
    if missing:
        method.append(f"not timed (no marks recorded): {', '.join(missing)}")
    method.append(
        f"model: random initialisation, {sum(p.numel() for p in model.parameters())} parameters, "
        f"{params.dtype}, attention {model.config._attn_implementation}"
    )
    breakdown = Breakdown(
        device=case.device,
        timer=TIMERS[case.device],
        micro_batch=params.micro_batch,
        seq_len=params.seq_len,
        attention=model.config._attn_implementation,
        recompute=params.recompute,
        optimizer=(
            f"torch.optim.AdamW ({'fused' if fused else 'for-loop'}, lr {LEARNING_RATE}, weight decay 0, "
            f"{params.dtype} states, no master copy), gradient clipping {GRADIENT_CLIPPING}"
        ),
        measured_steps=params.measured_steps,
        step_ms=sum(step_ms(b) for b in plain) / len(plain),
        step_ms_per_step=[step_ms(b) for b in plain],
        instrumented_step_ms=sum(sum(s.walls_ms.values()) for s in instrumented_steps) / len(instrumented_steps),
        instrumented_step_ms_per_step=[sum(s.walls_ms.values()) for s in instrumented_steps],
        phases=phase_times(plain, instrumented_steps, activity),
        modules=modules,
        blocks=average_module_times(block_steps, BLOCKS),
        blocks_step_ms=sum(sum(s.walls_ms.values()) for s in block_steps) / len(block_steps),
        unmatched_marks=sum(s.unmatched_marks for s in instrumented_steps),
        trace_file=trace_path.name,
        activity_method=ACTIVITY_METHODS[case.device],
        method=method,
    )
    return breakdown.model_dump(mode="json"), telemetry
