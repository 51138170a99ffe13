"""One pre-training step, dissected on the device's own timeline (paper Tables V-VIII).

The model is train.py's pre-training model (random initialisation, the same config and
recomputation). It is stepped by plain torch AdamW rather than by the DeepSpeed engine: one
process has nothing to partition, and the phase edges (forward, backward, optimizer) are then
our own calls instead of points inside the engine. The states of that AdamW take the
parameters' dtype with no fp32 master copy, which is what lets a 7B step fit on one 80 GB GPU.

Three kinds of step, each measured on its own:
1. warm-up steps, not recorded;
2. plain steps: phase edges only, on the device's clock (CUDA events on a GPU; perf_counter on a
   CPU, where every operator runs synchronously in the calling thread); nothing else is added;
3. profiled steps, after one profiler warm-up step: torch.profiler records the device's own
   timeline (CUPTI on a GPU) with one profiler range per phase and per module of the paper, the
   module ranges opened and closed by forward hooks (one profiler record each, no device event,
   no autograd node), and the autograd sequence numbers each module call spans. On a GPU the
   profiler records only those ranges and the autograd nodes of the backward pass (not every
   ATen operator), so that a step bound by the host's launches is lengthened as little as
   possible; on a CPU it records every operator, whose time is the CPU's busy time.
   kit.measure.breakdown attributes each kernel (on a CPU, each operator's time) to the module and phase
   that launched it. The trace is kept in the run folder.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path

from kit.files.atomic import replacing
from kit.measure.breakdown import (
    CALL_PREFIX,
    CALLS_KEY,
    MODULE_PREFIX,
    PHASE_RANGES,
    RECOMPUTE_RANGE,
    paper_block,
    paper_part,
    summarize_steps,
    timeline,
)
from kit.plan.protocol import Case, ProfileParams
from kit.rundir.breakdown import Breakdown
from kit.rundir.schema import DeviceTelemetry
from kit.workloads.harness import Device, SelfTimedWorkload
from kit.workloads.synthetic import llama_config, random_batches
from kit.workloads.train import BATCH_POOL, DTYPES, _enable_recompute, check_available

LEARNING_RATE = 1.0e-5  # the pre-training stage's value; a step's time does not depend on it
GRADIENT_CLIPPING = 1.0  # as in the pre-training stage's DeepSpeed config (zero_config.py)

TIMERS = {
    "cuda": "plain steps: CUDA events recorded on the compute stream at the phase edges only; profiled steps: "
    "the GPU's own timeline as CUPTI records it (torch.profiler)",
    "cpu": "plain steps: time.perf_counter at the phase edges only (on a CPU every operator runs synchronously in "
    "the calling thread); profiled steps: torch.profiler's CPU operators",
}
PROFILERS = {
    "scoped": "torch.profiler (Kineto), recording only user ranges and the backward pass's autograd nodes "
    "(RecordScope USER_SCOPE, BACKWARD_FUNCTION) and the device's activity",
    "full": "torch.profiler (Kineto), recording every operator",
}
METHOD = [
    "phases: forward = model forward and loss; backward = loss.backward(); optimizer = gradient clipping, AdamW "
    "step and zero_grad; the phase times and the step time are the plain steps'",
    "device time: each kernel, memcpy and memset of a profiled step is joined to its launching call by its CUPTI "
    "correlation id and attributed to the profiler ranges open on the launching thread at that moment (on a CPU: "
    "each slice of operator time to the ranges open during it)",
    "forward: the innermost module range (kit::module::<name>; kit::call::RoPE, Attention and Loss for the "
    "functions transformers calls: apply_rotary_pos_emb, the attention interface, the causal-LM loss); RoPE also "
    "counts the rotary_emb module (cos/sin tables)",
    "backward: the innermost autograd node (a backward function), whose sequence number lies within those of one "
    "module call's forward (recorded by the hooks) -> that module",
    "parts are summed over layers and averaged over the profiled steps; blocks (decoder layers, self-attention, "
    "MLP) contain parts and are never added to them; other: device time in no part (residual adds, the SwiGLU "
    "product, casts), listed by operator",
    "idle: each phase's window on the device less the union of its device events; the phases run back to back "
    "(the step starts on an idle device and ends when its last device event does)",
]
RECOMPUTE_METHOD = (
    "recomputation: a module range opened inside the backward phase is a checkpointed layer's re-run: its device "
    "time is that part's recompute time, not its backward time"
)


def _range_calls():
    """(enter, exit) of a profiler range in the user scope, the cheapest the installed torch has."""
    try:
        from torch._C._autograd import _record_function_with_args_enter as enter
        from torch._C._autograd import _record_function_with_args_exit as leave

        return enter, leave
    except ImportError:  # another torch: the context manager's own calls
        from torch.profiler import record_function

        def enter_range(name):
            found = record_function(name)
            found.__enter__()
            return found

        return enter_range, lambda found: found.__exit__(None, None, None)


class ModuleRanges:
    """A profiler range around every call of a module that is one of the paper's parts or blocks,
    and around RoPE, the attention call and the loss; each call's span of autograd sequence
    numbers is kept (`calls`), to name the module of each node of the backward pass. Forward
    hooks that are always called, so that a recomputation torch.utils.checkpoint stops early
    still closes its ranges."""

    def __init__(self, model):
        import torch

        self.model = model
        self.calls: list[list] = []
        self.enter, self.leave = _range_calls()
        self._sequence = torch.autograd._get_sequence_nr
        self._main = threading.main_thread().ident
        self._open: dict[int, list] = {}

    def _thread(self) -> str:
        return "main" if threading.get_ident() == self._main else "worker"

    def begin(self, name: str) -> tuple:
        return name, self.enter(name), self._sequence()

    def end(self, opened: tuple) -> None:
        name, handle, first = opened
        self.leave(handle)
        self.calls.append([name, self._thread(), first, self._sequence()])

    def wrap(self, function: Callable, part: str) -> Callable:
        name = CALL_PREFIX + part

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            opened = self.begin(name)
            try:
                return function(*args, **kwargs)
            finally:
                self.end(opened)

        return wrapper

    @contextmanager
    def installed(self):
        import transformers.models.llama.modeling_llama as llama

        handles = []
        for qualified, module in self.model.named_modules():
            if qualified and (paper_part(qualified) or paper_block(qualified)):
                handles += self._hook(module, MODULE_PREFIX + qualified)
        rope, interfaces = llama.apply_rotary_pos_emb, llama.ALL_ATTENTION_FUNCTIONS
        llama.apply_rotary_pos_emb = self.wrap(rope, "RoPE")
        llama.ALL_ATTENTION_FUNCTIONS = _RangedAttentionInterfaces(interfaces, lambda f: self.wrap(f, "Attention"))
        try:
            yield self
        finally:
            llama.apply_rotary_pos_emb, llama.ALL_ATTENTION_FUNCTIONS = rope, interfaces
            for handle in handles:
                handle.remove()

    def _hook(self, module, name: str) -> list:
        stack = self._open.setdefault(id(module), [])

        def before(module, args):
            stack.append(self.begin(name))

        def after(module, args, output):
            if stack:
                self.end(stack.pop())

        return [module.register_forward_pre_hook(before), module.register_forward_hook(after, always_call=True)]


class RecomputeRanges:
    """torch.utils.checkpoint `context_fn`: in a profiled step, each re-run of a checkpointed
    decoder layer inside a profiler range (transformers checkpoints a layer's forward, inside its
    module hooks, so the re-run has no module range of its own); elsewhere nothing."""

    def __init__(self):
        self.ranges: ModuleRanges | None = None

    def __call__(self):
        return nullcontext(), self._window()

    @contextmanager
    def _window(self):
        ranges = self.ranges
        opened = ranges.enter(RECOMPUTE_RANGE) if ranges is not None else None
        try:
            yield
        finally:  # also when the recomputation stops early (torch's early stop raises through here)
            if opened is not None:
                ranges.leave(opened)


class _RangedAttentionInterfaces:
    """Stands in for transformers' ALL_ATTENTION_FUNCTIONS inside modeling_llama: the same
    interfaces, each returned inside a profiler range."""

    def __init__(self, inner, wrap: Callable[[Callable], Callable]):
        self._inner, self._wrap = inner, wrap

    def get_interface(self, name, default):
        return self._wrap(self._inner.get_interface(name, default))

    def __getattr__(self, name):
        return getattr(self._inner, name)


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


class ProfileStep:
    """One pre-training step: plain (its phase edges stamped), or profiled (its phases ranged)."""

    def __init__(self, model, optimizer, batches, clock: Clock, synchronize: Callable[[], None]):
        import torch

        self.model, self.optimizer, self.batches = model, optimizer, batches
        self.clock, self.synchronize = clock, synchronize
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        self._clip = torch.nn.utils.clip_grad_norm_
        self._index = 0

    def loss(self, logits, labels):
        return self.model.loss_function(logits=logits, labels=labels, vocab_size=self.model.config.vocab_size)

    def _batch(self):
        input_ids = self.batches[self._index % len(self.batches)]
        self._index += 1
        return input_ids

    def _optimize(self) -> None:
        self._clip(self.parameters, GRADIENT_CLIPPING)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def run(self) -> list:
        """A plain step: stamps at its begin (the device idle) and at the end of each phase."""
        input_ids = self._batch()
        self.synchronize()
        stamps = [self.clock.stamp()]
        value = self.loss(self.model(input_ids=input_ids).logits, input_ids)
        stamps.append(self.clock.stamp())
        value.backward()
        stamps.append(self.clock.stamp())
        self._optimize()
        stamps.append(self.clock.stamp())
        return stamps

    def run_profiled(self, ranges: ModuleRanges, loss: Callable) -> None:
        """A profiled step: the same calls, each phase inside its profiler range, no stamps."""
        enter, leave = ranges.enter, ranges.leave
        input_ids = self._batch()
        self.synchronize()
        opened = enter(PHASE_RANGES["forward"])
        value = loss(self.model(input_ids=input_ids).logits, input_ids)
        leave(opened)
        opened = enter(PHASE_RANGES["backward"])
        value.backward()
        leave(opened)
        opened = enter(PHASE_RANGES["optimizer"])
        self._optimize()
        leave(opened)

    def walls(self, stamps: list) -> dict[str, float]:
        """A plain step's phases in milliseconds."""
        begin, forward, backward, optimizer = self.clock.milliseconds(stamps[0], stamps)
        return {"forward": forward - begin, "backward": backward - forward, "optimizer": optimizer - backward}


