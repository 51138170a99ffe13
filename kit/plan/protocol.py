"""The protocol as data: manifests/protocol.yaml -> a Plan of Cases.

A Case is one cell of the paper's matrix (stage x model x method x GPU count) with every
parameter resolved, so that its result can be read without the manifest that produced it.
Case ids are derived only from those axes, so two runs on two machines match case by case.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from kit.credentials import looks_like_a_credential
from kit.files.names import checked_name
from kit.host.this_host import Host
from kit.manifest import ManifestError, manifests_dir, read_yaml, validate, whole_number
from kit.theory.analytic import (
    SERVING_MEMORY_SHARE,
    LlamaShape,
    serving_gpus_needed,
    serving_memory,
    tensor_parallel_sizes,
)


class Strict(BaseModel):
    """Every manifest's models (the protocol, the reference, the images lock) reject unknown keys:
    a typo must not silently fall back to a default, nor a misspelt bound vanish."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSpec(LlamaShape):
    """A model of the protocol: its shape (throughput depends on it, not on weights) and source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_position_embeddings: int = Field(gt=0)
    source: str


Name = Annotated[str, AfterValidator(checked_name)]
GpuCount = Annotated[int, Field(gt=0, le=4096, strict=True)]  # `true` or "2" is not a count
# A time limit: at most 30 days (a 4000-digit timeout passed every check, then overflowed the
# clock of the process that waits on a case, and left the run interrupted).
Seconds = Annotated[int, Field(gt=0, le=30 * 86400)]
# The cases a plan may hold (the paper profile has a few hundred): a manifest crossing more (60
# models by 4,096 GPU counts) is refused before a case is made, instead of taking minutes to list.
MAX_PLAN_CASES = 5000


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def checked_env(env: dict[str, str]) -> dict[str, str]:
    """Variables a process can be given (a NUL or an odd name made the launch fail, and the run
    wait for ranks that never started), and no credential: a case's variables are recorded in
    run.json, case.json and the report. Tokens come from the environment kit runs in (HF_TOKEN
    is handed to the engine from there, never written down)."""
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise ValueError(f"{name[:60]!r} is not a variable name (letters, digits and '_', at most 128)")
        if "\x00" in value or len(value) > 4096:
            raise ValueError(f"{name}: a value holds a NUL byte or is longer than 4096 characters")
        if looks_like_a_credential(name, value):
            raise ValueError(
                f"{name} looks like a credential, and a case's env is written into every run "
                "directory and report: set it in the environment kit runs in instead"
            )
    return env


class CaseParams(Strict):
    """What every case has: its independent runs, a seed, a time limit, its environment.

    Numbers and flags as written: pydantic would otherwise read `runs: true` as 1, `"350"` as
    350 and `recompute: "yes"` as on, and the case would run what nobody wrote."""

    model_config = ConfigDict(strict=True)
    runs: int = Field(gt=0)
    seed: int
    timeout_s: Seconds
    env: Annotated[dict[str, str], AfterValidator(checked_env)] = {}


class StepParams(CaseParams):
    """Training steps of a Llama on random tokens: shape, precision, steps timed and not."""

    seq_len: int = Field(gt=0)
    micro_batch: int = Field(gt=0)
    dtype: Literal["bf16", "fp16", "fp32"]
    warmup_steps: int = Field(ge=0)
    measured_steps: int = Field(gt=0)
    recompute: bool = False
    # "eager" (matmul-softmax-matmul) is "FlashAttention off": on a GPU, SDPA dispatches bf16
    # attention to a flash kernel of its own (see the stages' interpretation).
    attention: Literal["eager", "sdpa", "flash_attention_2"] = "eager"

    @property
    def tokens_per_step(self) -> int:
        """Tokens one process consumes per step: micro-batch x sequence length."""
        return self.micro_batch * self.seq_len


class Soak(Strict):
    """A case measured for `seconds` on end, in windows of `window_s` each with its throughput,
    clocks and temperature (kit run --soak, kit/plan/soak.py): whether a server holds its speed."""

    seconds: float = Field(gt=0)
    window_s: float = Field(gt=0)


class MaxBatchSearch(Strict):
    """The largest micro-batch a training case holds (paper Table IV): trials from `start`
    (None: the memory model's prediction on a GPU, 1 on CPU) doubling until one runs out of
    memory, then bisecting; each trial its own launch, at most `max_trials` of them."""

    start: int | None = Field(default=None, gt=0)
    max_trials: int = Field(default=12, gt=1, le=40)
    largest: int = Field(default=4096, gt=0)  # no trial beyond: a bound for the doubling


class TrainParams(StepParams):
    """Every knob of a pre-training or fine-tuning case."""

    kind: Literal["train"] = "train"
    optimizer: Literal["adamw"]
    optimizer_impl: Literal["deepspeed", "torch"]
    learning_rate: float = Field(gt=0)
    zero_stage: Annotated[Literal[0, 2, 3], BeforeValidator(whole_number)] = 0
    offload: bool = False
    quantization: Literal["none", "nf4-double"] = "none"
    peft: Literal["none", "lora", "qlora"] = "none"
    lora_rank: int = Field(default=64, gt=0)
    lora_alpha: int = Field(default=16, gt=0)
    lora_targets: tuple[str, ...] = Field(default=(), strict=False)  # a YAML list
    # How a case's independent runs get their processes: `per_run`, a fresh launch each (the
    # protocol's runs); `shared`, one launch does them one after another, each run building its
    # model and engine anew while the imports and the process group are kept (the CPU smoke
    # profile: seconds of imports per run are most of its time). Recorded in every result.
    launch: Literal["per_run", "shared"] = "per_run"
    # The training engine: DeepSpeed's (every paper method), or Megatron-LM's (megatron-core:
    # tensor parallel over `tensor_parallel` ranks, data parallel over the rest, its distributed
    # optimizer), the paper's Table II comparison.
    framework: Literal["deepspeed", "megatron"] = "deepspeed"
    tensor_parallel: int = Field(default=1, gt=0)
    # Set on a max-batch case (stage maxbatch): its runs are the search's trials.
    max_batch_search: MaxBatchSearch | None = None
    soak: Soak | None = None  # set on a soak case (kit/plan/soak.py): its one run measures windows for that long
    # CPU only: each of the case's processes may hold this much data (RLIMIT_DATA, which counts
    # the anonymous mappings torch's allocator takes), so that a real out-of-memory bounds a CPU
    # run as a GPU's memory bounds a GPU one. A GPU case is bounded by its GPU.
    memory_cap_gib: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _tensor_parallel_is_megatrons(self) -> TrainParams:
        if self.tensor_parallel > 1 and self.framework != "megatron":
            raise ValueError("tensor_parallel splits layers in Megatron-LM's engine only (framework: megatron)")
        return self


class ProfileParams(StepParams):
    """One pre-training step broken down by phase and module (the paper's Tables V-VIII)."""

    kind: Literal["profile"] = "profile"


class ConcurrencySweep(Strict):
    """Steady-state points after the burst, on the same engine (kit.serve.sweep): at each
    concurrency N (1, 2, 4, ... and the largest, `max_concurrency` or the burst's size) the client
    keeps N requests in flight, sending the next as one ends, as `vllm bench serve
    --max-concurrency N` does. A point sends max(min_requests, requests_per_slot x N) requests:
    enough for a p99 of its own, and several per slot, so that the first wave (N sent at once)
    and the last (the slots emptying) are a small part of it; but none after `max_point_s` (the
    requests in flight then finish), so that a slow host's sweep takes a bounded time."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    max_concurrency: int | None = Field(default=None, gt=0)  # None: the burst's size
    requests_per_slot: int = Field(gt=0)
    min_requests: int = Field(gt=0)
    max_point_s: Seconds | None = None  # None: every planned request is sent

    def levels(self, prompts: int) -> list[int]:
        """The concurrencies of the points, ascending: powers of two below the largest, then it."""
        top = self.max_concurrency or prompts
        return sorted({2**k for k in range(top.bit_length()) if 2**k < top} | {top})

    def requests_at(self, concurrency: int) -> int:
        return max(self.min_requests, self.requests_per_slot * concurrency)


class Lengths(Strict):
    """Tokens per request, drawn uniformly from [low_share x tokens, tokens], seeded; low_share 1
    (the default) is always `tokens`, as the paper's burst."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    tokens: int = Field(gt=0)
    low_share: float = Field(default=1.0, gt=0, le=1)

    @property
    def low(self) -> int:
        return max(1, math.ceil(self.low_share * self.tokens))


class LengthPair(Strict):
    """A request's prompt and output lengths, each a distribution."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    input: Lengths
    output: Lengths


# SemiAnalysis InferenceMAX's (InferenceX's) input/output pairs, each length drawn from
# U[0.8 L, L] (its README: ISL/OSL 1024/1024, 1024/8192, 8192/1024, RANDOM_RANGE_RATIO 0.8).
LENGTH_PRESETS: dict[str, LengthPair] = {
    f"inferencex-{name}": LengthPair(
        input=Lengths(tokens=isl, low_share=0.8), output=Lengths(tokens=osl, low_share=0.8)
    )
    for name, isl, osl in (("1k1k", 1024, 1024), ("1k8k", 1024, 8192), ("8k1k", 8192, 1024))
}


class SharedPrefix(Strict):
    """A multi-turn chat workload (kit.serve.prefix): `conversations` at once, each of `turns`
    requests sent one after another, every prompt the same system prefix of `shared_tokens`, then
    the conversation so far (each earlier turn's user text of `turn_tokens` and an answer of
    `answer_tokens`) and the new user text; each asks for `answer_tokens`. With the engine's
    prefix caching on, and (`compare_off`) on a second start of the engine with it off."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    conversations: int = Field(gt=0)
    turns: int = Field(gt=1)
    shared_tokens: int = Field(gt=0)
    turn_tokens: int = Field(gt=0)
    answer_tokens: int = Field(gt=0)
    compare_off: bool = True

    @property
    def longest_prompt(self) -> int:
        return self.shared_tokens + self.turns * self.turn_tokens + (self.turns - 1) * self.answer_tokens + 8


class RateSearch(Strict):
    """Arrivals at a rate after the sweep, on the same engine (kit.serve.rate): requests sent at
    seeded Poisson arrival times (or evenly spaced: `process` constant), as MLPerf Inference's
    Server scenario and `vllm bench serve --request-rate` send them. A point at rate R sends
    max(min_requests, R x min_duration_s) requests. The search doubles the rate from `start_rps`
    until a point misses the objectives or is past saturation (or `max_rps`), then bisects
    between the highest rate that met them and the lowest that did not, `bisections` times,
    never starting a point after `max_search_s`: the capacity is a rate interval, not a guess.
    The objectives (p99 TTFT and TPOT) are MLPerf's Llama-2-70B Server ones unless given."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    process: Literal["poisson", "constant"] = "poisson"
    start_rps: float = Field(gt=0)
    max_rps: float = Field(gt=0)
    min_requests: int = Field(gt=1)
    min_duration_s: float = Field(gt=0)
    bisections: int = Field(ge=0)
    max_search_s: int = Field(gt=0)
    slo_ttft_ms: float = Field(default=2000, gt=0)
    slo_tpot_ms: float = Field(default=200, gt=0)
    lengths: LengthPair | str | None = None  # None: the burst's; a name: one of LENGTH_PRESETS

    @model_validator(mode="after")
    def _known_preset(self) -> RateSearch:
        if isinstance(self.lengths, str) and self.lengths not in LENGTH_PRESETS:
            raise ValueError(f"no length preset {self.lengths!r} (known: {', '.join(LENGTH_PRESETS)})")
        return self

    def length_pair(self, input_tokens: int, output_tokens: int) -> LengthPair:
        """The lengths its requests are drawn from: its own, a preset's, or the burst's (fixed)."""
        if isinstance(self.lengths, str):
            return LENGTH_PRESETS[self.lengths]
        if self.lengths is not None:
            return self.lengths
        return LengthPair(input=Lengths(tokens=input_tokens), output=Lengths(tokens=output_tokens))

    @model_validator(mode="after")
    def _start_below_max(self) -> RateSearch:
        if self.start_rps > self.max_rps:
            raise ValueError(f"start_rps ({self.start_rps}) is above max_rps ({self.max_rps})")
        return self

    def requests_at(self, rate: float) -> int:
        return max(self.min_requests, math.ceil(rate * self.min_duration_s))


class ServeParams(CaseParams):
    """Serving under the paper's burst: N prompts of L tokens, all released at t=0; then, where
    `sweep` is set, steady-state points at rising concurrency on the same engine."""

    kind: Literal["serve"] = "serve"
    engine: str = ""
    prompts: int = Field(gt=0)
    input_tokens: int = Field(gt=0)
    max_output_tokens: int = Field(gt=0)
    arrival: Literal["burst"]
    dtype: Literal["bf16", "fp16", "fp32"]
    ignore_eos: bool = True  # every request generates max_output_tokens, where the engine allows
    max_batch_requests: int | None = Field(default=None, gt=0)  # None: the engine's own default
    warmup_requests: int = Field(default=1, ge=0)  # untimed, after readiness, before the burst
    ready_timeout_s: Seconds = 1800  # engine start (weights load) until healthy
    model_path: str | None = None  # a directory of real weights; None: the synthetic checkpoint
    sweep: ConcurrencySweep | None = None  # None: the burst alone
    rates: RateSearch | None = None  # None: no arrivals at a rate, no capacity search
    prefix: SharedPrefix | None = None  # None: no multi-turn shared-prefix workload
    prefix_caching: bool = True  # the engine's prefix cache; off on the shared-prefix workload's second start
    # After the rest: the engine started again from a cold cache, then a warm one (kit.serve.startup).
    startup: bool = False
    soak: Soak | None = None  # set on a soak case (kit/plan/soak.py): bursts one after another for that long


def longest_request(params: ServeParams) -> tuple[int, int]:
    """The most prompt and output tokens any request of the case may have (the engine's context)."""
    prompt, output = params.input_tokens, params.max_output_tokens
    if params.rates is not None:
        pair = params.rates.length_pair(params.input_tokens, params.max_output_tokens)
        prompt, output = max(prompt, pair.input.tokens), max(output, pair.output.tokens)
    if params.prefix is not None:
        prompt, output = max(prompt, params.prefix.longest_prompt), max(output, params.prefix.answer_tokens)
    return prompt, output


class CommParams(CaseParams):
    """A collective swept over message sizes, nccl-tests style."""

    kind: Literal["comm"] = "comm"
    collective: str = ""
    backend: Literal["nccl-tests", "torch"]
    dtype: Literal["float32", "float16", "bfloat16"]  # nccl-tests -d float / half / bfloat16
    min_bytes: int = Field(gt=0)
    max_bytes: int = Field(gt=0)
    step_factor: int = Field(gt=1)
    warmup_iters: int = Field(ge=0)
    iters: int = Field(gt=0)

    @model_validator(mode="after")
    def _sizes_ascend(self) -> CommParams:
        if self.min_bytes > self.max_bytes:
            raise ValueError(
                f"min_bytes ({self.min_bytes}) is above max_bytes ({self.max_bytes}): the sweep would have no size"
            )
        return self


class CalibrateParams(CaseParams):
    """What the host's devices achieve, measured in preflight (kit/measure/calibration.py): matmuls of
    the plan's linear shapes, a large copy in device memory, pinned copies between host and
    device (GPU only) and one all-reduce across the GPUs (more than one only); each `repeats`
    times, each repeat as many iterations as fill `seconds_per_repeat`."""

    kind: Literal["calibrate"] = "calibrate"
    dtype: Literal["bf16", "fp32"]
    matmul_shapes: tuple[tuple[int, int, int], ...] = Field(min_length=1, strict=False)  # (M, K, N)
    copy_bytes: int = Field(gt=0)
    transfer_bytes: int | None = Field(default=None, gt=0)
    all_reduce_bytes: int | None = Field(default=None, gt=0)
    repeats: int = Field(gt=0)
    seconds_per_repeat: float = Field(gt=0)


class SdcParams(CaseParams):
    """The silent-data-corruption check of preflight (kit/measure/sdc.py): the same short
    deterministic training (the case's model cut to `layers` layers, fixed seed and data) on every
    device, each alone, and an all-reduce of `all_reduce_elements` known values per pair of ranks."""

    kind: Literal["sdc"] = "sdc"
    dtype: Literal["fp32"] = "fp32"  # exact bits are compared: no lower precision's own rounding
    layers: int = Field(gt=0)
    steps: int = Field(gt=0)
    micro_batch: int = Field(gt=0)
    seq_len: int = Field(gt=0)
    all_reduce_elements: int = Field(gt=0)


Params = Annotated[
    TrainParams | ServeParams | CommParams | ProfileParams | CalibrateParams | SdcParams, Field(discriminator="kind")
]
P = TypeVar("P", TrainParams, ServeParams, CommParams, ProfileParams, CalibrateParams, SdcParams, StepParams)
PARAM_MODELS: dict[str, type[BaseModel]] = {
    "train": TrainParams,
    "serve": ServeParams,
    "comm": CommParams,
    "profile": ProfileParams,
}


class Option(Strict):
    """One letter of the paper's method names (Z2, O, Q, ...) as the parameters it sets."""

    label: str
    params: dict[str, Any] = {}
    image: Name | None = None  # an option that needs its own image (a serving engine) names it
    requires_any: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()


class Variant(Strict):
    """A named change of a case's environment that the paper measured as a platform of its own
    (RTX3090 with and without NVLink): the case again, with `env` on top of its own."""

    label: str
    env: Annotated[dict[str, str], AfterValidator(checked_env), Field(min_length=1)]
    cpu_note: str  # what the variables do (nothing) where a case runs on CPU over gloo


class Matrix(Strict):
    """The axes a stage is crossed over; a profile may narrow any of them."""

    models: tuple[Name, ...] = ()
    methods: tuple[Name, ...] = ()
    gpus: tuple[GpuCount, ...] = ()


# How a stage's GPU counts follow a GPU host: `fixed` as written (a case needing more GPUs than
# the host has is skipped, saying so); `host` as written where the host has that many, else on
# all of the host's GPUs (a fitted case); `weights` (serving) as written where the host has that
# many, else on the fewest GPUs that hold the model (a fitted case); `sweep` 1, 2, 4, ... up to
# all of the host's GPUs; `all` every GPU of the host (at least 2: a collective needs two).
Fit = Literal["fixed", "host", "weights", "sweep", "all"]


class StageSpec(Strict):
    description: str
    workload: Literal["train", "serve", "comm", "profile"]
    image: Name
    options: str
    params: dict[str, Any]
    unpublished: tuple[str, ...] = ()
    interpretation: dict[str, str] = {}
    matrix: Matrix
    # How the stage's GPU counts follow a GPU host (Fit).
    fit: Fit = "fixed"
    # Variants (Protocol.variants) each of the stage's multi-GPU cases is run in as well.
    variants: tuple[Name, ...] = ()


class ProfileStage(Strict):
    models: tuple[Name, ...] | None = None
    methods: tuple[Name, ...] | None = None
    gpus: tuple[GpuCount, ...] | None = None
    fit: Fit | None = None  # the stage's own (StageSpec.fit) unless set: a cluster's counts are fixed
    variants: tuple[Name, ...] | None = None
    params: dict[str, Any] = {}


class Profile(Strict):
    description: str
    device: Literal["cuda", "cpu"]
    comparable_to_reference: bool
    stages: dict[str, ProfileStage]
    # A stage's image -> the image this profile runs it in (the CPU profile runs all in `smoke`).
    images: dict[Name, Name] = {}

    @model_validator(mode="after")
    def _cpu_is_never_the_reference(self) -> Profile:
        if self.comparable_to_reference and self.device == "cpu":
            raise ValueError("a CPU profile cannot be comparable_to_reference: the paper measured GPUs")
        return self


class Protocol(Strict):
    paper: str
    models: dict[Name, ModelSpec]
    option_sets: dict[str, dict[str, Option]]
    variants: dict[Name, Variant] = {}
    stages: dict[Name, StageSpec]
    profiles: dict[Name, Profile]

    @model_validator(mode="after")
    def _references_resolve(self) -> Protocol:
        """Every name a stage or profile uses must be declared, so a typo fails at load time."""
        for stage_name, stage in self.stages.items():
            if stage.options not in self.option_sets:
                raise ValueError(f"stage {stage_name!r} uses unknown option set {stage.options!r}")
            for variant in set(stage.variants) - set(self.variants):
                raise ValueError(f"stage {stage_name!r} names unknown variant {variant!r}")
        for profile_name, profile in self.profiles.items():
            for stage_name, narrowed in profile.stages.items():
                if stage_name not in self.stages:
                    raise ValueError(f"profile {profile_name!r} names unknown stage {stage_name!r}")
                for variant in set(narrowed.variants or ()) - set(self.variants):
                    raise ValueError(f"profile {profile_name!r} stage {stage_name!r} names unknown variant {variant!r}")
        return self


class Case(BaseModel):
    """One runnable cell of the matrix, fully resolved."""

    model_config = ConfigDict(frozen=True)

    id: Name
    stage: Name
    workload: str
    image: Name
    model: Name | None
    shape: ModelSpec | None
    method: str
    gpus: int
    device: Literal["cuda", "cpu"]
    params: Params
    unpublished: tuple[str, ...]
    interpretation: dict[str, str]
    variant: Name | None = None  # Protocol.variants: its env is in params.env
    variant_of: Name | None = None  # the case this one repeats with the variant's env
    # The GPU count the protocol writes for a case that runs here on fewer (`gpus`): a host of
    # fewer GPUs than the paper's measures each case on what it has. Never compared with the
    # paper's figures of the written count.
    fitted_from: int | None = None
    does_not_fit: str | None = None  # why the host's GPUs cannot hold the case's model at all, found when fitting

    def params_as(self, kind: type[P]) -> P:
        """The case's parameters as the kind its workload takes (TypeError for another kind)."""
        if not isinstance(self.params, kind):
            raise TypeError(f"case {self.id} has {type(self.params).__name__}, not {kind.__name__}")
        return self.params

    @property
    def model_shape(self) -> ModelSpec:
        """The shape of the case's model, for a workload that has one (train, profile, serve):
        TypeError for a case of no model (a collective, a calibration)."""
        return self.named_model[1]

    @property
    def named_model(self) -> tuple[str, ModelSpec]:
        """The case's model by name and shape: TypeError for a case of no model."""
        if self.model is None or self.shape is None:
            raise TypeError(f"case {self.id} has no model")
        return self.model, self.shape

    @property
    def step(self) -> StepParams | None:
        """A training or profile case's step parameters; None for another kind."""
        return self.params if isinstance(self.params, StepParams) else None

    @property
    def train(self) -> TrainParams | None:
        return self.params if isinstance(self.params, TrainParams) else None

    @property
    def micro_batch(self) -> int | None:
        return self.step.micro_batch if self.step else None

    @property
    def max_batch_search(self) -> MaxBatchSearch | None:
        """Set on a max-batch case: its runs are the search's trials."""
        return self.train.max_batch_search if self.train else None

    @property
    def soak(self) -> Soak | None:
        """Set on a soak case: its one run measures windows for that long."""
        return self.params.soak if isinstance(self.params, (TrainParams, ServeParams)) else None

    @property
    def shares_launch(self) -> bool:
        """Whether one launch does the case's runs one after another (TrainParams.launch)."""
        return self.train is not None and self.train.launch == "shared"

    @property
    def needs_checkpoint(self) -> bool:
        """Whether the case loads a checkpoint: a serve case, or training that quantises or adds
        LoRA to a pre-trained model (otherwise training starts from random initialisation)."""
        if self.workload == "serve":
            return True
        return self.train is not None and (self.train.quantization != "none" or self.train.peft != "none")

    @property
    def fitted(self) -> str | None:
        """ "fitted: 1 of 8 GPUs", wherever a fitted case is shown; None for a case as written."""
        from kit.plan.view import fitted_label

        return fitted_label(self.gpus, self.fitted_from)


class Repetition(Strict):
    """More runs of a case than planned, until the 95 % interval of its headline figure's mean is
    within ± `halfwidth` of the mean (kit.measure.interval), at most `max_runs` runs of a case and
    `time_cap_minutes` of such runs in the whole run: what an acceptance spec's `repeat:` asks, so
    that a line the planned runs leave straddling its threshold can still be decided."""

    halfwidth: float = Field(gt=0, lt=1)
    max_runs: int = Field(ge=2, le=100)
    time_cap_minutes: float = Field(gt=0, le=24 * 60)

    @property
    def text(self) -> str:
        """ "up to 12 runs of a case until its 95 % interval is within ± 4 % (at most 20 min in all)" """
        return (
            f"up to {self.max_runs} runs of a case until its 95 % interval is within ± {self.halfwidth * 100:g} % "
            f"(at most {self.time_cap_minutes:g} min in all)"
        )


class Plan(BaseModel):
    """The ordered cases of one profile, as `kit list` shows them and `kit run` executes them."""

    profile: str
    description: str
    device: Literal["cuda", "cpu"]
    comparable_to_reference: bool
    cases: list[Case]
    fitted_to_gpus: int | None = None  # the host GPU count the stages that follow the host were fitted to
    fitted_to_gpu_memory_bytes: int | None = None  # the smallest of those GPUs' memory, where it was known
    repetition: Repetition | None = None  # kit run --runs-for SPEC, where the spec says `repeat:`
    repeated: list[str] = []  # the ids of the cases the repetition is for: those the spec reads


def fitted_gpu_counts(fit: str, counts: tuple[int, ...], host_gpus: int | None) -> tuple[int, ...]:
    """A stage's GPU counts on a host with `host_gpus` GPUs (see Fit); the counts of a `host` or
    `weights` stage stay as written here, each fitted with its case (_fitted)."""
    if not host_gpus or fit in ("fixed", "host", "weights"):
        return counts
    if fit == "all":
        return (max(host_gpus, 2),)
    return tuple(sorted({2**k for k in range(host_gpus.bit_length()) if 2**k <= host_gpus} | {host_gpus}))


def serving_fit(
    shape: ModelSpec, params: ServeParams, host_gpus: int, gpu_memory_bytes: int | None
) -> tuple[int, str, str | None]:
    """The GPUs a serving case of `shape` runs on, fitted to a host of fewer GPUs than written,
    why, and why it cannot run there at all (or None): the fewest that hold its weights and the
    KV cache of one whole sequence (tensor parallel), or all the host's where its memory is not
    known or none holds it."""
    sizes = tensor_parallel_sizes(shape, host_gpus)
    context = params.input_tokens + params.max_output_tokens
    element = {"fp32": 4}.get(params.dtype, 2)
    if gpu_memory_bytes is None:
        return sizes[-1], f"the host's GPU memory is not known: all {sizes[-1]} GPUs it can split the model over", None
    fewest = serving_gpus_needed(shape, sizes, gpu_memory_bytes, context, element)
    need, each = serving_memory(shape, 1, context, element, element).total / 2**30, gpu_memory_bytes / 2**30
    if fewest is None:
        return (
            sizes[-1],
            "as many as it can split the model over",
            (
                f"the weights and one sequence's KV cache ({need:.1f} GiB) need more than {SERVING_MEMORY_SHARE:.0%} of "
                f"the {sizes[-1]} GPU{'s' * (sizes[-1] > 1)} of {each:.1f} GiB this host can split them over"
            ),
        )
    return (
        fewest,
        (
            f"the fewest GPUs that hold the weights and one sequence's KV cache ({need:.1f} GiB, "
            f"{need / fewest:.1f} GiB each of {SERVING_MEMORY_SHARE:.0%} of {each:.1f} GiB), tensor parallel"
        ),
        None,
    )


def unavailable_by_design(case: Case) -> str | None:
    """Why a case cannot run on its device whatever the host has, or None: such a case is
    `unavailable` with this reason, never run with something else in its place."""
    if case.device != "cuda" and case.step is not None and case.step.attention == "flash_attention_2":
        return "FlashAttention-2 needs a CUDA GPU; this case runs on CPU (SDPA is not substituted)"
    return None


def protocol_path() -> Path:
    return manifests_dir() / "protocol.yaml"


def load_protocol(path: Path | None = None) -> Protocol:
    path = path or protocol_path()
    data = read_yaml(path)
    if isinstance(data, dict):
        # Top-level keys starting with "_" only hold YAML anchors for reuse.
        data = {key: value for key, value in data.items() if not str(key).startswith("_")}
    protocol = validate(path, data, Protocol)
    # Building every profile's plan once validates every method and parameter up front.
    for profile in protocol.profiles:
        build_plan(protocol, profile, path=path)
    return protocol


def method_tokens(method: str) -> list[str]:
    return method.split("+")


def case_id(stage: str, model: str | None, method: str, gpus: int, micro_batch: int | None) -> str:
    """`pretrain.llama2-7b.z3+o.g8`; a non-default micro-batch adds `.b2`, a variant its name
    (`variant_case`)."""
    parts = [stage] + ([model] if model else []) + [method, f"g{gpus}"]
    if micro_batch not in (None, 1):
        parts.append(f"b{micro_batch}")
    return ".".join(parts)


def variant_case(case: Case, name: str, variant: Variant) -> Case:
    """`case` again under the variant: `comm.all_gather.g8.p2p-off`, its env on top of the case's."""
    params = case.params.model_copy(update={"env": {**case.params.env, **variant.env}})
    settings = ", ".join(f"{key}={value}" for key, value in variant.env.items())
    said = f"{variant.label} ({settings}); the case without it: {case.id}" + (
        f". {variant.cpu_note}" if case.device == "cpu" else ""
    )
    return case.model_copy(
        update={
            "id": f"{case.id}.{name}",
            "params": params,
            "variant": name,
            "variant_of": case.id,
            "interpretation": {**case.interpretation, "variant": said},
        }
    )


def _method_params(method: str, options: dict[str, Option]) -> dict[str, Any]:
    tokens = method_tokens(method)
    merged: dict[str, Any] = {}
    for token in tokens:
        if token not in options:
            raise ValueError(f"method {method!r}: unknown option {token!r} (known: {', '.join(options)})")
        option = options[token]
        if option.requires_any and not set(option.requires_any) & set(tokens):
            raise ValueError(f"method {method!r}: {token!r} needs one of {', '.join(option.requires_any)}")
        clash = set(option.excludes) & set(tokens)
        if clash:
            raise ValueError(f"method {method!r}: {token!r} cannot go with {', '.join(sorted(clash))}")
        merged.update(option.params)
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"method {method!r} repeats an option")
    return merged


def _case_image(stage: StageSpec, profile: Profile, method: str, options: dict[str, Option]) -> str:
    """The stage's image, or the one an option of the method names; then the profile's override."""
    named = [image for token in method_tokens(method) if (image := options[token].image)]
    image = named[0] if named else stage.image
    return profile.images.get(image, image)


@dataclass(frozen=True)
class HostGpus:
    """What a plan is fitted to: the host's GPU count, and the smallest GPU's memory in bytes
    where it is known (NVML, or a fingerprint's)."""

    count: int
    memory_bytes: int | None = None


def _fitted(
    fit: str, written: int, host: HostGpus | None, shape: ModelSpec | None, params: Any
) -> tuple[int, str | None, str | None]:
    """A case's GPU count on `host`, why it was fitted to fewer GPUs than written (or None), and
    why it cannot run even so (or None)."""
    if host is None or fit not in ("host", "weights") or host.count >= written:
        return written, None, None
    gpus, why, does_not_fit = host.count, "all of the host's GPUs", None
    if fit == "weights" and shape is not None:
        gpus, why, does_not_fit = serving_fit(shape, params, host.count, host.memory_bytes)
    return (
        gpus,
        (
            f"The protocol runs this case on {written} GPUs; this host has {host.count}, so it runs on "
            f"{gpus}: {why}, with the same method and per-GPU parameters. Its figures are this host's, held "
            f"to the expectation for it, and never compared with the paper's {written}-GPU findings."
        ),
        does_not_fit,
    )


def _stage_cases(
    protocol: Protocol, profile_name: str, stage_name: str, narrowed: ProfileStage, path: Path, host: HostGpus | None
) -> list[Case]:
    stage, profile = protocol.stages[stage_name], protocol.profiles[profile_name]
    options = protocol.option_sets[stage.options]
    models = narrowed.models if narrowed.models is not None else stage.matrix.models
    methods = narrowed.methods if narrowed.methods is not None else stage.matrix.methods
    gpu_counts = narrowed.gpus if narrowed.gpus is not None else stage.matrix.gpus
    fit = narrowed.fit or stage.fit
    if profile.device == "cuda":
        gpu_counts = fitted_gpu_counts(fit, gpu_counts, host.count if host else None)
    else:
        host = None
    where = f"profiles.{profile_name}.stages.{stage_name}"
    crossed = max(1, len(models)) * len(methods) * len(gpu_counts) * (1 + len(stage.variants))
    if crossed > MAX_PLAN_CASES:
        raise ManifestError(
            path,
            where,
            f"crosses up to {crossed:,} cases ({len(models)} models, {len(methods)} methods, {len(gpu_counts)} GPU "
            f"counts), more than the {MAX_PLAN_CASES:,} a plan may hold",
        )
    cases = []
    for model in models or (None,):
        if model is not None and model not in protocol.models:
            raise ManifestError(path, f"{where}.models", f"unknown model {model!r}")
        for method in methods:
            try:
                method_params = _method_params(method, options)
            except ValueError as exc:
                raise ManifestError(path, f"{where}.methods", str(exc)) from None
            overridden = sorted(
                k for k in set(narrowed.params) & set(method_params) if narrowed.params[k] != method_params[k]
            )
            if overridden:  # the method would silently win: what it means is not a profile's to change
                raise ManifestError(
                    path,
                    f"{where}.params.{overridden[0]}",
                    f"method {method!r} sets it to {method_params[overridden[0]]!r}; a profile cannot change it",
                )
            params_data = {**stage.params, **narrowed.params, **method_params, "kind": stage.workload}
            try:
                params = PARAM_MODELS[stage.workload].model_validate(params_data, strict=True)  # a nested search's too
            except Exception as exc:  # pydantic ValidationError: report the first problem on one line
                first = exc.errors()[0]  # type: ignore[attr-defined]
                key = ".".join(str(p) for p in first["loc"])
                raise ManifestError(path, f"{where} ({method}).params.{key}", first["msg"]) from None
            if profile.device == "cuda" and isinstance(params, TrainParams) and params.memory_cap_gib is not None:
                raise ManifestError(
                    path,
                    f"{where} ({method}).params.memory_cap_gib",
                    "a GPU case is bounded by its GPU's memory; the cap is for CPU profiles",
                )
            shape = protocol.models[model] if model else None
            fitted: dict[int, tuple[int, str | None, str | None]] = {}
            for written in gpu_counts:
                gpus, why, does_not_fit = _fitted(fit, written, host, shape, params)
                fitted.setdefault(gpus, (written, why, does_not_fit))  # the first count written that lands on it
            for gpus, (written, why, does_not_fit) in fitted.items():
                cases.append(
                    Case(
                        id=case_id(
                            stage_name,
                            model,
                            method,
                            gpus,
                            params.micro_batch if isinstance(params, StepParams) else None,
                        ),
                        stage=stage_name,
                        workload=stage.workload,
                        image=_case_image(stage, profile, method, options),
                        model=model,
                        shape=shape,
                        method=method,
                        gpus=gpus,
                        device=profile.device,
                        params=params,
                        unpublished=stage.unpublished,
                        interpretation={**stage.interpretation, "fitted": why} if why else stage.interpretation,
                        fitted_from=written if why else None,
                        does_not_fit=does_not_fit,
                    )
                )
    variants = narrowed.variants if narrowed.variants is not None else stage.variants
    # One GPU has no peer to talk to: a variant of a one-GPU case would measure the case again.
    return cases + [
        variant_case(case, name, protocol.variants[name]) for name in variants for case in cases if case.gpus > 1
    ]


def build_plan(
    protocol: Protocol,
    profile_name: str,
    path: Path | None = None,
    host_gpus: int | None = None,
    gpu_memory_bytes: int | None = None,
) -> Plan:
    """Every case of a profile, in manifest order (stage, model, method, GPUs); on a GPU host
    (`host_gpus`, the smallest GPU's `gpu_memory_bytes` where known), the stages that follow the
    host fitted to its GPUs."""
    path = path or protocol_path()
    if profile_name not in protocol.profiles:
        raise ManifestError(path, "profiles", f"no profile {profile_name!r} (known: {', '.join(protocol.profiles)})")
    profile = protocol.profiles[profile_name]
    cases: list[Case] = []
    host = HostGpus(host_gpus, gpu_memory_bytes) if host_gpus else None
    for stage_name, narrowed in profile.stages.items():
        cases += _stage_cases(protocol, profile_name, stage_name, narrowed, path, host)
        if len(cases) > MAX_PLAN_CASES:
            raise ManifestError(
                path,
                f"profiles.{profile_name}",
                f"{len(cases):,} cases, more than the {MAX_PLAN_CASES:,} a plan may hold",
            )
    seen: set[str] = set()
    for case in cases:
        if case.id in seen:
            raise ManifestError(path, f"profiles.{profile_name}", f"case {case.id!r} is declared twice")
        seen.add(case.id)
    return Plan(
        profile=profile_name,
        description=profile.description,
        device=profile.device,
        comparable_to_reference=profile.comparable_to_reference,
        cases=cases,
        fitted_to_gpus=host_gpus if profile.device == "cuda" and host_gpus else None,
        fitted_to_gpu_memory_bytes=gpu_memory_bytes if profile.device == "cuda" and host_gpus else None,
    )


def plan_for(host: Host, profile: str | None = None) -> Plan:
    """The profile's plan (paper with GPUs, else smoke), fitted to the host's GPUs where it has any."""
    name = profile or ("paper" if host.gpu_names else "smoke")
    return build_plan(
        load_protocol(), name, host_gpus=host.gpu_count or None, gpu_memory_bytes=host.smallest_gpu_memory
    )


def with_runs(plan: Plan, runs: int) -> Plan:
    """The plan with every case run at least `runs` times (`kit run --runs N`), a serving case's
    sweep points with it: a verdict rests on three or more independent runs, and the paper's
    profile runs its max-batch, profile, serve and comm cases once. A max-batch search (its runs
    are the trials of one search) and a soak (one run measuring windows on end) keep theirs."""
    raised = [
        case
        if case.max_batch_search is not None or case.soak is not None or case.params.runs >= runs
        else case.model_copy(update={"params": case.params.model_copy(update={"runs": runs})})
        for case in plan.cases
    ]
    return plan.model_copy(update={"cases": raised})


def select(plan: Plan, stages: tuple[str, ...] = (), case_ids: tuple[str, ...] = ()) -> list[Case]:
    """The cases a `kit run --stage/--case` asks for; an unknown name is an error, not a no-op."""
    known_stages = {c.stage for c in plan.cases}
    unknown = [s for s in stages if s not in known_stages]
    if unknown:
        raise ValueError(
            f"profile {plan.profile!r} has no stage {', '.join(unknown)} (has: {', '.join(sorted(known_stages))})"
        )
    known_ids = {c.id for c in plan.cases}
    missing = [c for c in case_ids if c not in known_ids]
    if missing:
        raise ValueError(
            f"profile {plan.profile!r} has no case {', '.join(missing)} (see `kit list --profile {plan.profile}`)"
        )
    if not stages and not case_ids:
        return list(plan.cases)
    return [c for c in plan.cases if c.stage in stages or c.id in case_ids]
