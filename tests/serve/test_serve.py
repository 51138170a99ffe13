"""The serving stage: engine command lines, the engines' real streams, the metric definitions,
exact prompt lengths, the saturation check, and the serve stage run for real on this CPU."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import support
import yaml

from kit.plan.model_files import load_tokenizer
from kit.plan.protocol import load_protocol
from kit.reference.published import load_reference
from kit.rundir.serving import ClientLoad, RequestRecord, aggregate, percentile, saturation
from kit.serve.burst import burst_prompts, token_count
from kit.serve.client import fire_burst
from kit.serve.engines import ENGINES, engine_for
from kit.serve.sse import EventFramer, parse_stream

FIXTURES = support.FIXTURES / "serve"
KIT = [sys.executable, "-m", "kit.cli"]
SERVE_STAGE = [*KIT, "run", "--stage", "serve", "--profile", "smoke", "--executor", "local", "--out"]


def paper_case(paper_plan, case_id):
    return next(c for c in paper_plan.cases if c.id == case_id)


def smoke_serve_case(smoke_plan):
    return next(c for c in smoke_plan.cases if c.stage == "serve")


def smoke_params():
    from kit.plan.protocol import build_plan

    return smoke_serve_case(build_plan(load_protocol(), "smoke")).params


def option(argv, flag):
    return argv[argv.index(flag) + 1]


# --- command lines: only each engine's documented arguments ------------------------------------


def test_vllm_arguments_follow_its_serve_command_and_make_random_weights(paper_plan):
    case = paper_case(paper_plan, "serve.llama2-70b.vllm.g8")
    engine = engine_for(case.params)
    argv = engine.arguments(case, "/models/llama2-70b", "0.0.0.0", 8000)
    assert engine.entrypoint == ("vllm", "serve") and engine.command == ()  # the image's ENTRYPOINT starts it
    assert argv[0] == "/models/llama2-70b"  # `vllm serve MODEL`
    assert option(argv, "--tensor-parallel-size") == "8" and option(argv, "--dtype") == "bfloat16"
    assert option(argv, "--max-model-len") == str(512 + case.params.max_output_tokens)
    assert option(argv, "--load-format") == "dummy" and engine.makes_random_weights
    assert option(argv, "--host") == "0.0.0.0" and option(argv, "--port") == "8000"
    assert "--enforce-eager" not in argv and engine.environment(case) == {}  # CUDA graphs stay on a GPU


def test_vllm_on_a_cpu_differs_only_by_its_device_settings(paper_plan, smoke_plan):
    gpu, cpu = paper_case(paper_plan, "serve.llama2-7b.vllm.g8"), smoke_serve_case(smoke_plan)
    engine = engine_for(cpu.params)
    assert cpu.params.engine == "vllm" and cpu.device == "cpu"
    gpu_flags = set(engine.arguments(gpu, "/m", "h", 1)[1::2])
    cpu_flags = set(engine.arguments(cpu, "/m", "h", 1)[1::2])
    assert cpu_flags - gpu_flags == {"--enforce-eager"} and engine.environment(cpu) == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_on_a_cpu_host_the_client_keeps_a_cpu_and_vllm_binds_its_threads_to_the_engines(paper_plan, smoke_plan):
    """vLLM's CPU workers bind their OpenMP threads themselves (VLLM_CPU_OMP_THREADS_BIND; 'auto' takes
    every core of a NUMA node but one it leaves to its scheduler), so the engine's CPUs are named to it."""
    from kit.serve.cpu_split import cpu_split
    from kit.serve.engines import omp_threads_bind

    gpu, cpu = paper_case(paper_plan, "serve.llama2-7b.vllm.g8"), smoke_serve_case(smoke_plan)
    assert cpu_split(gpu, range(64)) is None and cpu_split(cpu, [0]) is None
    two, eight = cpu_split(cpu, [0, 1]), cpu_split(cpu, range(8))
    assert (two.engine, two.client) == ((0,), (1,)) and (eight.engine, eight.client) == (tuple(range(7)), (7,))
    engine = engine_for(cpu.params)
    assert engine.environment(cpu, two.engine)["VLLM_CPU_OMP_THREADS_BIND"] == "0"  # one core: the scheduler shares it
    assert engine.environment(cpu, eight.engine)["VLLM_CPU_OMP_THREADS_BIND"] == "0,1,2,3,4,5"  # CPU 6 its scheduler's
    assert omp_threads_bind(range(9), 2) == "0,1,2|3,4,5" and omp_threads_bind([0], 2) is None
    assert engine.environment(gpu, range(7)) == {}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="a split needs two CPUs")
