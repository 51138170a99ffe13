"""The serving engines as their publishers ship them: one small class per engine.

Each states only what is specific to it, for the version its image is pinned to in
manifests/images.lock.yaml: what the published image's ENTRYPOINT starts, the port it listens
on, the documented arguments and variables the kit adds (nothing else), its health, version and
metrics routes, how to ask it for a streamed greedy completion of `max_output_tokens` tokens,
and how to read its stream. Every fact carries its source; the engines' own code and Dockerfiles
at the pinned tags were read for them (vLLM: the 0.30.0 wheel and docker/Dockerfile; TGI: tag
v3.3.6, Dockerfile, launcher/src/main.rs, router/src/server.rs; LightLLM: tag v1.0.1, Dockerfile,
lightllm/server/api_cli.py, api_http.py, api_lightllm.py).

Every engine is asked the same thing: greedy decoding, EOS ignored where the engine allows it,
streamed token by token. Each says what it cannot honour (`ignore_eos_note`), and the rows record
how many tokens really came back.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from kit.plan.protocol import Case, ServeParams, longest_request
from kit.serve.prometheus import counter_total
from kit.theory.analytic import parameter_count

SERVED_NAME = "kit-model"
# An engine that can make its own random weights is given the seeded checkpoint instead for a
# model this small, so that its output can be checked against transformers' (kit.serve.correctness).
REFERENCE_MAX_PARAMETERS = 200_000_000
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class StreamEvent:
    """What one event of a stream says. `token_events` is 1 when the event carries generated
    output (what TTFT and ITL are timed by); `tokens` is how many generated tokens it carries, as
    the client counts them (an engine may put several in one event when it runs ahead of the
    reader); `output_tokens` and `prompt_tokens` are the engine's own counts where it sends them;
    `finished` marks the event after which the engine has nothing more to say."""

    token_events: int = 0
    tokens: int = 0
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    finished: bool = False
    error: str | None = None


ONE_TOKEN = StreamEvent(token_events=1, tokens=1)
_SEVERAL = {n: StreamEvent(token_events=1, tokens=n) for n in range(2, 65)}


def _several(n: int) -> StreamEvent:
    return ONE_TOKEN if n == 1 else _SEVERAL.get(n) or StreamEvent(token_events=1, tokens=n)


@dataclass(frozen=True)
class Counter:
    """An engine's Prometheus figure: a counter, or a histogram whose `_sum` counts the same."""

    name: str
    kind: Literal["counter", "histogram_sum"] = "counter"
    exclude: tuple[tuple[str, tuple[str, ...]], ...] = ()  # label -> values left out

    def metric_names(self) -> tuple[str, ...]:
        """The names it may be exposed under (client libraries differ on the `_total` suffix)."""
        if self.kind == "histogram_sum":
            return (f"{self.name}_sum",)
        return (self.name, f"{self.name}_total") if not self.name.endswith("_total") else (self.name,)

    def total(self, samples: list) -> float | None:
        """Its value on a parsed /metrics page (kit.serve.prometheus), None where the page lacks it."""
        values = [counter_total(samples, name, dict(self.exclude)) for name in self.metric_names()]
        return next((value for value in values if value is not None), None)


