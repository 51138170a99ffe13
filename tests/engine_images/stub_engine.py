"""A stand-in serving engine for the kit's contract tests, speaking one published engine's
launch interface and HTTP protocol, for the version the kit pins (see tests/engine_images/README.md
for the source of each fact).

It is started the way the published image starts its engine (the Dockerfiles beside this file
give it the same ENTRYPOINT, USER and Python layout), parses only that engine's documented
arguments (an unknown one is refused, as the engine's own argument parser would), reads the model
folder it is given (config.json and tokenizer.json; the weights where the engine loads them),
counts prompt tokens with the served tokenizer, and streams `max_tokens` tokens per request in
that engine's exact wire format, with its health, version and Prometheus routes. Its "model"
draws token ids from the vocabulary (the kit's throughput figures never depend on token values).
Standard library and `tokenizers` only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tokenizers import Tokenizer

TOKEN_DELAY_S = 0.002  # per generated token: a fast engine, so the client is what is tested
COMPILE_S = 1.0  # vLLM's first start in an empty VLLM_CACHE_ROOT compiles; a later one reads what it left
# STUB_503_EVERY=k (vLLM only): every k-th completion request is answered 503 with the body vLLM
# 0.32 sends for a request it asks the client to retry (a RetryableRequestError's ErrorResponse,
# rendered by starlette's JSONResponse: vllm/entrypoints/serve/exception_handling/error_response.py,
# handlers/vllm_error.py), as an overloaded engine answers some of a load.
UNAVAILABLE = {
    "error": {"message": "Request failed; please retry", "type": "ServiceUnavailableError", "param": None, "code": 503}
}


def arguments(engine: str, argv: list[str]) -> argparse.Namespace:
    """The engine's documented flags (vLLM 0.30 cli_args/arg_utils, TGI 3.3.6 launcher, LightLLM
    1.0.1 api_cli); argparse exits 2 on anything else, as those parsers do."""
    parser = argparse.ArgumentParser(prog=engine)
    if engine == "vllm":
        parser.add_argument("subcommand", choices=["serve"])
        parser.add_argument("model")
        for flag in ("--served-model-name", "--dtype", "--load-format", "--host"):
            parser.add_argument(flag)
        for flag in ("--port", "--tensor-parallel-size", "--max-model-len", "--seed", "--max-num-seqs"):
            parser.add_argument(flag, type=int)
        parser.add_argument("--enforce-eager", action="store_true")
        parser.add_argument(
            "--no-enable-prefix-caching", action="store_true"
        )  # arg_utils: --[no-]enable-prefix-caching
        parsed = parser.parse_args(argv)
        parsed.port = parsed.port or 8000
        parsed.model_dir = parsed.model
    elif engine == "tgi":
        parser.add_argument("--model-id", required=True)
        parser.add_argument("--hostname", default="0.0.0.0")
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "3000")))
        parser.add_argument("--dtype", choices=["float16", "bfloat16"])
        for flag in (
            "--num-shard",
            "--max-input-tokens",
            "--max-total-tokens",
            "--max-concurrent-requests",
            "--max-batch-size",
        ):
            parser.add_argument(flag, type=int)
        parsed = parser.parse_args(argv)
        parsed.model_dir, parsed.host = parsed.model_id, parsed.hostname
    else:  # lightllm
        parser.add_argument("--model_dir", required=True)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--data_type", choices=["fp16", "float16", "bf16", "bfloat16", "fp32", "float32"])
        for flag in ("--tp", "--max_req_total_len", "--running_max_req_size"):
            parser.add_argument(flag, type=int)
        parsed = parser.parse_args(argv)
    return parsed


class Engine:
    """The served model: its tokenizer, its vocabulary, the counters /metrics shows."""

    def __init__(self, name: str, model_dir: Path, needs_weights: bool):
        config = json.loads((model_dir / "config.json").read_text())
        if needs_weights and not any(model_dir.glob("*.safetensors")):
            raise SystemExit(f"no weights (*.safetensors) in {model_dir}")
        self.name, self.tokenizer = name, Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.vocab = config["vocab_size"]
        self.lock = threading.Lock()
        self.generated = self.finished = self.prompt_tokens = self.received = 0
        self.refuse_every = int(os.environ.get("STUB_503_EVERY", "0")) if name == "vllm" else 0

    def refuses_next(self) -> bool:
        """Whether the request just received is one of those answered 503."""
        with self.lock:
            self.received += 1
            return bool(self.refuse_every) and self.received % self.refuse_every == 0

    def tokens(self, prompt: str, count: int, seed: int):
        rng = random.Random(seed)
        for _ in range(count):
            time.sleep(TOKEN_DELAY_S)
            token = rng.randrange(3, self.vocab)
            yield token, self.tokenizer.decode([token])

    def done(self, prompt_tokens: int, generated: int) -> None:
        with self.lock:
            self.generated += generated
            self.finished += 1
            self.prompt_tokens += prompt_tokens

    def metrics(self) -> str:
        """The counters under the names each engine's exporter gives them."""
        if self.name == "vllm":  # prometheus_client: counters with _total, labels
            labels = 'engine="0",model_name="kit-model"'
            return (
                f"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{{labels}}} {float(self.generated)}\n"
                f"vllm:prompt_tokens_total{{{labels}}} {float(self.prompt_tokens)}\n"
                f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="kit-model"}} {float(self.finished)}\n'
                f'vllm:request_success_total{{engine="0",finished_reason="abort",model_name="kit-model"}} 0.0\n'
            )
        if self.name == "tgi":  # metrics-exporter-prometheus 0.15: no _total suffix
            return (
                f"# TYPE tgi_request_success counter\ntgi_request_success {self.finished}\n"
                f"# TYPE tgi_request_generated_tokens histogram\ntgi_request_generated_tokens_sum {self.generated}\n"
                f"tgi_request_generated_tokens_count {self.finished}\n"
            )
        return (
            f"# TYPE lightllm_request_success_total counter\nlightllm_request_success_total {float(self.finished)}\n"
            f"# TYPE lightllm_request_generated_tokens histogram\nlightllm_request_generated_tokens_sum {float(self.generated)}\n"
        )