def test_the_engine_process_and_its_children_run_on_the_engines_cpus_and_the_client_thread_on_its_own(tmp_path):
    from kit.serve.cpu_split import running_on
    from kit.serve.process import EngineProcess

    first, *rest = sorted(os.sched_getaffinity(0))
    child = (
        "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)), subprocess.run([sys.executable, '-c', "
        "'import os; print(sorted(os.sched_getaffinity(0)))'], capture_output=True, text=True).stdout, flush=True)"
    )
    engine = EngineProcess([sys.executable, "-c", child], tmp_path / "engine.log", 0, dict(os.environ), [first])
    engine.process.wait(30)
    assert (tmp_path / "engine.log").read_text().split() == [f"[{first}]", f"[{first}]"]
    before = os.sched_getaffinity(0)
    with running_on(rest):
        assert sorted(os.sched_getaffinity(0)) == rest
    assert os.sched_getaffinity(0) == before


def test_tgi_arguments_admit_the_whole_burst_and_name_the_host(paper_plan):
    case = paper_case(paper_plan, "serve.llama2-13b.tgi.g8")
    engine = engine_for(case.params)
    argv = engine.arguments(case, "/models/llama2-13b", "0.0.0.0", 80)
    assert engine.command == () and option(argv, "--model-id") == "/models/llama2-13b"
    assert option(argv, "--num-shard") == "8" and option(argv, "--dtype") == "bfloat16"
    assert option(argv, "--max-input-tokens") == "512"
    assert option(argv, "--max-total-tokens") == str(512 + case.params.max_output_tokens)
    assert option(argv, "--max-concurrent-requests") == "1000"  # TGI's default (128) would refuse 872
    assert option(argv, "--hostname") == "0.0.0.0"  # else it reads docker's HOSTNAME (the container id)
    assert not engine.makes_random_weights and engine.container_port == 80


def test_lightllm_is_started_by_its_documented_command_on_all_interfaces(paper_plan):
    case = paper_case(paper_plan, "serve.llama2-7b.lightllm.g8")
    engine = engine_for(case.params)
    argv = engine.arguments(case, "/models/llama2-7b", "0.0.0.0", 8000)
    assert (
        engine.command == ("python", "-m", "lightllm.server.api_server")
        and option(argv, "--model_dir") == "/models/llama2-7b"
    )
    assert option(argv, "--tp") == "8" and option(argv, "--data_type") == "bf16"
    assert option(argv, "--max_req_total_len") == str(512 + case.params.max_output_tokens)
    assert option(argv, "--host") == "0.0.0.0"  # its default, 127.0.0.1, is unreachable through a published port
    assert engine.health_path == "/readiness"  # /health runs a generation on every call


def test_requests_ask_every_engine_for_the_same_greedy_length(paper_plan):
    greedy = {"vllm": {"temperature": 0.0}, "tgi": {"do_sample": False}, "lightllm": {"top_k": 1}}
    for name, setting in greedy.items():
        case = paper_case(paper_plan, f"serve.llama2-7b.{name}.g8")
        _, body = engine_for(case.params).request("hello", case.params)
        asked = body["parameters"] if "parameters" in body else body
        assert asked.get("max_tokens", asked.get("max_new_tokens")) == case.params.max_output_tokens
        assert setting.items() <= asked.items()
    vllm = paper_case(paper_plan, "serve.llama2-7b.vllm.g8")
    _, body = engine_for(vllm.params).request("hello", vllm.params)
    assert body["ignore_eos"] is True and body["stream"] and body["stream_options"]["include_usage"]


# --- the engines' real streams -------------------------------------------------------------------