class Engine(ABC):
    """One serving engine. Subclasses state only what is specific to them."""

    name: ClassVar[str]
    label: ClassVar[str]
    image: ClassVar[str]  # its entry in manifests/images.lock.yaml
    # What the published image starts: its ENTRYPOINT, or, for an image without a server
    # entrypoint, the documented command the kit passes. Run the same way outside the image.
    entrypoint: ClassVar[tuple[str, ...]]
    command: ClassVar[tuple[str, ...]] = ()  # passed as the container's command before the arguments
    container_port: ClassVar[int]  # where the server listens inside its image
    shm_size: ClassVar[str]  # /dev/shm for the container (the engine's docs; never ipc=host)
    health_path: ClassVar[str] = "/health"
    version_path: ClassVar[str | None] = None  # a route whose JSON `version` field names the version
    generated_tokens: ClassVar[Counter]
    finished_requests: ClassVar[Counter]
    makes_random_weights: ClassVar[bool] = False  # needs only config and tokenizer, no checkpoint
    ignore_eos_note: ClassVar[str | None] = None  # why EOS cannot be ignored, where it cannot
    # The variable naming the folder where the engine keeps what it compiles or caches between
    # starts (None: none documented): an empty one is a cold start, the one it filled a warm one.
    cache_variable: ClassVar[str | None] = None
    # Its prefix cache: the counters of tokens looked up and found (None: it exposes none), and
    # the arguments that turn the cache off (None: it cannot be turned off by argument).
    prefix_cache_queries: ClassVar[Counter | None] = None
    prefix_cache_hits: ClassVar[Counter | None] = None
    prefix_caching_off: ClassVar[tuple[str, ...] | None] = None

    @abstractmethod
    def arguments(self, case: Case, model_dir: str, host: str, port: int) -> list[str]:
        """The documented arguments after the entrypoint (or command)."""

    def environment(self, case: Case, cpus: Sequence[int] | None = None) -> dict[str, str]:
        """Documented variables the engine is started with (besides the case's own); given the
        CPUs it may use (kit.serve.cpu_split), those that keep the threads it binds itself on them."""
        return {}

    @abstractmethod
    def request(self, prompt: str, params: ServeParams, max_tokens: int | None = None) -> tuple[str, dict]:
        """Path and JSON body of one streamed, greedy completion of `prompt`, of `max_tokens`
        (None: the case's max_output_tokens)."""

    @abstractmethod
    def parse(self, data: str) -> StreamEvent:
        """One SSE event's data -> what it says. Raises ValueError for data that is not a whole
        event (a stream cut in the middle of one)."""


def loads_checkpoint(case: Case, engine: Engine) -> bool:
    """Whether the engine serves the kit's seeded checkpoint (else it makes random weights itself)."""
    return not engine.makes_random_weights or parameter_count(case.model_shape) <= REFERENCE_MAX_PARAMETERS


