"""Does the kit's load generator measure what vLLM's own client measures?

Starts the real vLLM (the smoke profile's case: its CPU build, started as its image starts it,
through the kit's own placement), then, in rounds whose order rotates, fires the same burst (the
same prompts, all at once, the same output length, EOS ignored) with the kit's client, with
vLLM's `vllm bench serve` (the same vLLM environment, `--dataset-name custom` on those prompts;
one process for all its benchmarks, each through the function its CLI calls, so that none waits
the 15-20 s of its start after the kit's firing), and, given `--aiperf`, with NVIDIA AIPerf. Prints each figure per client (the median over the
rounds) and the kit's ratio to vLLM's: output tokens/s, TTFT median and p99, TPOT, ITL, E2E.

    python tests/benchmarks/serve_fidelity.py [--rounds 3] [--prompts 200] [--aiperf PATH]

With `--concurrency N [N ...]`, points of the sweep instead of the burst: at each N, the kit's
client keeps N of the prompts in flight (kit.serve.client.fire_at_concurrency) and vLLM's client
runs `--max-concurrency N` on the same prompts; beside the figures, what says whether a client
limited them: the kit's CPU share and event-loop lag (p99), and the CPU share of `vllm bench
serve` over its benchmark's last `duration` seconds (sampled from /proc); and, with outputs of one
length (the N requests in flight end together and N more follow), how close together each client
sent the requests of such a wave (wave_spread). vLLM is started with its prefix cache off (`--no-enable-prefix-caching`) there: the same prompts are sent again and
again, and each must cost what it cost the first time.

    python tests/benchmarks/serve_fidelity.py --concurrency 1 4 16 --prompts 48 --output-tokens 64

`--prompts-per-slot K` sends K x N prompts at each N instead (each of the N slots serves K requests
in turn), so that every point's firing lasts about as long: a firing of a few seconds meets the
engine at one speed of a host whose speed wanders in phases of seconds, and a longer one averages
over them.

`--output-spread F` gives each request its own output length, drawn once (seeded) from
L(1 - F) .. L(1 + F) around `--output-tokens` L, and sent to both clients alike. With one length
for all, the N requests in flight start and end together, and the next N arrive together: the
point runs in waves, whose TTFT depends on how the wave's requests fall on the engine's steps and
changes by a quarter from one firing to the next. Lengths that differ break the waves up.

The engine and the clients (one at a time) run on the CPUs the kit gives each on a CPU host
(kit.serve.cpu_split: the clients one CPU, the engine the others), so that neither client waits
for a core the engine keeps busy.

The engine's own speed wanders from one firing to the next (by a fifth, for seconds at a time, on
a shared host), so beside the ratio of the medians the table gives the median of the rounds'
paired ratios: within a round the two clients ran seconds apart, and the order alternates (kit
first, then vLLM first), so drift cancels. Before each point's rounds, one untimed firing at its
concurrency warms the engine up.

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
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kit.execute.local import LocalPlacement
from kit.plan.model_files import load_tokenizer
from kit.plan.protocol import build_plan, load_protocol
from kit.rundir.serving import aggregate
from kit.serve.burst import burst_prompts, token_count
from kit.serve.client import fire_at_concurrency, fire_burst
from kit.serve.cpu_split import cpu_split
from kit.serve.engines import VllmEngine, engine_for
from kit.serve.session import model_directory, wait_ready

FIGURES = (
    "output_throughput",
    "ttft_median",
    "ttft_p99",
    "tpot_median",
    "tpot_mean",
    "itl_median",
    "itl_mean",
    "e2el_median",
    "e2el_mean",
)
TOKENIZER_REPO = "kit/served-model"


def kit_figures(base_url, engine, params, prompts, counts, concurrency: int | None = None) -> dict:
    if concurrency is None:
        fired = fire_burst(base_url, engine, params, prompts, counts, 1800)
    else:
        fired = fire_at_concurrency(base_url, engine, params, prompts, counts, 1800, concurrency)
    totals = aggregate(fired.records, fired.duration)
    if totals.errors:
        raise RuntimeError(f"kit client: {totals.errors} requests failed: {totals.error_kinds}")
    return {
        "output_throughput": totals.output_throughput,
        "ttft_median": totals.ttft_s.median,
        "ttft_p99": totals.ttft_s.p99,
        "tpot_median": totals.tpot_s.median,
        "tpot_mean": totals.tpot_s.mean,
        "itl_median": totals.itl_s.median,
        "itl_mean": totals.itl_s.mean,
        "e2el_median": totals.latency_s.median,
        "e2el_mean": totals.latency_s.mean,
        "client_cpu_share": fired.load.cpu_share,
        "client_loop_lag_p99": fired.load.loop_lag_p99_s,
        "wave_spread": wave_spread([record.sent_at for record in fired.records]),
    }


WAVE_GAP_S = 0.05


def wave_spread(starts: list[float]) -> float:
    """How far apart a client sent the requests of one wave (median over the waves of the last
    start minus the first): at a concurrency N with outputs of one length, N requests start
    together, end in the same step and are followed by N more. A wave ends at a gap of more than
    WAVE_GAP_S between two starts."""
    ordered = sorted(starts)
    waves, first = [], ordered[0]
    for before, start in zip(ordered, ordered[1:]):
        if start - before > WAVE_GAP_S:
            waves.append(before - first)
            first = start
    waves.append(ordered[-1] - first)
    return statistics.median(waves)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far (/proc/<pid>/stat, fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def share_of_last(samples: list[tuple[float, float]], seconds: float) -> float:
    """The CPU share of the sampled process over its last `seconds` (its benchmark ends just before it exits)."""
    end_t, end_cpu = samples[-1]
    start_t, start_cpu = next(((t, c) for t, c in reversed(samples) if t <= end_t - seconds), samples[0])
    return (end_cpu - start_cpu) / (end_t - start_t) if end_t > start_t else float("nan")


# Runs in the vLLM environment: `vllm bench serve` as a process that stays, one benchmark per line of
# arguments on stdin, each through the function the CLI calls (vllm.benchmarks.serve.main); the
# line after it says it is done. Its import takes 15-20 s, and a firing that waited that long after
# the kit's would meet the engine at another speed.
BENCH_DRIVER = """
import json, sys, traceback
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
print("FIDELITY-READY", flush=True)
for line in sys.stdin:
    try:
        main(parser.parse_args(json.loads(line)))
        print("FIDELITY-DONE", flush=True)
    except BaseException:
        print("FIDELITY-FAILED " + json.dumps(traceback.format_exc()[-2000:]), flush=True)
