"""The serving engines: how each is launched from a case, how to ask it for a streamed
completion, and how to read its stream. One small class per engine, nothing else.

Every engine is asked the same thing: greedy decoding of `max_output_tokens` tokens, EOS ignored
where the engine allows it, streamed token by token. Each states what it could not honour
(`ignore_eos_note`), and the per-request rows record how many tokens really came back.

Command lines follow each engine's own launcher (versions as pinned by the serve images):
vLLM `python -m vllm.entrypoints.openai.api_server`, TGI `text-generation-launcher`, LightLLM
`python -m lightllm.server.api_server`; on CPU, `transformers serve --continuous-batching`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import importlib.metadata
import importlib.util
import json
import shutil
import sys
from dataclasses import dataclass
from typing import ClassVar

from kit.protocol import Case, ServeParams

HOST = "127.0.0.1"  # engines listen on loopback only: the load generator runs beside them
SERVED_NAME = "kit-model"
DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class StreamEvent:
    """What one event of a stream says. `token_events` is 1 when the event carries generated
    output; `output_tokens` and `prompt_tokens` are the server's own counts when it sends them."""

    token_events: int = 0
    output_tokens: int | None = None
    prompt_tokens: int | None = None
    finished: bool = False
    error: str | None = None


class Engine(ABC):
    """One serving engine. Subclasses state only what is specific to them."""

    name: ClassVar[str]
    label: ClassVar[str]
    health_path: ClassVar[str] = "/health"
    version_path: ClassVar[str | None] = None  # an endpoint that reports the engine's version
    ignore_eos_note: ClassVar[str | None] = None  # why EOS cannot be ignored, where it cannot

    @abstractmethod
    def command(self, case: Case, model_dir: str, port: int) -> list[str]:
        ...

    @abstractmethod
    def missing(self) -> str | None:
        """Why this engine cannot be started from this environment, or None."""
        ...

    @abstractmethod
    def request(self, prompt: str, params: ServeParams) -> tuple[str, dict]:
        """Path and JSON body of one streamed, greedy completion of `prompt`."""
        ...

    @abstractmethod
    def parse(self, data: str) -> StreamEvent:
        """One SSE event's data -> what it says."""
        ...

    def installed_version(self) -> str | None:
        return None

    def version_from(self, payload: dict) -> str | None:
        value = payload.get("version")
        return str(value) if value is not None else None


def _module_missing(module: str, image: str) -> str | None:
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return f"{module} is not installed in this environment (it runs in the {image} image)"
    return None


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _max_model_len(params: ServeParams) -> int:
    return params.input_tokens + params.max_output_tokens


