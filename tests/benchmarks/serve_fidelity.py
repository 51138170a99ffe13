"""Does the kit's load generator measure what vLLM's own client measures?

Starts the real vLLM (the smoke profile's case: its CPU build, started as its image starts it,
through the kit's own placement), then, in rounds whose order rotates, fires the same burst (the
same prompts, all at once, the same output length, EOS ignored) with the kit's client, with
vLLM's `vllm bench serve` (the same vLLM environment, `--dataset-name custom` on those prompts),
and, given `--aiperf`, with NVIDIA AIPerf. Prints each figure per client (the median over the
rounds) and the kit's ratio to vLLM's: output tokens/s, TTFT median and p99, TPOT, ITL, E2E.

    python tests/benchmarks/serve_fidelity.py [--rounds 3] [--prompts 200] [--aiperf PATH]

Where the definitions differ (printed at the end): vLLM's end-to-end latency ends at the last
chunk with choices, the kit's at the end of the stream (the usage chunk and [DONE] follow it);
vLLM's duration is its whole benchmark's wall time (from before the first request to after the
last response is gathered), the kit's from the burst's release to the end of its last request.
AIPerf lives in its own environment: python -m venv /tmp/aiperf-venv &&
/tmp/aiperf-venv/bin/pip install aiperf.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kit.execute.local import LocalPlacement
from kit.model_files import load_tokenizer
from kit.protocol import build_plan, load_protocol
from kit.serve.aggregate import aggregate
from kit.serve.burst import burst_prompts, token_count
from kit.serve.client import fire_burst
from kit.serve.engines import engine_for
from kit.serve.session import model_directory, wait_ready

FIGURES = ("output_throughput", "ttft_median", "ttft_p99", "tpot_median", "tpot_mean", "itl_median", "itl_mean",
           "e2el_median", "e2el_mean")  # fmt: skip
TOKENIZER_REPO = "kit/served-model"


def kit_figures(base_url, engine, params, prompts, counts) -> dict:
    burst = fire_burst(base_url, engine, params, prompts, counts, 1800)
    totals = aggregate(burst.records, burst.duration)
    if totals.errors:
        raise RuntimeError(f"kit client: {totals.errors} requests failed: {totals.error_kinds}")
    return {
        "output_throughput": totals.output_throughput,
        "ttft_median": totals.ttft_s.median, "ttft_p99": totals.ttft_s.p99,
        "tpot_median": totals.tpot_s.median, "tpot_mean": totals.tpot_s.mean,
        "itl_median": totals.itl_s.median, "itl_mean": totals.itl_s.mean,
        "e2el_median": totals.latency_s.median, "e2el_mean": totals.latency_s.mean,
        "client_cpu_s": burst.load.cpu_s,
    }  # fmt: skip


def vllm_bench_figures(vllm: str, base_url: str, model_dir: str, dataset: Path, params, work: Path) -> dict:
    name = f"bench-{time.monotonic_ns()}.json"
    argv = [
        vllm, "bench", "serve", "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", "kit-model", "--tokenizer", model_dir, "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--custom-output-len", str(params.max_output_tokens), "--skip-chat-template", "--num-prompts", str(params.prompts),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", str(work), "--result-filename", name,
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if done.returncode != 0:
        raise RuntimeError(f"vllm bench serve failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    data = json.loads((work / name).read_text())
    if data["failed"]:
        raise RuntimeError(f"vllm bench serve: {data['failed']} requests failed")
    ms = 1e-3
    return {
        "output_throughput": data["output_throughput"],
        "ttft_median": data["median_ttft_ms"] * ms, "ttft_p99": data["p99_ttft_ms"] * ms,
        "tpot_median": data["median_tpot_ms"] * ms, "tpot_mean": data["mean_tpot_ms"] * ms,
        "itl_median": data["median_itl_ms"] * ms, "itl_mean": data["mean_itl_ms"] * ms,
        "e2el_median": data["median_e2el_ms"] * ms, "e2el_mean": data["mean_e2el_ms"] * ms,
    }  # fmt: skip


def hub_cache_for(model_dir: str, work: Path) -> Path:
    """A hub-cache layout holding the served tokenizer: aiperf, offline, resolves a tokenizer name
    only through the hub cache (local_files_only), never as a folder."""
    cache = work / "hub"
    snapshot = cache / f"models--{TOKENIZER_REPO.replace('/', '--')}" / "snapshots" / "local"
    if not snapshot.is_dir():
        snapshot.mkdir(parents=True)
        for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
            (snapshot / name).write_bytes((Path(model_dir) / name).read_bytes())
        (snapshot.parent.parent / "refs").mkdir()
        (snapshot.parent.parent / "refs" / "main").write_text("local")
    return cache


def aiperf_figures(aiperf: str, base_url: str, model_dir: str, prompts, params, work: Path) -> dict:
    dataset = work / "aiperf-prompts.jsonl"
    dataset.write_text("".join(json.dumps({"text": p}) + "\n" for p in prompts))
    out = work / f"aiperf-{time.monotonic_ns()}"
    extra = {"max_tokens": params.max_output_tokens, "ignore_eos": True, "temperature": 0.0}
    argv = [
        aiperf, "profile", "--model", "kit-model", "--url", base_url, "--tokenizer", TOKENIZER_REPO,
        "--endpoint-type", "completions", "--streaming", "--input-file", str(dataset),
        "--custom-dataset-type", "single_turn", "--request-count", str(len(prompts)), "--concurrency", str(len(prompts)),
        "--extra-inputs", json.dumps(extra), "--use-server-token-count", "--output-artifact-dir", str(out), "--no-auto-plot",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache_for(model_dir, work))}
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    found = list(out.rglob("profile_export_aiperf.json"))
    if done.returncode != 0 or not found:
        raise RuntimeError(f"aiperf failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    data = json.loads(found[0].read_text())
    ms = 1e-3
    return {
        "output_throughput": data["output_token_throughput"]["avg"],
        "ttft_median": data["time_to_first_token"]["p50"] * ms, "ttft_p99": data["time_to_first_token"]["p99"] * ms,
        "tpot_median": data["inter_token_latency"]["p50"] * ms, "tpot_mean": data["inter_token_latency"]["avg"] * ms,
        "itl_median": float("nan"), "itl_mean": float("nan"),
        "e2el_median": data["request_latency"]["p50"] * ms, "e2el_mean": data["request_latency"]["avg"] * ms,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--aiperf", help="the aiperf executable (in its own environment)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()

    case = next(c for c in build_plan(load_protocol(), "smoke").cases if c.stage == "serve")
    params = case.params.model_copy(update={"prompts": args.prompts, "input_tokens": args.input_tokens,
                                            "max_output_tokens": args.output_tokens})  # fmt: skip
    case = case.model_copy(update={"params": params})
    engine, placement, work = engine_for(params), LocalPlacement(), Path(tempfile.mkdtemp(prefix="serve-fidelity-"))
    model_dir, _ = model_directory(case, engine, placement, print)
    tokenizer = load_tokenizer(model_dir)
    prompts = burst_prompts(tokenizer, params.prompts, params.input_tokens, params.seed)
    counts = [token_count(tokenizer, p) for p in prompts]
    dataset = work / "prompts.jsonl"
    # vLLM bench re-encodes a custom prompt with the same tokenizer (special tokens included).
    dataset.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    handle, launch = placement.start(engine, case, model_dir, work, print)
    bin_dir = Path(launch["argv"][0]).parent
    if subprocess.run([str(bin_dir / "python"), "-c", "import pandas"], capture_output=True).returncode != 0:
        print("vllm bench's custom dataset reads its JSONL with pandas: installing it into the vLLM environment")
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "pandas"], check=True)
    tools = ["kit", "vllm bench serve"] + (["aiperf"] if args.aiperf else [])
    results: dict = {tool: [] for tool in tools}
    try:
        wait_ready(handle, engine.health_path, params.ready_timeout_s)
        fire_burst(handle.base_url, engine, params, prompts[:4], counts[:4], 600)  # warm-up, untimed
        for round_ in range(args.rounds):
            for tool in tools[round_ % len(tools):] + tools[: round_ % len(tools)]:  # the order rotates
                if tool == "kit":
                    results[tool].append(kit_figures(handle.base_url, engine, params, prompts, counts))
                elif tool == "aiperf":
                    results[tool].append(aiperf_figures(args.aiperf, handle.base_url, str(model_dir), prompts, params, work))
                else:
                    results[tool].append(vllm_bench_figures(launch["argv"][0], handle.base_url, str(model_dir), dataset, params, work))
                print(f"round {round_ + 1}: {tool}: {results[tool][-1]['output_throughput']:.0f} output tokens/s", flush=True)
    finally:
        handle.stop()
    medians = {tool: {f: statistics.median(r[f] for r in runs) for f in FIGURES} for tool, runs in results.items()}
    print(f"\nvLLM {launch.get('version')} on CPU, burst of {params.prompts} x {params.input_tokens} tokens, "
          f"{params.max_output_tokens} out, EOS ignored, {args.rounds} rounds (medians; times in ms)")  # fmt: skip
    header = f"{'figure':<18}" + "".join(f"{tool:>18}" for tool in tools) + f"{'kit / vllm bench':>18}"
    print(header)
    for f in FIGURES:
        scale = 1 if f == "output_throughput" else 1e3
        theirs = medians["vllm bench serve"][f]
        ratio = medians["kit"][f] / theirs if theirs else float("nan")
        cells = "".join(f"{scale * medians[tool][f]:>18.3f}" for tool in tools)
        print(f"{f:<18}{cells}{ratio:>13.3f} {'ok' if abs(ratio - 1) <= 0.05 else 'DIFF'}")
    print("Definitions: TTFT from sending to the first chunk with choices; ITL between successive such chunks; "
          "TPOT (E2E - TTFT) / (output tokens - 1); vLLM's E2E ends at its last chunk with choices, the kit's "
          "at the stream's end; aiperf's 'inter_token_latency' is its TPOT.")
    if args.json:
        args.json.write_text(json.dumps({"medians": medians, "rounds": results}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
