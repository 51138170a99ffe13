"""Does the kit's load generator measure what an established one measures?

Starts one engine (by default the smoke profile's CPU engine, transformers serve, on the synthetic
tiny Llama), then, in alternating rounds against that same server, fires the same burst (the same
prompts, all at once, the same output length) with the kit's client and with NVIDIA AIPerf, and
prints each one's throughput, TTFT and end-to-end latency and the kit/AIPerf ratios.
On a GPU host, `--vllm-bench` adds vLLM's own `vllm bench serve` (point `--engine` at vllm).

    python tests/benchmarks/serve_fidelity.py --aiperf /tmp/aiperf-venv/bin/aiperf

AIPerf lives in its own environment (it pins its own dependencies): python -m venv
/tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf. It gets the prompts as a
single_turn JSONL file, `--concurrency N --request-count N` (all N in flight at once: the burst)
and the server's own token counts (`--use-server-token-count`), so both clients count the same.
The kit's client also reports its own cost (CPU per event, loop lag) and the capacity it has
against a server that does no work (`--null-server`), which bounds what it can measure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kit.protocol import build_plan, load_protocol
from kit.serve.aggregate import aggregate
from kit.serve.burst import burst_prompts, served_tokenizer, token_count
from kit.serve.client import fire_burst
from kit.serve.engines import engine_for
from kit.serve.process import EngineProcess, free_port
from kit.workloads.serve import model_directory

FIGURES = ("request_throughput", "output_throughput", "ttft_mean", "ttft_median", "latency_mean", "latency_median")


def smoke_case(engine: str, prompts: int, input_tokens: int, output_tokens: int):
    plan = build_plan(load_protocol(), "smoke")
    case = next(c for c in plan.cases if c.stage == "serve")
    params = case.params.model_copy(
        update={"engine": engine, "prompts": prompts, "input_tokens": input_tokens, "max_output_tokens": output_tokens}
    )
    return case.model_copy(update={"params": params})


def kit_figures(base_url, engine, params, prompts, counts) -> dict:
    burst = fire_burst(base_url, engine, params, prompts, counts, 1800)
    totals = aggregate(burst.records, burst.duration)
    if totals.errors:
        raise RuntimeError(f"kit client: {totals.errors} requests failed: {totals.error_kinds}")
    return {
        "request_throughput": totals.request_throughput,
        "output_throughput": totals.output_throughput,
        "ttft_mean": totals.ttft_s.mean,
        "ttft_median": totals.ttft_s.median,
        "latency_mean": totals.latency_s.mean,
        "latency_median": totals.latency_s.median,
        "client_cpu_us_per_event": burst.load.cpu_us_per_event,
        "client_cpu_s": burst.load.cpu_s,
        "client_cpu_share": burst.load.cpu_share,
        "client_loop_lag_p99_ms": 1e3 * burst.load.loop_lag_p99_s,
    }


TOKENIZER_REPO = "kit/served-model"


def hub_cache_for(model_dir: str, work: Path) -> Path:
    """A hub-cache layout holding the served model's tokenizer files. aiperf 0.13, offline,
    resolves a tokenizer name only through the hub cache (snapshot_download with
    local_files_only), never as a folder, and its built-in tokenizer downloads its encoding:
    this gives it the served tokenizer without a network."""
    cache = work / "hub"
    snapshot = cache / f"models--{TOKENIZER_REPO.replace('/', '--')}" / "snapshots" / "local"
    if not snapshot.is_dir():
        snapshot.mkdir(parents=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json"):
            if (Path(model_dir) / name).is_file():
                (snapshot / name).write_bytes((Path(model_dir) / name).read_bytes())
        refs = snapshot.parent.parent / "refs"
        refs.mkdir()
        (refs / "main").write_text("local")
    return cache


def aiperf_figures(aiperf: str, base_url: str, model_dir: str, prompts, output_tokens: int, body_extra: dict, work: Path) -> dict:
    dataset = work / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"text": p}) + "\n" for p in prompts))
    out = work / f"aiperf-{time.monotonic_ns()}"
    extra = {"max_tokens": output_tokens, **body_extra}
    argv = [
        aiperf, "profile", "--model", model_dir, "--url", base_url,
        "--tokenizer", TOKENIZER_REPO,
        "--endpoint-type", "completions", "--streaming",
        "--input-file", str(dataset), "--custom-dataset-type", "single_turn",
        "--request-count", str(len(prompts)), "--concurrency", str(len(prompts)),
        "--extra-inputs", json.dumps(extra), "--use-server-token-count",
        "--output-artifact-dir", str(out), "--no-auto-plot",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache_for(model_dir, work))}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    after, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - started
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    found = list(out.rglob("profile_export_aiperf.json"))
    if done.returncode != 0 or not found:
        raise RuntimeError(f"aiperf failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    data = json.loads(found[0].read_text())

    def stat(name, key):
        metric = data[name]
        scale = {"ms": 1e-3, "s": 1.0, "ns": 1e-9}.get(metric.get("unit", "ms"), 1e-3)
        return metric[key] * scale if "s" in metric.get("unit", "ms") else metric[key]

    errors = data.get("error_request_count", {}).get("avg", 0)
    if errors:
        raise RuntimeError(f"aiperf: {errors} requests failed")
    return {
        "request_throughput": data["request_throughput"]["avg"],
        "output_throughput": data["output_token_throughput"]["avg"],
        "ttft_mean": stat("time_to_first_token", "avg"),
        "ttft_median": stat("time_to_first_token", "p50"),
        "latency_mean": stat("request_latency", "avg"),
        "latency_median": stat("request_latency", "p50"),
        "client_cpu_s": cpu,  # every aiperf process, start-up and reporting included
        "client_wall_s": wall,
    }


class NullEngine(BaseHTTPRequestHandler):
    """A server that does no work: it answers each request with `tokens` chunks at once."""

    tokens = 32
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunk = b'data: {"choices":[{"index":0,"text":" x"}],"object":"text_completion"}\n\n'
        last = ('data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":'
                f'{{"completion_tokens":{self.tokens},"prompt_tokens":1}}}}\n\n').encode()  # fmt: skip
        for data in [chunk] * self.tokens + [last]:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args):
        pass


def null_capacity(engine, params, prompts, counts) -> dict:
    """The client alone: a burst against a server that answers instantly."""
    handler = type("Null", (NullEngine,), {"tokens": params.max_output_tokens})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        burst = fire_burst(f"http://127.0.0.1:{server.server_port}", engine, params, prompts, counts, 600)
    finally:
        server.shutdown()
    totals = aggregate(burst.records, burst.duration)
    return {
        "events_per_s": burst.load.events / burst.duration,
        "output_tokens_per_s": totals.output_throughput,
        "cpu_us_per_event": burst.load.cpu_us_per_event,
        "note": "the null server shares this machine's cores with the client: a lower bound",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiperf", required=True, help="the aiperf executable (in its own environment)")
    parser.add_argument("--engine", default="transformers-cpu")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="alternating kit/aiperf rounds")
    parser.add_argument("--null-server", action="store_true", help="also measure the client against a no-work server")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()

    case = smoke_case(args.engine, args.prompts, args.input_tokens, args.output_tokens)
    engine, params = engine_for(case.params), case.params
    model_dir, _ = model_directory(case)
    tokenizer = served_tokenizer(model_dir)
    prompts = burst_prompts(tokenizer, params.prompts, params.input_tokens, params.seed)
    counts = [token_count(tokenizer, p) for p in prompts]
    _, body = engine.request(prompts[0], params)
    body_extra = {k: v for k, v in body.items() if k not in ("prompt", "model", "max_tokens", "stream", "stream_options")}

    work = Path(tempfile.mkdtemp(prefix="serve-fidelity-"))
    port = free_port()
    server = EngineProcess(engine.command(case, model_dir, port), work / "engine.log", port,
                           {**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    results: dict = {"kit": [], "aiperf": []}
    try:
        server.wait_ready(engine.health_path, params.ready_timeout_s)
        fire_burst(server.base_url, engine, params, prompts[:1], counts[:1], 600)  # warm-up, untimed
        for round_ in range(args.rounds):
            # Which client goes first alternates, so neither always meets the server right after
            # the other (aiperf's processes take seconds to wind down).
            order = ("kit", "aiperf") if round_ % 2 == 0 else ("aiperf", "kit")
            for tool in order:
                if tool == "kit":
                    results["kit"].append(kit_figures(server.base_url, engine, params, prompts, counts))
                else:
                    results["aiperf"].append(aiperf_figures(
                        args.aiperf, server.base_url, model_dir, prompts, params.max_output_tokens, body_extra, work
                    ))  # fmt: skip
    finally:
        server.stop()
    if args.null_server:
        results["null_server"] = null_capacity(engine, params, prompts, counts)

    means = {tool: {f: statistics.fmean(r[f] for r in runs) for f in FIGURES} for tool, runs in
             (("kit", results["kit"]), ("aiperf", results["aiperf"]))}  # fmt: skip
    results["ratio_kit_over_aiperf"] = {f: means["kit"][f] / means["aiperf"][f] for f in FIGURES}
    # A round's two bursts run back to back: a pair shares the host's load of the moment, so the
    # median of the per-pair ratios is less exposed to load drifting over the rounds.
    pairs = {f: [k[f] / a[f] for k, a in zip(results["kit"], results["aiperf"])] for f in FIGURES}
    results["pair_ratios"] = pairs
    spread = {tool: {f: max(r[f] for r in runs) / min(r[f] for r in runs) for f in FIGURES}
              for tool, runs in (("kit", results["kit"]), ("aiperf", results["aiperf"]))}  # fmt: skip
    results["round_spread_max_over_min"] = spread
    print(f"engine {engine.name}, burst of {params.prompts} x {params.input_tokens} tokens, "
          f"{params.max_output_tokens} out, {args.rounds} rounds each")  # fmt: skip
    print(f"{'figure':<20}{'kit mean':>10}{'aiperf mean':>12}{'ratio of means':>15}{'median pair ratio':>19}"
          f"{'kit spread':>11}{'aiperf spread':>14}")  # fmt: skip
    for f in FIGURES:
        print(f"{f:<20}{means['kit'][f]:>10.3f}{means['aiperf'][f]:>12.3f}{results['ratio_kit_over_aiperf'][f]:>15.3f}"
              f"{statistics.median(pairs[f]):>19.3f}{spread['kit'][f]:>11.2f}{spread['aiperf'][f]:>14.2f}")  # fmt: skip
    print("(spread: the largest round's value over the smallest, per client; throughput in /s, times in s)")
    kit_runs = results["kit"]
    print(f"kit client cost: {statistics.fmean(r['client_cpu_us_per_event'] for r in kit_runs):.0f} us CPU per event, "
          f"{100 * statistics.fmean(r['client_cpu_share'] for r in kit_runs):.1f} % of a core, "
          f"loop lag p99 {statistics.fmean(r['client_loop_lag_p99_ms'] for r in kit_runs):.1f} ms")  # fmt: skip
    aiperf_runs = results["aiperf"]
    print(f"aiperf cost: {statistics.fmean(r['client_cpu_s'] for r in aiperf_runs):.1f} s CPU over "
          f"{statistics.fmean(r['client_wall_s'] for r in aiperf_runs):.1f} s wall per run (all its processes, "
          f"start-up included); the kit client: {statistics.fmean(r['client_cpu_s'] for r in kit_runs):.2f} s CPU per burst")
    if "null_server" in results:
        null = results["null_server"]
        print(f"kit client against a no-work server: {null['events_per_s']:.0f} events/s, "
              f"{null['output_tokens_per_s']:.0f} output tokens/s, {null['cpu_us_per_event']:.0f} us CPU per event")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    sys.exit(main())