class VllmEngine(Engine):
    """vLLM's OpenAI-compatible server, /v1/completions (vLLM answers `ignore_eos` and
    `stream_options.include_usage`, so the last chunk carries the token counts)."""

    name = "vllm"
    label = "vLLM"
    version_path = "/version"

    def command(self, case: Case, model_dir: str, port: int) -> list[str]:
        params: ServeParams = case.params
        argv = [
            sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", model_dir, "--served-model-name", SERVED_NAME,
            "--host", HOST, "--port", str(port),
            "--tensor-parallel-size", str(case.gpus),
            "--dtype", DTYPE_NAMES[params.dtype],
            "--max-model-len", str(_max_model_len(params)),
            "--seed", str(params.seed),
        ]  # fmt: skip
        if params.max_batch_requests is not None:
            argv += ["--max-num-seqs", str(params.max_batch_requests)]
        return argv

    def missing(self) -> str | None:
        return _module_missing("vllm", "serve-vllm")

    def installed_version(self) -> str | None:
        return _distribution_version("vllm")

    def request(self, prompt: str, params: ServeParams) -> tuple[str, dict]:
        return "/v1/completions", {
            "model": SERVED_NAME,
            "prompt": prompt,
            "max_tokens": params.max_output_tokens,
            "temperature": 0.0,
            "ignore_eos": params.ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    def parse(self, data: str) -> StreamEvent:
        return _openai_completion_event(data)


class TgiEngine(Engine):
    """Text Generation Inference, its own /generate_stream (one event per token; the last one
    carries `details.generated_tokens`)."""

    name = "tgi"
    label = "Text Generation Inference"
    version_path = "/info"
    ignore_eos_note = "TGI has no parameter to ignore EOS; output lengths are recorded per request"

    def command(self, case: Case, model_dir: str, port: int) -> list[str]:
        params: ServeParams = case.params
        argv = [
            "text-generation-launcher",
            "--model-id", model_dir,
            "--hostname", HOST, "--port", str(port),
            "--num-shard", str(case.gpus),
            "--dtype", DTYPE_NAMES[params.dtype],
            "--max-input-tokens", str(params.input_tokens),
            "--max-total-tokens", str(_max_model_len(params)),
            # TGI refuses requests beyond --max-concurrent-requests (default 128) with HTTP 429:
            # the burst must be admitted whole, as the paper sends it.
            "--max-concurrent-requests", str(params.prompts),
        ]  # fmt: skip
        if params.max_batch_requests is not None:
            argv += ["--max-batch-size", str(params.max_batch_requests)]
        return argv

    def missing(self) -> str | None:
        if shutil.which("text-generation-launcher") is None:
            return "text-generation-launcher is not on PATH (it runs in the serve-tgi image)"
        return None

    def request(self, prompt: str, params: ServeParams) -> tuple[str, dict]:
        return "/generate_stream", {
            "inputs": prompt,
            "parameters": {"max_new_tokens": params.max_output_tokens, "do_sample": False, "details": True},
        }

    def parse(self, data: str) -> StreamEvent:
        event = json.loads(data)
        if event.get("error"):
            return StreamEvent(error=str(event["error"]), finished=True)
        token = event.get("token") or {}
        details = event.get("details")
        carries = 1 if token and not token.get("special", False) else 0
        if details:
            return StreamEvent(token_events=carries, output_tokens=details.get("generated_tokens"), finished=True)
        return StreamEvent(token_events=carries)


class LightllmEngine(Engine):
    """LightLLM, its own /generate_stream (each event carries the running output count and the
    prompt's token count; `finished` marks the last)."""

    name = "lightllm"
    label = "LightLLM"

    def command(self, case: Case, model_dir: str, port: int) -> list[str]:
        params: ServeParams = case.params
        argv = [
            sys.executable, "-m", "lightllm.server.api_server",
            "--model_dir", model_dir,
            "--host", HOST, "--port", str(port),
            "--tp", str(case.gpus),
            "--data_type", params.dtype,
            "--max_req_total_len", str(_max_model_len(params)),
        ]  # fmt: skip
        if params.max_batch_requests is not None:
            argv += ["--running_max_req_size", str(params.max_batch_requests)]
        return argv

    def missing(self) -> str | None:
        return _module_missing("lightllm", "serve-lightllm")

    def installed_version(self) -> str | None:
        return _distribution_version("lightllm")

    def request(self, prompt: str, params: ServeParams) -> tuple[str, dict]:
        return "/generate_stream", {
            "inputs": prompt,
            "parameters": {
                "max_new_tokens": params.max_output_tokens,
                "do_sample": False,
                "ignore_eos": params.ignore_eos,
            },
        }

    def parse(self, data: str) -> StreamEvent:
        event = json.loads(data)
        if event.get("error"):
            return StreamEvent(error=str(event["error"]), finished=True)
        token = event.get("token") or {}
        return StreamEvent(
            token_events=1 if token and not token.get("special", False) else 0,
            output_tokens=token.get("count_output_tokens"),
            prompt_tokens=token.get("prompt_tokens"),
            finished=bool(event.get("finished")),
        )


class TransformersCpuEngine(Engine):
    """`transformers serve --continuous-batching` on CPU: the smoke profile's real HTTP engine.

    Quirks (transformers 5.23): /v1/completions takes `prompt` as a string only; it rejects
    `ignore_eos` with 422, but takes a per-request `generation_config` JSON whose negative
    `eos_token_id` its continuous-batching scheduler treats as "no EOS"
    (generation/continuous_batching/requests.py); the stream ends without `data: [DONE]`, and the
    last chunk carries the usage.
    """

    name = "transformers-cpu"
    label = "transformers serve (CPU, continuous batching)"

    block_size = 32  # KV cache block, tokens
    max_batch_tokens = 1024  # tokens one scheduler step may take (prefill budget); the kit's choice

    def command(self, case: Case, model_dir: str, port: int) -> list[str]:
        params: ServeParams = case.params
        # Sized explicitly: left to itself, the scheduler sizes its cache from free host memory,
        # which took 30 s of the first request here (transformers 5.23, 24 GiB host). The cache
        # holds the whole burst at once, as a GPU engine's would.
        blocks = params.prompts * -(-_max_model_len(params) // self.block_size)
        return [
            sys.executable, "-m", "transformers.cli.transformers", "serve", model_dir,
            "--continuous-batching", "--device", "cpu", "--dtype", DTYPE_NAMES[params.dtype],
            "--cb-block-size", str(self.block_size), "--cb-num-blocks", str(blocks),
            "--cb-max-batch-tokens", str(self.max_batch_tokens),
            "--host", HOST, "--port", str(port), "--log-level", "info",
            "--default-seed", str(params.seed),
        ]  # fmt: skip

    def missing(self) -> str | None:
        for module in ("fastapi", "uvicorn", "openai"):
            if importlib.util.find_spec(module) is None:
                return f"transformers serve needs {module}: pip install 'transformers[serving]'"
        return None

    def installed_version(self) -> str | None:
        return _distribution_version("transformers")

    def request(self, prompt: str, params: ServeParams) -> tuple[str, dict]:
        generation = {"do_sample": False, "max_new_tokens": params.max_output_tokens}
        if params.ignore_eos:
            generation["eos_token_id"] = -1
        return "/v1/completions", {
            "prompt": prompt,
            "max_tokens": params.max_output_tokens,
            "stream": True,
            "generation_config": json.dumps(generation),
        }

    def parse(self, data: str) -> StreamEvent:
        return _openai_completion_event(data)


def _openai_completion_event(data: str) -> StreamEvent:
    """An OpenAI-style completion chunk: text in choices[].text, counts in `usage` (vLLM sends
    them in a chunk of their own after `include_usage`; transformers serve on its last chunk)."""
    if data.strip() == "[DONE]":
        return StreamEvent(finished=True)
    event = json.loads(data)
    if "error" in event or event.get("object") == "error":
        error = event.get("error") or event.get("message")
        return StreamEvent(error=str(error), finished=True)
    choices = event.get("choices") or []
    carries = 1 if any(choice.get("text") for choice in choices) else 0
    usage = event.get("usage") or {}
    return StreamEvent(
        token_events=carries,
        output_tokens=usage.get("completion_tokens"),
        prompt_tokens=usage.get("prompt_tokens"),
        finished=any(choice.get("finish_reason") for choice in choices) or (bool(usage) and not choices),
    )


ENGINES: dict[str, Engine] = {
    engine.name: engine for engine in (VllmEngine(), TgiEngine(), LightllmEngine(), TransformersCpuEngine())
}


def engine_for(params: ServeParams) -> Engine:
    if params.engine not in ENGINES:
        raise ValueError(f"no engine {params.engine!r} (known: {', '.join(ENGINES)})")
    return ENGINES[params.engine]