def _build_model(case: Case, recompute_ranges: RecomputeRanges):
    import torch
    from transformers import LlamaForCausalLM

    params, shape = case.params_as(ProfileParams), case.model_shape
    placement = f"cuda:{torch.cuda.current_device()}" if case.device == "cuda" else "cpu"
    dtype = getattr(torch, DTYPES[params.dtype])
    with torch.device(placement):
        model = LlamaForCausalLM._from_config(llama_config(shape), dtype=dtype, attn_implementation=params.attention)
    model.train()
    if params.recompute:
        _enable_recompute(model, context_fn=recompute_ranges)
    return model, placement


def _scoped_profiler_available() -> bool:
    """Whether this torch lets the kit choose what the profiler records (its private calls)."""
    try:
        from torch._C._autograd import (  # noqa: F401
            _add_metadata_json,
            _disable_profiler,
            _enable_profiler,
        )
        from torch._C._profiler import RecordScope  # noqa: F401
        from torch.autograd.profiler import profile
    except ImportError:
        return False
    return hasattr(profile, "_prepare_trace") and "scopes" in (_enable_profiler.__doc__ or "")


def record_trace(
    step: ProfileStep,
    model,
    device_kind: str,
    trace_path: Path,
    steps: int,
    scoped: bool,
    recompute_ranges: RecomputeRanges | None = None,
) -> str:
    """One profiler warm-up step, then `steps` profiled steps with every module ranged; the
    gzipped Chrome trace written to `trace_path`, with the module calls' sequence numbers as
    its metadata. Returns what recorded it (PROFILERS). `scoped`: only the ranges and the
    backward pass's autograd nodes are recorded, where this torch allows it."""
    ranges = ModuleRanges(model)
    loss = ranges.wrap(step.loss, "Loss")
    if recompute_ranges is not None:
        recompute_ranges.ranges = ranges
    with ranges.installed(), _detached(recompute_ranges):
        if _scoped_profiler_available():
            from torch._C._autograd import (
                _add_metadata_json,
                _disable_profiler,
                _enable_profiler,
            )
            from torch._C._profiler import RecordScope
            from torch.autograd.profiler import profile as autograd_profile

            profiler = autograd_profile(use_device="cuda" if device_kind == "cuda" else None, use_kineto=True)
            profiler._prepare_trace()  # the warm-up step: the device's activity is collected, then dropped
            step.run_profiled(ranges, loss)
            step.synchronize()
            ranges.calls.clear()
            scopes = {RecordScope.USER_SCOPE, RecordScope.BACKWARD_FUNCTION} if scoped else set()
            try:
                # Scopes are this torch's (_scoped_profiler_available), not its stub's.
                _enable_profiler(profiler.config(), profiler.kineto_activities, scopes)  # type: ignore[call-arg]
            except (TypeError, RuntimeError):  # a torch that takes no scopes: every operator recorded
                _enable_profiler(profiler.config(), profiler.kineto_activities)
                scoped = False
            try:
                for _ in range(steps):
                    step.run_profiled(ranges, loss)
                step.synchronize()
                _add_metadata_json(CALLS_KEY, json.dumps(ranges.calls))
            finally:
                result = _disable_profiler()
            with tempfile.TemporaryDirectory() as scratch:
                plain = Path(scratch) / "trace.json"
                result.save(str(plain))
                _gzip(plain, trace_path)
            return "scoped" if scoped else "full"
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_kind == "cuda" else [])
        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps)) as prof:
            for index in range(steps + 1):
                if index == 1:
                    ranges.calls.clear()
                step.run_profiled(ranges, loss)
                if index == steps:
                    step.synchronize()
                    prof.add_metadata_json(CALLS_KEY, json.dumps(ranges.calls))
                prof.step()
        with tempfile.TemporaryDirectory() as scratch:
            plain = Path(scratch) / "trace.json"
            prof.export_chrome_trace(str(plain))
            _gzip(plain, trace_path)
        return "full"