def events_of(name, fixture):
    engine = ENGINES[name]
    return [engine.parse(data) for data in parse_stream((FIXTURES / fixture).read_bytes())]


def test_every_fixture_names_its_source():
    for fixture in FIXTURES.glob("*.sse"):
        assert fixture.with_suffix(".source").is_file(), fixture.name


def test_vllm_recorded_stream_has_one_token_event_per_generated_token():
    """vLLM 0.32's real stream: 32 chunks with choices (5 of them with empty text), then usage."""
    raw = (FIXTURES / "vllm-0.32-completions-stream.sse").read_bytes()
    assert raw.count(b'"text":""') > 1  # chunks that complete no character still stand for a token
    events = events_of("vllm", "vllm-0.32-completions-stream.sse")
    assert sum(e.token_events for e in events) == 32
    assert [e.output_tokens for e in events if e.output_tokens] == [32]
    assert [e.prompt_tokens for e in events if e.prompt_tokens] == [8] and events[-1].finished


def test_a_vllm_chunk_that_carries_several_tokens_counts_each_by_its_ids():
    """With `return_token_ids`, vLLM lists each chunk's ids (0.30 completion/serving.py); a chunk
    of the engine running ahead of the reader carries several: one event, three tokens."""
    engine = ENGINES["vllm"]
    recorded = parse_stream((FIXTURES / "vllm-0.32-completions-stream.sse").read_bytes())[0]
    three = recorded.replace('"token_ids":null', '"token_ids":[11,12,13]')
    first = recorded.replace('"prompt_token_ids":null', '"prompt_token_ids":[1,5,6,7]').replace(
        '"token_ids":null', '"token_ids":[9]'
    )
    assert (engine.parse(three).token_events, engine.parse(three).tokens) == (1, 3)
    assert engine.parse(first).tokens == 1  # the prompt's ids, sent with the first chunk, are not output
    assert engine.parse(recorded).tokens == 1  # no ids asked for: one token per chunk
    assert engine.request("p", smoke_params())[1]["return_token_ids"] is True


def test_tgi_stream_counts_token_events():
    events = events_of("tgi", "tgi-generate-stream.sse")
    assert sum(e.token_events for e in events) == 5 and all(e.output_tokens is None for e in events)
    assert not any(e.finished for e in events)  # the comment shows the stream's first five events only


def test_tgi_final_event_carries_the_generated_token_count():
    # StreamResponse and StreamDetails as TGI v3.3.6 serialises them (router/src/lib.rs).
    event = ENGINES["tgi"].parse(
        '{"index":5,"token":{"id":278,"text":" the","logprob":0.0,"special":false},"generated_text":"a the",'
        '"details":{"finish_reason":"length","generated_tokens":5,"seed":null,"input_length":4}}'
    )
    assert (event.token_events, event.output_tokens, event.finished) == (1, 5, True)


def test_lightllm_stream_reports_running_counts():
    events = events_of("lightllm", "lightllm-generate-stream.sse")
    assert sum(e.token_events for e in events) == 3
    assert events[-1].output_tokens == 3 and events[-1].prompt_tokens == 4 and events[-1].finished


def test_event_framing_does_not_depend_on_how_bytes_arrive():
    raw = (FIXTURES / "vllm-0.32-completions-stream.sse").read_bytes()
    framer = EventFramer()
    one_by_one = [data for i in range(len(raw)) for data in framer.feed(raw[i : i + 1])] + framer.close()
    assert one_by_one == parse_stream(raw) and len(one_by_one) == 34
    assert parse_stream(b"data: a\r\n\r\ndata:b\r\rdata: c") == ["a", "b", "c"]
    assert parse_stream(b": keep-alive\n\ndata: x\n\n") == ["x"]  # comments carry nothing


class ReplayHandler(BaseHTTPRequestHandler):
    """Answers every POST with one fixture's bytes, event by event, then closes (HTTP/1.0);
    `cut` bytes are left off the end, as a connection that drops mid-stream leaves them."""

    fixture = b""
    cut = 0

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in re.split(rb"(?<=\n\n)", self.fixture[: len(self.fixture) - self.cut]):
            self.wfile.write(piece)
            self.wfile.flush()
            time.sleep(0.005)

    def log_message(self, *args):
        pass