def handler_for(engine: Engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            routes = {
                ("vllm", "/health"): b"",
                ("vllm", "/version"): b'{"version":"0.30.0"}',
                ("tgi", "/health"): b"",
                ("tgi", "/info"): b'{"model_id":"/models","version":"3.3.6-dev0"}',
                ("lightllm", "/readiness"): b'{"status":"ok"}',
                ("lightllm", "/health"): b'{"message":"Ok"}',
            }
            if self.path == "/metrics":
                self.reply(200, engine.metrics().encode(), "text/plain; version=0.0.4")
            elif (engine.name, self.path) in routes:
                self.reply(200, routes[(engine.name, self.path)])
            else:
                self.reply(404, b'{"detail":"Not Found"}')

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            path = {"vllm": "/v1/completions", "tgi": "/generate_stream", "lightllm": "/generate_stream"}[engine.name]
            if self.path != path:
                return self.reply(404, b'{"detail":"Not Found"}')
            prompt = body.get("prompt") if engine.name == "vllm" else body["inputs"]
            params = body if engine.name == "vllm" else body["parameters"]
            count = params.get("max_tokens") if engine.name == "vllm" else params["max_new_tokens"]
            if engine.refuses_next():
                return self.reply(503, json.dumps(UNAVAILABLE, separators=(",", ":")).encode())
            prompt_tokens = len(engine.tokenizer.encode(prompt).ids)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            sent = 0
            for index, (token, text) in enumerate(engine.tokens(prompt, count, hash(prompt) & 0xFFFF), start=1):
                last = index == count
                self.wfile.write(
                    event(engine.name, token, text, index, last, prompt_tokens, params.get("return_token_ids"))
                )
                self.wfile.flush()
                sent += 1
            if engine.name == "vllm":  # the usage chunk, then the terminator
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens + sent,
                    "completion_tokens": sent,
                }
                chunk = {
                    "id": "cmpl-0",
                    "object": "text_completion",
                    "created": 0,
                    "model": "kit-model",
                    "choices": [],
                    "usage": usage,
                }
                self.wfile.write(
                    b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"
                )
            engine.done(prompt_tokens, sent)
            self.close_connection = True

    return Handler


def event(name: str, token: int, text: str, index: int, last: bool, prompt_tokens: int, token_ids=None) -> bytes:
    """One streamed token in the engine's wire format (see README.md for each source)."""
    if name == "vllm":  # `return_token_ids` lists the chunk's ids (completion/serving.py)
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": "length" if last else None,
            "stop_reason": None,
            "prompt_token_ids": None,
            "token_ids": [token] if token_ids else None,
        }
        chunk = {"id": "cmpl-0", "object": "text_completion", "created": 0, "model": "kit-model", "choices": [choice]}
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
    if name == "tgi":
        details = {"finish_reason": "length", "generated_tokens": index, "seed": None, "input_length": prompt_tokens}
        chunk = {
            "index": index,
            "token": {"id": token, "text": text, "logprob": -0.5, "special": False},
            "generated_text": "..." if last else None,
            "details": details if last else None,
        }
        return b"data:" + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
    chunk = {
        "token": {
            "id": token,
            "text": text,
            "logprob": -0.5,
            "special": False,
            "count_output_tokens": index,
            "prompt_tokens": prompt_tokens,
        },
        "generated_text": None,
        "finished": last,
        "finish_reason": "length" if last else None,
        "details": None,
    }
    return b"data:" + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def main(name: str, argv: list[str]) -> None:
    args = arguments(name, argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as PID 1, SIGTERM does nothing without a handler
    print(
        f"{name} stand-in: argv {argv}, user {os.getuid()}, python on PATH: "
        f"{any((Path(p) / 'python').exists() for p in os.environ.get('PATH', '').split(':'))}",
        flush=True,
    )
    engine = Engine(name, Path(args.model_dir), needs_weights=name != "vllm" or args.load_format != "dummy")
    compiled = Path(os.environ.get("VLLM_CACHE_ROOT", "")) / "stub-compiled"
    if name == "vllm" and os.environ.get("VLLM_CACHE_ROOT") and not compiled.exists():
        time.sleep(COMPILE_S)
        compiled.write_text("compiled\n")
    server = ThreadingHTTPServer((args.host or "0.0.0.0", args.port), handler_for(engine))
    server.daemon_threads = True
    print(f"listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