def completion_request(prompt: str, params: ServeParams, max_tokens: int | None) -> tuple[str, dict]:
    """An OpenAI-compatible streamed completion, greedy, with the usage at its end (vLLM and SGLang)."""
    return "/v1/completions", {
        "model": SERVED_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens or params.max_output_tokens,
        "temperature": 0.0,
        "ignore_eos": params.ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def _max_model_len(params: ServeParams) -> int:
    return sum(longest_request(params))


class VllmEngine(Engine):
    """vLLM's OpenAI-compatible server, streamed /v1/completions.

    Image: ENTRYPOINT ["vllm", "serve"], USER root, only `python3` (vLLM docker/Dockerfile);
    listens on 8000 (cli_args.py). `--load-format dummy` initialises random weights itself
    (config/load.py), so it gets config and tokenizer only. Greedy is `temperature: 0`, not the
    default (which comes from generation_config.json); `ignore_eos` and
    `stream_options.include_usage` make every request generate `max_tokens` and end with a
    usage chunk (`choices: []`) and `data: [DONE]` (completion/serving.py). One chunk per
    generated token, some with empty text (a token that completes no character), or several
    when the engine runs ahead of the reader: every chunk with choices is a token event, as
    vLLM's own `vllm bench serve` times them, and `return_token_ids` makes each chunk list the
    ids it carries, so the client counts tokens itself (completion/protocol.py, serving.py).
    On a CPU (the vLLM CPU build): the KV cache size and eager mode, per vLLM's CPU installation
    docs (VLLM_CPU_KVCACHE_SPACE, in GiB; --enforce-eager skips minutes of graph compilation).
    """

    name = "vllm"
    label = "vLLM"
    image = "serve-vllm"
    entrypoint = ("vllm", "serve")
    container_port = 8000
    shm_size = "16g"  # the docs say --ipc=host or a --shm-size, with no figure: the kit's choice
    version_path = "/version"
    generated_tokens = Counter("vllm:generation_tokens_total")
    finished_requests = Counter("vllm:request_success_total", exclude=(("finished_reason", ("abort", "error")),))
    makes_random_weights = True
    cpu_kv_cache_gib = 1
    prefix_cache_queries = Counter("vllm:prefix_cache_queries_total")  # tokens looked up (v1 metrics)
    prefix_cache_hits = Counter("vllm:prefix_cache_hits_total")  # of them, tokens found cached
    prefix_caching_off = ("--no-enable-prefix-caching",)  # on by default (engine/arg_utils.py)
    cache_variable = "VLLM_CACHE_ROOT"  # envs.py; `vllm bench sweep startup` points it at a new folder for a cold start

    def arguments(self, case: Case, model_dir: str, host: str, port: int) -> list[str]:
        params = case.params_as(ServeParams)
        argv = [
            model_dir,
            "--served-model-name",
            SERVED_NAME,
            "--host",
            host,
            "--port",
            str(port),
            "--tensor-parallel-size",
            str(case.gpus),
            "--dtype",
            DTYPE_NAMES[params.dtype],
            "--max-model-len",
            str(_max_model_len(params)),
            "--seed",
            str(params.seed),
        ]
        if not loads_checkpoint(case, self):
            argv += ["--load-format", "dummy"]
        if params.max_batch_requests is not None:
            argv += ["--max-num-seqs", str(params.max_batch_requests)]
        if case.device == "cpu":
            argv.append("--enforce-eager")
        if not params.prefix_caching:
            argv += self.prefix_caching_off
        return argv

    def environment(self, case: Case, cpus: Sequence[int] | None = None) -> dict[str, str]:
        if case.device != "cpu":
            return {}
        found = {"VLLM_CPU_KVCACHE_SPACE": str(self.cpu_kv_cache_gib)}
        bind = omp_threads_bind(cpus, case.gpus) if cpus else None
        if bind is not None:  # its workers bind their OpenMP threads themselves, whatever the process's affinity
            found["VLLM_CPU_OMP_THREADS_BIND"] = bind
        return found

    def request(self, prompt: str, params: ServeParams, max_tokens: int | None = None) -> tuple[str, dict]:
        path, body = completion_request(prompt, params, max_tokens)
        return path, {**body, "return_token_ids": True}

    def parse(self, data: str) -> StreamEvent:
        if '"finish_reason":null' in data and '"usage"' not in data and '"error"' not in data:
            # The common chunk: its tokens are the ids listed last ("prompt_token_ids" never
            # matches: `_` precedes its "token_ids"); without ids, one token per chunk.
            start = data.rfind('"token_ids":[')
            if start < 0:
                return ONE_TOKEN
            start += 13
            end = data.index("]", start)
            return _several(data.count(",", start, end) + 1) if end > start else StreamEvent(token_events=1)
        if data == "[DONE]":
            return StreamEvent(finished=True)
        event = json.loads(data)
        if "error" in event or event.get("object") == "error":
            return StreamEvent(error=str(event.get("error") or event.get("message")))
        usage = event.get("usage") or {}
        choices = event.get("choices") or []
        ids = [token for choice in choices for token in (choice.get("token_ids") or [])]
        return StreamEvent(
            token_events=1 if choices else 0,
            tokens=len(ids) if any(choice.get("token_ids") is not None for choice in choices) else len(choices),
            output_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
        )


def omp_threads_bind(cpus: Sequence[int], ranks: int) -> str | None:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` workers on `cpus`: one list per rank, split by "|"
    (vLLM's CPU docs). As its own default does ('auto': utils/ompmultiprocessing.py), one CPU per
    rank is left to the scheduler and server processes where there are CPUs enough to leave one.
    None where there are fewer CPUs than ranks."""
    cpus = sorted(cpus)
    compute = cpus[:-ranks] if len(cpus) >= 2 * ranks else cpus
    share = len(compute) // ranks
    if share == 0:
        return None
    return "|".join(",".join(map(str, compute[rank * share : (rank + 1) * share])) for rank in range(ranks))


class TgiEngine(Engine):
    """Text Generation Inference, its own /generate_stream.

    Image: ENTRYPOINT ["/tgi-entrypoint.sh"], which runs `text-generation-launcher $@`; USER
    root; ENV PORT=80, so it listens on 80 (Dockerfile, launcher/src/main.rs). Docker sets
    HOSTNAME to the container id, which the launcher would read as --hostname: the kit passes
    it. No dummy weights: it loads a checkpoint. It refuses requests beyond
    --max-concurrent-requests (default 128) as "overloaded": the burst must be admitted whole.
    Events are `data:{json}` with no terminator, one per generated token; `details: true` makes
    the last carry `generated_tokens` (router/src/server.rs, lib.rs). It has no way to ignore
    EOS over HTTP (validation.rs). Greedy is its default (do_sample false, no temperature).
    """

    name = "tgi"
    label = "Text Generation Inference"
    image = "serve-tgi"
    entrypoint = ("text-generation-launcher",)
    container_port = 80
    shm_size = "1g"  # TGI README, "A note on Shared Memory"
    version_path = "/info"
    generated_tokens = Counter("tgi_request_generated_tokens", kind="histogram_sum")
    finished_requests = Counter("tgi_request_success")
    ignore_eos_note = "TGI has no parameter to ignore EOS; output lengths are recorded per request"

    def arguments(self, case: Case, model_dir: str, host: str, port: int) -> list[str]:
        params = case.params_as(ServeParams)
        argv = [
            "--model-id",
            model_dir,
            "--hostname",
            host,
            "--port",
            str(port),
            "--num-shard",
            str(case.gpus),
            "--dtype",
            DTYPE_NAMES[params.dtype],
            "--max-input-tokens",
            str(longest_request(params)[0]),
            "--max-total-tokens",
            str(_max_model_len(params)),
            "--max-concurrent-requests",
            str(params.prompts),
        ]
        if params.max_batch_requests is not None:
            argv += ["--max-batch-size", str(params.max_batch_requests)]
        return argv

    def environment(self, case: Case, cpus: Sequence[int] | None = None) -> dict[str, str]:
        return {"HF_HUB_OFFLINE": "1"}  # a local model directory; never the hub

    def request(self, prompt: str, params: ServeParams, max_tokens: int | None = None) -> tuple[str, dict]:
        return "/generate_stream", {
            "inputs": prompt,
            "parameters": {
                "max_new_tokens": max_tokens or params.max_output_tokens,
                "do_sample": False,
                "details": True,
            },
        }

    def parse(self, data: str) -> StreamEvent:
        if '"details":null' in data and '"error"' not in data:
            return ONE_TOKEN
        event = json.loads(data)
        if event.get("error"):
            return StreamEvent(error=str(event["error"]), finished=True)
        details = event.get("details") or {}
        return StreamEvent(
            token_events=1 if event.get("token") else 0,
            tokens=1 if event.get("token") else 0,
            output_tokens=details.get("generated_tokens"),
            finished=event.get("generated_text") is not None,
        )


class LightllmEngine(Engine):
    """LightLLM, its own /generate_stream.

    Image: no server entrypoint of its own (Dockerfile), so the kit passes the documented command
    `python -m lightllm.server.api_server` (docs, getting_started); USER root; Python 3.9. It
    listens on 127.0.0.1:8000 unless told `--host` (api_cli.py). /health runs a real generation
    on every call (utils/health_check.py), so readiness is read from /readiness, which does not.
    Events are `data:{json}` with no terminator; each token carries the running
    `count_output_tokens` and `prompt_tokens`, the last has `"finished": true`
    (api_lightllm.py). Its v1.0.1 sampler ignores do_sample: greedy is `top_k: 1`, with a
    temperature above 0 (sampling_params.py, post_process.py).
    """

    name = "lightllm"
    label = "LightLLM"
    image = "serve-lightllm"
    entrypoint = ("python", "-m", "lightllm.server.api_server")
    command = entrypoint
    container_port = 8000
    shm_size = "32g"  # LightLLM docs (installation, EN)
    health_path = "/readiness"
    generated_tokens = Counter("lightllm_request_generated_tokens", kind="histogram_sum")
    finished_requests = Counter("lightllm_request_success_total")

    def arguments(self, case: Case, model_dir: str, host: str, port: int) -> list[str]:
        params = case.params_as(ServeParams)
        argv = [
            "--model_dir",
            model_dir,
            "--host",
            host,
            "--port",
            str(port),
            "--tp",
            str(case.gpus),
            "--data_type",
            params.dtype,
            "--max_req_total_len",
            str(_max_model_len(params)),
        ]
        if params.max_batch_requests is not None:
            argv += ["--running_max_req_size", str(params.max_batch_requests)]
        return argv

    def request(self, prompt: str, params: ServeParams, max_tokens: int | None = None) -> tuple[str, dict]:
        return "/generate_stream", {
            "inputs": prompt,
            "parameters": {
                "max_new_tokens": max_tokens or params.max_output_tokens,
                "ignore_eos": params.ignore_eos,
                "top_k": 1,
                "temperature": 1.0,
            },
        }

    def parse(self, data: str) -> StreamEvent:
        if '"finished": false' in data and '"error"' not in data:  # json.dumps' default separators
            return ONE_TOKEN  # counts and the prompt length are read off the last event
        event = json.loads(data)
        if event.get("error"):
            return StreamEvent(error=str(event["error"]), finished=True)
        token = event.get("token") or {}
        return StreamEvent(
            token_events=1 if token else 0,
            tokens=1 if token else 0,
            output_tokens=token.get("count_output_tokens"),
            prompt_tokens=token.get("prompt_tokens"),
            finished=bool(event.get("finished")),
        )


class SglangEngine(Engine):
    """SGLang's OpenAI-compatible server, streamed /v1/completions.

    Image: no server entrypoint of its own; its docs start it as `python3 -m
    sglang.launch_server` (docs, "Install SGLang", docker), listening on 30000, with
    `--shm-size 32g`. `--load-format dummy` makes random weights (server_args.py), so it gets
    config and tokenizer only. Its OpenAI completions take the same streamed, greedy,
    EOS-ignoring body as vLLM's (`ignore_eos` is one of its sampling parameters;
    `stream_options.include_usage` ends the stream with a usage chunk), one chunk per step of
    `stream_interval` (1 by default: one token) with the text in `choices[].text`, then
    `data: [DONE]`. Its counters are exposed with `--enable-metrics` (metrics/collector.py):
    generated tokens, finished requests, and the prompt tokens of finished requests beside those
    served from its prefix cache (RadixAttention, on unless `--disable-radix-cache`).
    """

    name = "sglang"
    label = "SGLang"
    image = "serve-sglang"
    entrypoint = ("python3", "-m", "sglang.launch_server")
    command = entrypoint
    container_port = 30000
    shm_size = "32g"  # SGLang docs, docker run
    generated_tokens = Counter("sglang:generation_tokens_total")
    finished_requests = Counter("sglang:num_requests_total")
    prefix_cache_queries = Counter("sglang:prompt_tokens_total")  # every prompt token of a finished request
    prefix_cache_hits = Counter("sglang:cached_tokens_total")  # of them, those served from its prefix cache
    prefix_caching_off = ("--disable-radix-cache",)
    makes_random_weights = True

    def arguments(self, case: Case, model_dir: str, host: str, port: int) -> list[str]:
        params = case.params_as(ServeParams)
        argv = [
            "--model-path",
            model_dir,
            "--served-model-name",
            SERVED_NAME,
            "--host",
            host,
            "--port",
            str(port),
            "--tp-size",
            str(case.gpus),
            "--dtype",
            DTYPE_NAMES[params.dtype],
            "--context-length",
            str(_max_model_len(params)),
            "--random-seed",
            str(params.seed),
            "--load-format",
            "dummy",
            "--enable-metrics",
        ]
        if params.max_batch_requests is not None:
            argv += ["--max-running-requests", str(params.max_batch_requests)]
        if case.device == "cpu":
            argv += ["--device", "cpu"]
        if not params.prefix_caching:
            argv += self.prefix_caching_off
        return argv

    def request(self, prompt: str, params: ServeParams, max_tokens: int | None = None) -> tuple[str, dict]:
        return completion_request(prompt, params, max_tokens)

    def parse(self, data: str) -> StreamEvent:
        if data == "[DONE]":
            return StreamEvent(finished=True)
        event = json.loads(data)
        if "error" in event or event.get("object") == "error":
            return StreamEvent(error=str(event.get("error") or event.get("message")))
        usage = event.get("usage") or {}
        choices = event.get("choices") or []
        return StreamEvent(
            token_events=1 if choices else 0,
            tokens=len(choices),
            output_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
        )


ENGINES: dict[str, Engine] = {
    engine.name: engine for engine in (VllmEngine(), TgiEngine(), LightllmEngine(), SglangEngine())
}


def engine_for(params: ServeParams) -> Engine:
    if params.engine not in ENGINES:
        raise ValueError(f"no engine {params.engine!r} (known: {', '.join(ENGINES)})")
    return ENGINES[params.engine]