def replay(smoke_plan, name, raw: bytes, cut: int = 0):
    handler = type("Replay", (ReplayHandler,), {"fixture": raw, "cut": cut})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        params = smoke_serve_case(smoke_plan).params
        return fire_burst(f"http://127.0.0.1:{server.server_port}", ENGINES[name], params, ["p"] * 4, [8] * 4, 30)
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "name, fixture, tokens, source",
    [
        ("vllm", "vllm-0.32-completions-stream.sse", 32, "server"),
        ("lightllm", "lightllm-generate-stream.sse", 3, "server"),
    ],
)
def test_client_reads_each_engines_real_stream(smoke_plan, name, fixture, tokens, source):
    burst = replay(smoke_plan, name, (FIXTURES / fixture).read_bytes())
    assert all(r.ok for r in burst.records), [r.error for r in burst.records]
    assert {(r.output_tokens, r.output_tokens_source, r.streamed_tokens) for r in burst.records} == {
        (tokens, source, tokens)
    }
    record = burst.records[0]
    assert 0 < record.ttft <= record.latency and len(record.itl) == record.token_events - 1
    assert burst.load.events > 0 and burst.load.cpu_s > 0


def test_a_last_event_without_its_blank_line_still_counts(smoke_plan):
    raw = (FIXTURES / "lightllm-generate-stream.sse").read_bytes().rstrip(b"\n")
    burst = replay(smoke_plan, "lightllm", raw)
    assert all(r.ok and r.streamed_tokens == 3 and r.output_tokens == 3 for r in burst.records), [
        r.error for r in burst.records
    ]


def test_a_stream_cut_in_the_middle_of_an_event_is_that_requests_error(smoke_plan):
    burst = replay(smoke_plan, "lightllm", (FIXTURES / "lightllm-generate-stream.sse").read_bytes(), cut=40)
    assert all(not r.ok and "in the middle of an event" in r.error for r in burst.records)


def test_a_stream_that_stops_before_the_engine_finished_is_an_error_not_a_short_count(smoke_plan):
    burst = replay(smoke_plan, "tgi", (FIXTURES / "tgi-generate-stream.sse").read_bytes())
    assert all(not r.ok and "before the engine finished" in r.error for r in burst.records)
    assert {r.streamed_tokens for r in burst.records} == {5}


def test_server_counters_are_read_from_the_engines_real_metrics_page():
    from kit.serve.prometheus import counter_total, parse_samples

    samples = parse_samples((FIXTURES / "vllm-0.32-metrics-after-52-requests.prom").read_text())
    engine = ENGINES["vllm"]
    assert counter_total(samples, engine.generated_tokens.metric_names()[0]) == 1640
    finished = engine.finished_requests
    assert counter_total(samples, finished.metric_names()[0], dict(finished.exclude)) == 52
    assert counter_total(samples, "vllm:no_such_counter_total") is None


def test_a_label_value_holding_a_brace_and_an_escaped_quote_keeps_its_sample_and_reads_unescaped():
    from kit.serve.prometheus import counter_total, parse_samples

    page = (
        "# TYPE vllm:request_success_total counter\n"
        'vllm:request_success_total{finished_reason="length",model_name="/models/a}b \\"c\\""} 7.0\n'
        'vllm:request_success_total{finished_reason="abort",model_name="/models/a}b \\"c\\""} 2.0\n'
    )
    samples = parse_samples(page)
    assert [sample.labels["model_name"] for sample in samples] == ['/models/a}b "c"'] * 2
    assert counter_total(samples, "vllm:request_success_total", {"finished_reason": ("abort",)}) == 7


def test_a_metrics_page_that_is_not_prometheus_text_leaves_the_counters_unknown_with_the_parsers_words(monkeypatch):
    from kit.serve import prometheus, session

    monkeypatch.setattr(prometheus, "http_get", lambda url, timeout: (200, b"<html>not found</html>\n"))
    reason = session.read_counters(ENGINES["vllm"], "http://127.0.0.1:1")
    assert isinstance(reason, str) and reason.startswith("GET /metrics answered a page that is not Prometheus text: ")