"""


class VllmBench:
    """`vllm bench serve`, started once and given one benchmark at a time; the CPU time of its
    process is sampled every 50 ms while one runs."""

    def __init__(self, python: str, work: Path):
        self.log = (work / "vllm-bench.log").open("w")
        self.process = subprocess.Popen(
            [python, "-c", BENCH_DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        self.read_until("FIDELITY-READY")

    def read_until(self, marker: str) -> str:
        """Lines of its output (vLLM's own prints, to the log) until one starting with `marker`."""
        for line in self.process.stdout:
            if line.startswith(marker):
                return line
            if line.startswith("FIDELITY-FAILED"):
                raise RuntimeError(f"vllm bench serve failed:\n{json.loads(line.split(' ', 1)[1])}")
            self.log.write(line)
        raise RuntimeError(f"vllm bench serve exited ({self.process.wait()}): see {self.log.name}")

    def run(self, argv: list[str]) -> list[tuple[float, float]]:
        self.process.stdin.write(json.dumps(argv) + "\n")
        self.process.stdin.flush()
        samples, failed = [], []

        def read() -> None:
            try:
                self.read_until("FIDELITY-DONE")
            except RuntimeError as error:
                failed.append(error)

        reader = threading.Thread(target=read)
        reader.start()
        while reader.is_alive():
            samples.append((time.monotonic(), cpu_seconds(self.process.pid)))
            reader.join(0.05)
        if failed:
            raise failed[0]
        samples.append((time.monotonic(), cpu_seconds(self.process.pid)))
        return samples

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.wait(60)
        self.log.close()


def vllm_bench_figures(
    bench: VllmBench,
    base_url: str,
    model_dir: str,
    dataset: Path,
    prompts,
    params,
    work: Path,
    concurrency: int | None = None,
) -> dict:
    name = f"bench-{time.monotonic_ns()}.json"
    argv = [
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        "kit-model",
        "--tokenizer",
        model_dir,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--custom-output-len",
        "-1",  # -1: each row's own output_tokens
        "--skip-chat-template",
        "--num-prompts",
        str(len(prompts)),
        "--disable-shuffle",  # the first prompts of the file, in its order, as the kit sends them
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(work),
        "--result-filename",
        name,
    ]
    if concurrency is not None:  # no untimed test request first: the kit sends none
        argv += ["--max-concurrency", str(concurrency), "--ready-check-timeout-sec", "0"]
    samples = bench.run(argv)
    data = json.loads((work / name).read_text())
    if data["failed"]:
        raise RuntimeError(f"vllm bench serve: {data['failed']} requests failed")
    if data["completed"] != len(prompts):  # it makes up --num-prompts (1000 by default) by sampling again
        raise RuntimeError(f"vllm bench serve sent {data['completed']} requests, not the {len(prompts)} prompts")
    ms = 1e-3
    return {
        "output_throughput": data["output_throughput"],
        "ttft_median": data["median_ttft_ms"] * ms,
        "ttft_p99": data["p99_ttft_ms"] * ms,
        "tpot_median": data["median_tpot_ms"] * ms,
        "tpot_mean": data["mean_tpot_ms"] * ms,
        "itl_median": data["median_itl_ms"] * ms,
        "itl_mean": data["mean_itl_ms"] * ms,
        "e2el_median": data["median_e2el_ms"] * ms,
        "e2el_mean": data["mean_e2el_ms"] * ms,
        "client_cpu_share": share_of_last(samples, data["duration"]),
        "wave_spread": wave_spread(data["start_times"]),
    }


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


def aiperf_figures(
    aiperf: str, base_url: str, model_dir: str, prompts, params, work: Path, concurrency: int | None = None
) -> dict:
    dataset = work / "aiperf-prompts.jsonl"
    dataset.write_text("".join(json.dumps({"text": p}) + "\n" for p in prompts))
    out = work / f"aiperf-{time.monotonic_ns()}"
    extra = {"max_tokens": params.max_output_tokens, "ignore_eos": True, "temperature": 0.0}
    argv = [
        aiperf,
        "profile",
        "--model",
        "kit-model",
        "--url",
        base_url,
        "--tokenizer",
        TOKENIZER_REPO,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--input-file",
        str(dataset),
        "--custom-dataset-type",
        "single_turn",
        "--request-count",
        str(len(prompts)),
        "--concurrency",
        str(concurrency or len(prompts)),
        "--extra-inputs",
        json.dumps(extra),
        "--use-server-token-count",
        "--output-artifact-dir",
        str(out),
        "--no-auto-plot",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub_cache_for(model_dir, work))}
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    found = list(out.rglob("profile_export_aiperf.json"))
    if done.returncode != 0 or not found:
        raise RuntimeError(f"aiperf failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    data = json.loads(found[0].read_text())
    ms = 1e-3
    return {
        "output_throughput": data["output_token_throughput"]["avg"],
        "ttft_median": data["time_to_first_token"]["p50"] * ms,
        "ttft_p99": data["time_to_first_token"]["p99"] * ms,
        "tpot_median": data["inter_token_latency"]["p50"] * ms,
        "tpot_mean": data["inter_token_latency"]["avg"] * ms,
        "itl_median": float("nan"),
        "itl_mean": float("nan"),
        "e2el_median": data["request_latency"]["p50"] * ms,
        "e2el_mean": data["request_latency"]["avg"] * ms,
        "client_cpu_share": float("nan"),
        "client_loop_lag_p99": float("nan"),
    }


class VllmWithoutPrefixCache(VllmEngine):
    """vLLM as the kit starts it, with its prefix cache off (a documented flag of `vllm serve`),
    and, given `output_lengths`, each prompt's own `max_tokens`."""

    def __init__(self, output_lengths: dict[str, int] | None = None):
        self.output_lengths = output_lengths or {}

    def arguments(self, case, model_dir, host, port):
        return [*super().arguments(case, model_dir, host, port), "--no-enable-prefix-caching"]

    def request(self, prompt, params):
        path, body = super().request(prompt, params)
        return path, {**body, "max_tokens": self.output_lengths.get(prompt, body["max_tokens"])}


def output_lengths(count: int, tokens: int, spread: float, seed: int) -> list[int]:
    """Each request's output length, uniform over tokens * (1 -/+ spread), the same every run."""
    draw = random.Random(seed)
    return [max(1, round(tokens * (1 - spread + 2 * spread * draw.random()))) for _ in range(count)]


def rotated(tools: list[str], round_: int) -> list[str]:
    """The clients in a round's order: each goes first in turn."""
    return tools[round_ % len(tools) :] + tools[: round_ % len(tools)]


def paired_ratios(runs: dict, figure: str) -> list[float]:
    """The kit's figure over vLLM's client's in the same round, one ratio per round: the two ran
    seconds apart, against the engine in the same state, so the engine's drift over the rounds
    (its speed wanders by a fifth on a shared host) cancels where a ratio of medians keeps it."""
    return [k[figure] / v[figure] for k, v in zip(runs["kit"], runs["vllm bench serve"]) if v[figure]]


def median_interval(values: list[float], resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A 95 % bootstrap interval of the median (percentile method): how far the rounds' median
    could move with other rounds like them. Whether a gap is within 5 % is known only where this
    interval is narrower than that."""
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * resamples)], medians[int(0.975 * resamples) - 1]


def print_table(title: str, tools: list[str], runs: dict, in_waves: bool) -> dict:
    """Each figure's median over the rounds per client; the kit's ratio to vLLM's client, as the
    ratio of those medians and as the median (its quartiles, and its 95 % interval) of the
    rounds' paired ratios. `in_waves`: the point ran in waves (one output length for all), so
    how close together each client sent a wave's requests is printed too."""
    medians = {tool: {f: statistics.median(r[f] for r in runs[tool]) for f in FIGURES} for tool in tools}
    print(f"\n{title} (medians; times in ms)")
    print(
        f"{'figure':<18}"
        + "".join(f"{tool:>18}" for tool in tools)
        + f"{'kit / vllm bench':>18}{'paired (q1-q3) [95 % interval]':>38}"
    )
    for f in FIGURES:
        scale = 1 if f == "output_throughput" else 1e3
        theirs = medians["vllm bench serve"][f]
        ratio = medians["kit"][f] / theirs if theirs else float("nan")
        paired = paired_ratios(runs, f)
        if len(paired) >= 2:
            q1, median, q3 = statistics.quantiles(paired, n=4, method="inclusive")
            low, high = median_interval(paired)
        else:
            q1 = median = q3 = low = high = paired[0] if paired else float("nan")
        cells = "".join(f"{scale * medians[tool][f]:>18.3f}" for tool in tools)
        print(
            f"{f:<18}{cells}{ratio:>13.3f} {'ok' if abs(ratio - 1) <= 0.05 else 'DIFF'}"
            f"{median:>11.3f} ({q1:.2f}-{q3:.2f}) [{low:.2f}-{high:.2f}] {'ok' if abs(median - 1) <= 0.05 else 'DIFF'}"
        )
        medians.setdefault("paired", {})[f] = {"median": median, "q1": q1, "q3": q3, "low95": low, "high95": high}
    kit, theirs = runs["kit"], runs["vllm bench serve"]
    print(
        f"client limits: the kit used {max(r['client_cpu_share'] for r in kit):.0%} of a core at most, its event loop "
        f"lagged {1e3 * max(r['client_loop_lag_p99'] for r in kit):.1f} ms at most (p99); vllm bench serve used "
        f"{max(r['client_cpu_share'] for r in theirs):.0%} of a core at most"
    )
    if in_waves:
        print(
            f"a wave's requests were sent within {1e3 * statistics.median(r['wave_spread'] for r in kit):.1f} ms (kit) "
            f"and {1e3 * statistics.median(r['wave_spread'] for r in theirs):.1f} ms (vllm bench serve), medians"
        )
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=200, help="requests of the burst, or of each point")
    parser.add_argument("--prompts-per-slot", type=int, help="at each concurrency N, send N times this many requests")
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument(
        "--output-spread", type=float, default=0.0, help="each request's output length within +/- this share"
    )
    parser.add_argument(
        "--concurrency", type=int, nargs="+", help="points of the sweep at these concurrencies, not the burst"
    )
    parser.add_argument("--aiperf", help="the aiperf executable (in its own environment)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args()
    if args.output_spread and not args.concurrency:
        parser.error("--output-spread is for points of the sweep (--concurrency)")
    if args.output_spread and args.aiperf:
        parser.error("--output-spread gives each request its own length, which aiperf_figures does not send")

    case = next(c for c in build_plan(load_protocol(), "smoke").cases if c.stage == "serve")
    levels = args.concurrency or [None]  # None: the burst
    if args.prompts_per_slot and args.concurrency:
        args.prompts = args.prompts_per_slot * max(args.concurrency)
    lengths = output_lengths(args.prompts, args.output_tokens, args.output_spread, case.params.seed)
    params = case.params.model_copy(
        update={
            "prompts": args.prompts,
            "input_tokens": args.input_tokens,
            "max_output_tokens": max(lengths),
            "sweep": None,
        }
    )  # the engine's context fits the longest
    case = case.model_copy(update={"params": params})
    engine = VllmWithoutPrefixCache() if args.concurrency else engine_for(params)
    placement, work = LocalPlacement(), Path(tempfile.mkdtemp(prefix="serve-fidelity-"))
    model_dir, _ = model_directory(case, engine, placement, print)
    tokenizer = load_tokenizer(model_dir)
    prompts = burst_prompts(tokenizer, params.prompts, params.input_tokens, params.seed)
    counts = [token_count(tokenizer, p) for p in prompts]
    if args.concurrency:
        engine.output_lengths = dict(zip(prompts, lengths))
    dataset = work / "prompts.jsonl"
    # vLLM bench re-encodes a custom prompt with the same tokenizer (special tokens included).
    dataset.write_text("".join(json.dumps({"prompt": p, "output_tokens": n}) + "\n" for p, n in zip(prompts, lengths)))
    split = cpu_split(case)  # as the kit splits them: the clients (and vllm bench, started from here) on theirs
    handle, launch = placement.start(engine, case, model_dir, work, print, cpus=split.engine if split else None)
    if split:
        os.sched_setaffinity(0, split.client)
        print(f"engine on CPUs {list(split.engine)}, clients on {list(split.client)}")
    bin_dir = Path(launch["argv"][0]).parent
    if subprocess.run([str(bin_dir / "python"), "-c", "import pandas"], capture_output=True).returncode != 0:
        print("vllm bench's custom dataset reads its JSONL with pandas: installing it into the vLLM environment")
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "pandas"], check=True)
    tools = ["kit", "vllm bench serve"] + (["aiperf"] if args.aiperf else [])
    results: dict = {level: {tool: [] for tool in tools} for level in levels}
    bench = None
    try:
        bench = VllmBench(str(bin_dir / "python"), work)  # on the clients' CPUs, as this process is now
        wait_ready(handle, engine.health_path, params.ready_timeout_s)
        fire_burst(handle.base_url, engine, params, prompts[:4], counts[:4], 600)  # warm-up, untimed
        for level in levels:
            sent = len(prompts) if level is None or not args.prompts_per_slot else args.prompts_per_slot * level
            if level is not None:  # the engine's first batches of a new size run slower for tens of seconds
                kit_figures(handle.base_url, engine, params, prompts[:sent], counts[:sent], level)  # warm-up, untimed
            for round_ in range(args.rounds):
                for tool in rotated(tools, round_):
                    if tool == "kit":
                        found = kit_figures(handle.base_url, engine, params, prompts[:sent], counts[:sent], level)
                    elif tool == "aiperf":
                        found = aiperf_figures(
                            args.aiperf, handle.base_url, str(model_dir), prompts[:sent], params, work, level
                        )
                    else:
                        found = vllm_bench_figures(
                            bench, handle.base_url, str(model_dir), dataset, prompts[:sent], params, work, level
                        )
                    results[level][tool].append(found)
                    print(
                        f"{'burst' if level is None else f'concurrency {level}'}, round {round_ + 1}: {tool}: "
                        f"{found['output_throughput']:.0f} output tokens/s",
                        flush=True,
                    )
    finally:
        if bench is not None:
            bench.stop()
        handle.stop()
    per_point = f"{args.prompts_per_slot} per slot" if args.prompts_per_slot and args.concurrency else params.prompts
    what = f"{per_point} x {params.input_tokens} tokens, {args.output_tokens} out (+/- {args.output_spread:.0%}), EOS ignored, {args.rounds} rounds"
    medians = {}
    for level in levels:
        title = f"burst of {what}" if level is None else f"concurrency {level}, {what}, prefix cache off"
        medians[str(level)] = print_table(
            f"vLLM {launch.get('version')} on CPU, {title}",
            tools,
            results[level],
            in_waves=level is not None and level > 1 and not args.output_spread,
        )
    print(
        "Definitions: TTFT from sending to the first chunk with choices; ITL between successive such chunks; "
        "TPOT (E2E - TTFT) / (output tokens - 1); vLLM's E2E ends at its last chunk with choices, the kit's "
        "at the stream's end; aiperf's 'inter_token_latency' is its TPOT."
    )
    if args.json:
        args.json.write_text(
            json.dumps({"medians": medians, "rounds": {str(k): v for k, v in results.items()}}, indent=2)
        )


if __name__ == "__main__":
    sys.exit(main())