@contextmanager
def _detached(recompute_ranges: RecomputeRanges | None):
    try:
        yield
    finally:
        if recompute_ranges is not None:
            recompute_ranges.ranges = None


def _gzip(source: Path, target: Path) -> None:
    with source.open("rb") as raw, replacing(target) as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as handle:
        shutil.copyfileobj(raw, handle)


def measure(case: Case, device: Device, out_dir: Path) -> tuple[Breakdown, DeviceTelemetry]:
    """The breakdown, and NVML's telemetry over the plain measured steps (kit.measure.energy)."""
    params, shape = case.params_as(ProfileParams), case.model_shape
    check_available(case)
    import torch

    recompute_ranges = RecomputeRanges()
    model, placement = _build_model(case, recompute_ranges)
    # Fused on a GPU: one kernel per step and no temporaries (foreach would copy the states once
    # more, 13 GB at 7B); the plain loop on a CPU.
    fused = case.device == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=fused)
    batches = [
        batch.to(placement)
        for batch in random_batches(shape.vocab_size, params.micro_batch, params.seq_len, BATCH_POOL, params.seed)
    ]
    clock = Clock(case.device)
    step = ProfileStep(model, optimizer, batches, clock, device.synchronize)

    for _ in range(params.warmup_steps):
        step.run()
    device.synchronize()
    sampler = device.telemetry_sampler()
    sampler.start()
    try:
        plain = [step.walls(step.run()) for _ in range(params.measured_steps)]
        device.synchronize()
    finally:
        telemetry = sampler.stop()

    rank = int(os.environ.get("RANK", "0"))
    trace_path = Path(out_dir) / f"profile-trace-rank{rank}.json.gz"
    # A GPU records only the ranges and the autograd nodes (cheap); a CPU every operator, whose
    # time is its busy time.
    recorded_by = record_trace(
        step,
        model,
        case.device,
        trace_path,
        params.measured_steps,
        scoped=case.device == "cuda",
        recompute_ranges=recompute_ranges,
    )
    with gzip.open(trace_path, "rt", encoding="utf-8") as handle:
        traced = timeline(json.load(handle), case.device)

    method = list(METHOD) + ([RECOMPUTE_METHOD] if params.recompute else [])
    method.append(
        f"model: random initialisation, {sum(p.numel() for p in model.parameters())} parameters, "
        f"{params.dtype}, attention {model.config._attn_implementation}"
    )
    breakdown = summarize_steps(
        traced,
        plain,
        device=case.device,
        timer=TIMERS[case.device],
        profiler=PROFILERS[recorded_by],
        micro_batch=params.micro_batch,
        seq_len=params.seq_len,
        attention=model.config._attn_implementation,
        recompute=params.recompute,
        optimizer=(
            f"torch.optim.AdamW ({'fused' if fused else 'for-loop'}, lr {LEARNING_RATE}, weight decay 0, "
            f"{params.dtype} states, no master copy), gradient clipping {GRADIENT_CLIPPING}"
        ),
        measured_steps=params.measured_steps,
        trace_file=trace_path.name,
        method=method,
    )
    return breakdown, telemetry


WORKLOAD = SelfTimedWorkload(measure)