# --- metric definitions --------------------------------------------------------------------------


def test_percentiles_interpolate_linearly_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(1, 11)), 90) == pytest.approx(9.1)
    assert percentile([5.0], 99) == 5.0 and percentile([3, 1, 2], 0) == 1


def test_percentiles_match_numpy_default():
    numpy = pytest.importorskip("numpy")
    values = [0.3, 1.7, 0.2, 9.0, 4.4, 4.4, 0.01]
    for q in (50, 90, 99):
        assert percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)))


def record(index, ttft, latency, tokens, error=None, sent=0.0):
    return RequestRecord(
        index=index,
        input_tokens=100,
        sent_at=sent,
        ttft=ttft,
        latency=None if error else latency,
        output_tokens=tokens,
        token_events=tokens,
        error=error,
    )


def test_aggregates_count_only_finished_requests():
    records = [record(0, 0.5, 2.5, 11), record(1, 1.0, 3.0, 11), record(2, None, None, 3, error="ServerDisconnected")]
    totals = aggregate(records, duration=4.0)
    assert (totals.completed, totals.errors) == (2, 1)
    assert totals.request_throughput == 0.5 and totals.output_throughput == 22 / 4
    assert totals.total_token_throughput == (200 + 22) / 4
    assert totals.tpot_s.mean == pytest.approx(((2.5 - 0.5) / 10 + (3.0 - 1.0) / 10) / 2)
    assert totals.ttft_s.median == 0.75 and totals.error_kinds == {"ServerDisconnected": 1}


def load(cpu=0.2, wall=10.0, lag=0.001, dispatch=0.01):
    return ClientLoad(cpu_s=cpu, wall_s=wall, events=1000, dispatch_s=dispatch, loop_lag_p99_s=lag, loop_lag_max_s=lag)


def test_saturation_check_passes_an_idle_client():
    verdict = saturation(load(), median_tpot=0.05, duration=10.0)
    assert not verdict.client_limited and verdict.cpu_us_per_event == pytest.approx(200)


@pytest.mark.parametrize(
    "client, words",
    [
        (load(cpu=9.5), "of a core"),
        (load(lag=0.02), "lagged"),
        (load(dispatch=1.0), "to send"),
    ],
)
def test_saturation_check_flags_a_client_that_limited_the_run(client, words):
    verdict = saturation(client, median_tpot=0.05, duration=10.0)
    assert verdict.client_limited and words in verdict.reasons[0]


def test_a_lagging_client_is_flagged_even_when_events_arrive_together():
    """Events read together are microseconds apart: a median ITL near zero must not switch the
    lag test off (1000 x 512 burst: p99 lag 3.4 s, median ITL 0.000 ms, said 'not limited')."""
    verdict = saturation(load(lag=3.4), median_tpot=0.08, duration=60.0)
    assert verdict.client_limited and "lagged" in verdict.reasons[0]
    assert saturation(load(lag=3.4), median_tpot=None, duration=60.0).client_limited


# --- prompts of exactly L tokens -----------------------------------------------------------------


@pytest.fixture(scope="module")
def served_model(tmp_path_factory):
    from kit.plan.model_files import weightless_model

    return weightless_model(
        "tiny-llama", load_protocol().models["tiny-llama"], 1234, root=tmp_path_factory.mktemp("models")
    )


def test_the_served_model_has_a_local_tokenizer_of_the_models_vocabulary(served_model):
    tokenizer = load_tokenizer(served_model)
    assert tokenizer.get_vocab_size() == load_protocol().models["tiny-llama"].vocab_size
    assert tokenizer.encode("x").ids[0] == tokenizer.token_to_id("<s>") == 1 and tokenizer.token_to_id("</s>") == 2


def test_transformers_reads_the_served_tokenizer_as_the_host_counts_it(served_model):
    """Engines load it with their own transformers; it must count as the kit's `tokenizers` does."""
    from transformers import AutoTokenizer

    theirs, ours = AutoTokenizer.from_pretrained(served_model), load_tokenizer(served_model)
    text = " zutdyn mun ch digol pane thyr"
    assert theirs(text)["input_ids"] == ours.encode(text).ids


@pytest.mark.parametrize("length", [2, 17, 128, 512])
def test_every_prompt_has_exactly_the_configured_token_count(served_model, length):
    tokenizer = load_tokenizer(served_model)
    prompts = burst_prompts(tokenizer, 50, length, seed=7)
    assert {token_count(tokenizer, p) for p in prompts} == {length}
    assert {len(tokenizer.encode(p).ids) for p in prompts} == {length}
    assert len(set(prompts)) == 50 and burst_prompts(tokenizer, 50, length, seed=7) == prompts


def test_an_engine_not_installed_here_is_unavailable_with_how_to_run_it_in_its_image(paper_plan):
    from kit.serve.local_engines import local_command
    from kit.workloads.harness import Unavailable

    case = paper_case(paper_plan, "serve.llama2-7b.tgi.g8")
    with pytest.raises(Unavailable, match="kit images pull serve-tgi"):
        local_command(engine_for(case.params), case, print)


def test_vllm_on_a_gpu_host_without_docker_gets_an_environment_of_its_pinned_wheel(paper_plan, tmp_path, monkeypatch):
    """A GPU serve case run locally makes vLLM's CUDA environment with pip, which reads its own
    variables: here a folder of wheels without vLLM, so pip cannot, and the case says why."""
    from kit.serve.local_engines import environment_for, local_command
    from kit.workloads.harness import Unavailable

    case = paper_case(paper_plan, "serve.llama2-7b.vllm.g8")
    name, environment = environment_for(engine_for(case.params), "cuda")
    assert (name, environment.requirement) == ("vllm-cuda", "vllm==0.30.0")
    (tmp_path / "wheels").mkdir()
    for variable, value in {
        "KIT_CACHE": tmp_path / "cache",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": tmp_path / "wheels",
    }.items():
        monkeypatch.setenv(variable, str(value))
    with pytest.raises(
        Unavailable, match=r"the vllm-cuda environment could not be made: pip install .*vllm==0\.30\.0 failed"
    ):
        local_command(engine_for(case.params), case, print)


# --- the stage, for real, on this CPU ----------------------------------------------------------


def run_dir_case(run: Path) -> Path:
    return next(run.glob("cases/serve.*"))


def request_rows(case_dir: Path) -> list[RequestRecord]:
    lines = (case_dir / "runs/1/requests.jsonl").read_text().splitlines()
    return [RequestRecord.model_validate_json(line) for line in lines]


@pytest.mark.e2e
def test_the_smoke_runs_serve_case_runs_the_real_vllm_and_writes_rows_and_aggregates(real_smoke_run, tmp_path):
    """The smoke profile's serve case of a real `kit run --all`: the real vLLM (its CPU build),
    started as its image starts it, the same engine specification as the paper's cases (in CI,
    that run's first use made its environment)."""
    run = real_smoke_run
    case_dir = run_dir_case(run)
    result = json.loads((case_dir / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]
    params = result["case"]["params"]
    rows = request_rows(case_dir)
    assert len(rows) == params["prompts"] and all(r.ok for r in rows)
    assert {r.input_tokens for r in rows} == {r.server_prompt_tokens for r in rows} == {params["input_tokens"]}
    # vLLM may put several tokens in one chunk when it runs ahead of the reader: the client counts
    # them from the ids each chunk lists, and its count equals the engine's, request by request.
    assert {r.output_tokens for r in rows} == {r.streamed_tokens for r in rows} == {params["max_output_tokens"]}
    assert all(0 < r.token_events <= r.streamed_tokens for r in rows)
    details = result["samples"][0]["ranks"][0]["details"]
    recomputed = aggregate(rows, details["aggregates"]["duration_s"]).model_dump()
    assert recomputed == details["aggregates"]  # every aggregate traces to the rows
    assert result["metrics"]["output_throughput"]["mean"] == pytest.approx(details["aggregates"]["output_throughput"])
    engine = details["engine"]
    assert (
        engine["name"] == "vllm"
        and engine["version"].startswith("0.32")
        and engine["argv"][1:3] == ["serve", details["model"]["path"]]
    )
    assert engine["stop"] == {"stopped_by": "SIGTERM", "exit_code": 0, "oom_killed": None}  # a process, not a container
    assert not {"RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHELASTIC_USE_AGENT_STORE"} & set(engine["environment"])
    if (
        len(os.sched_getaffinity(0)) >= 2
    ):  # the client kept a CPU of its own, vLLM's threads the engine's (kit.serve.cpu_split)
        from kit.serve.engines import omp_threads_bind

        cpus = engine["cpus"]
        assert (
            cpus["client"]
            and not set(cpus["client"]) & set(cpus["engine"])
            and "VLLM_CPU_OMP_THREADS_BIND" in engine["environment"]
        )
        bound = omp_threads_bind(cpus["engine"], 1).split(",")
        assert f"local_rank=0, core ids=[{', '.join(bound)}]" in (case_dir / "runs/1/engine.log").read_text()
    # a model this small is served from the seeded checkpoint, so that its output can be checked
    # against transformers' on the same weights (kit.serve.correctness)
    assert details["model"]["kind"] == "synthetic checkpoint" and "model.safetensors" in details["model"]["files"]
    assert details["correctness"]["status"] == "pass", details["correctness"]
    tokens = details["tokens"]
    assert tokens["equal"] and tokens["server_counters"]["generated_tokens"] == len(rows) * params["max_output_tokens"]
    assert tokens["server_counters"]["finished_requests"] == len(rows)
    assert "CPU" in result["samples"][0]["ranks"][0]["telemetry"]["unavailable"]  # never zeros
    assert details["bounds"] == {"unavailable": "no peak figures for a CPU: no bound computed"}
    sums = (run / "SHA256SUMS").read_text()
    assert "runs/1/requests.jsonl" in sums and "runs/1/engine.log" in sums
    # Every metric the serving claims (C22-C26) read is one this real result carries.
    named = claim_metrics(load_reference(), "serve")
    assert named and all(result["metrics"].get(name) for name in named), named - set(result["metrics"])
    # The report shows the burst beside its bound (or why there is none), and the ITL definition.
    report = subprocess.run(
        [*KIT, "report", str(run), "--format", "html", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert report.returncode == 0, report.stderr[-3000:]
    html = (tmp_path / "report.html").read_text()
    assert "the burst of each engine" in html and "no peak figures for a CPU" in html and "ITL, the gaps" in html
    # The paper-size synthetic run the report's tests read has this real sample's shape.
    [synthetic] = synthetic_serve_ranks(tmp_path / "synthetic")
    [real] = result["samples"][0]["ranks"]
    written = json.loads(synthetic.model_dump_json())["details"]
    # but for what the smoke profile alone turns on (a rate search, shared prefixes, start-up times)
    # and the output check, which the synthetic run does not make up
    smoke_only = {"rates", "prefix", "startup", "correctness"}
    assert synthetic.world_size == real["world_size"] == 1 and filled(written) == filled(details) - smoke_only
    assert filled(written["tokens"]) == filled(tokens) and filled(written["engine"]) >= {
        "name",
        "label",
        "placement",
        "version",
        "ready_s",
        "stop",
    }


def filled(record: dict) -> set[str]:
    """The keys of a record that hold something."""
    return {key for key, value in record.items() if value is not None}


def synthetic_serve_ranks(folder: Path):
    """The rank samples of the first run of the paper-size synthetic run's vLLM case."""
    import random

    from support.paper_size_run import Host, serve_runs

    from kit.plan.protocol import build_plan, load_protocol

    plan = build_plan(load_protocol(), "paper")
    case = next(c for c in plan.cases if c.workload == "serve" and c.params.engine == "vllm")
    host = Host(plan, "NVIDIA A800-SXM4-80GB", seed=0, speed=1.0)
    return serve_runs(case, folder, host, random.Random(0))[0].ranks


def claim_metrics(reference, stage: str) -> set[str]:
    """The metric names the claims about `stage` read, wherever in a relation they stand."""

    def walk(node):
        if isinstance(node, dict):
            yield from ([node["metric"]] if isinstance(node.get("metric"), str) else [])
            for value in node.values():
                yield from walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                yield from walk(value)

    return {name for claim in reference.claims if stage in claim.stages for name in walk(claim.model_dump())}


@pytest.mark.e2e
def test_an_engine_killed_mid_burst_is_an_error_that_keeps_every_request_row(tmp_path, manifests_copy):
    protocol_file = manifests_copy / "protocol.yaml"
    data = yaml.safe_load(protocol_file.read_text())
    # A burst long enough to be killed in: 48 requests of 800 tokens (the tiny Llama holds 1024).
    data["profiles"]["smoke"]["stages"]["serve"]["params"].update(prompts=48, max_output_tokens=800)
    protocol_file.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tmp_path / "run"
    kit = subprocess.Popen([*SERVE_STAGE, str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        assert kit.poll() is None, kit.stderr.read().decode()[-3000:]
        found = list(run.glob("cases/serve.*/log.txt"))
        if found and "burst of 48 requests released" in found[0].read_text():
            break
        time.sleep(0.05)
    else:
        pytest.fail("the burst was not released in time")
    time.sleep(1.0)
    engine = json.loads((found[0].parent / "runs/1/engine.json").read_text())
    os.kill(engine["pid"], signal.SIGKILL)
    assert kit.wait(timeout=300) == 1, kit.stderr.read().decode()[-3000:]  # a case ended `error`

    case_dir = run_dir_case(run)
    result = json.loads((case_dir / "result.json").read_text())
    assert result["status"] == "error" and "engine.log" in result["reason"]
    assert "during the burst" in result["reason"] or "requests failed" in result["reason"]
    details = result["samples"][0]["ranks"][0]["details"]
    rows = request_rows(case_dir)
    assert len(rows) == 48 and all(r.ok or r.error for r in rows)
    assert details["aggregates"]["completed"] == sum(r.ok for r in rows) < 48 and details["engine"]["log_tail"]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


def test_prompts_are_exact_with_a_sentencepiece_style_tokenizer_too():
    """Llama-2's own tokenizer marks word starts with "▁" (Metaspace) rather than byte-level
    "Ġ"; a user-given model brings one like it. Built here locally, the same way."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    from kit.plan.model_files import training_text

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"])
    tokenizer.train_from_iterator(training_text(3, words=40_000), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    prompts = burst_prompts(tokenizer, 20, 96, seed=3)
    assert {len(tokenizer.encode(p).ids) for p in prompts} == {96}


def test_an_engine_that_exits_before_it_is_ready_fails_with_its_code(tmp_path):
    from kit.serve.process import EngineFailed, EngineProcess, free_port, log_tail
    from kit.serve.session import wait_ready

    log = tmp_path / "engine.log"
    server = EngineProcess(
        [sys.executable, "-c", "print('cannot load weights'); raise SystemExit(3)"], log, free_port()
    )
    with pytest.raises(EngineFailed, match="code 3"):
        wait_ready(server, "/health", timeout_s=60)
    server.stop()
    assert "cannot load weights" in log_tail(log)


def test_an_engine_that_never_answers_is_given_up_after_the_ready_timeout(tmp_path):
    from kit.serve.process import EngineFailed, EngineProcess, free_port
    from kit.serve.session import wait_ready

    server = EngineProcess([sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "log", free_port())
    started = time.monotonic()
    with pytest.raises(EngineFailed, match="not ready after 2"):
        wait_ready(server, "/health", timeout_s=2)
    outcome = server.stop(grace_s=5)
    assert time.monotonic() - started < 30 and outcome.stopped_by == "SIGTERM" and outcome.exit_code is not None


def test_an_engine_process_gets_no_launcher_variables(monkeypatch):
    from kit.serve.session import clean_environment

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "LOCAL_RANK"):
        monkeypatch.setenv(name, "1")
    env = clean_environment({"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert (
        set(env) <= {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "VLLM_CPU_KVCACHE_SPACE"}
        and env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    )
