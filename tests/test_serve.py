"""The serving stage: engine command lines, the engines' real streams, the metric definitions,
exact prompt lengths, the saturation check, and the serve stage run for real on this CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from kit.protocol import load_protocol
from kit.serve.aggregate import ClientLoad, RequestRecord, aggregate, percentile, saturation
from kit.serve.burst import burst_prompts, served_tokenizer, token_count
from kit.serve.client import fire_burst
from kit.serve.engines import ENGINES, engine_for
from kit.serve.sse import EventFramer, parse_stream

FIXTURES = Path(__file__).parent / "fixtures" / "serve"
KIT = [sys.executable, "-m", "kit.cli"]
SERVE_STAGE = [*KIT, "run", "--stage", "serve", "--profile", "smoke", "--executor", "local", "--out"]


def paper_case(paper_plan, case_id):
    return next(c for c in paper_plan.cases if c.id == case_id)


def smoke_serve_case(smoke_plan):
    return next(c for c in smoke_plan.cases if c.stage == "serve")


def option(argv, flag):
    return argv[argv.index(flag) + 1]


# --- command lines -----------------------------------------------------------------------------


def test_vllm_command_shards_over_the_case_gpus_in_bf16(paper_plan):
    case = paper_case(paper_plan, "serve.llama2-70b.vllm.g8")
    argv = engine_for(case.params).command(case, "/models/llama2-70b", 8123)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert option(argv, "--model") == "/models/llama2-70b" and option(argv, "--port") == "8123"
    assert option(argv, "--tensor-parallel-size") == "8" and option(argv, "--dtype") == "bfloat16"
    assert option(argv, "--max-model-len") == str(512 + case.params.max_output_tokens)
    assert option(argv, "--host") == "127.0.0.1"


def test_tgi_command_admits_the_whole_burst(paper_plan):
    case = paper_case(paper_plan, "serve.llama2-13b.tgi.g8")
    argv = engine_for(case.params).command(case, "/models/llama2-13b", 3000)
    assert argv[0] == "text-generation-launcher" and option(argv, "--model-id") == "/models/llama2-13b"
    assert option(argv, "--num-shard") == "8" and option(argv, "--dtype") == "bfloat16"
    assert option(argv, "--max-input-tokens") == "512"
    assert option(argv, "--max-total-tokens") == str(512 + case.params.max_output_tokens)
    assert option(argv, "--max-concurrent-requests") == "1000"  # TGI's default (128) would refuse 872


def test_lightllm_command_uses_its_own_flags(paper_plan):
    case = paper_case(paper_plan, "serve.llama2-7b.lightllm.g8")
    argv = engine_for(case.params).command(case, "/models/llama2-7b", 8080)
    assert argv[1:3] == ["-m", "lightllm.server.api_server"] and option(argv, "--model_dir") == "/models/llama2-7b"
    assert option(argv, "--tp") == "8" and option(argv, "--data_type") == "bf16"
    assert option(argv, "--max_req_total_len") == str(512 + case.params.max_output_tokens)


def test_cpu_engine_sizes_its_cache_for_the_whole_burst(smoke_plan):
    case = smoke_serve_case(smoke_plan)
    argv = engine_for(case.params).command(case, "/tmp/m", 9000)
    assert "--continuous-batching" in argv and option(argv, "--device") == "cpu"
    per_request_blocks = -(-(case.params.input_tokens + case.params.max_output_tokens) // 32)
    assert int(option(argv, "--cb-num-blocks")) == case.params.prompts * per_request_blocks


def test_requests_ask_every_engine_for_the_same_greedy_length(paper_plan):
    for name in ("vllm", "tgi", "lightllm"):
        case = paper_case(paper_plan, f"serve.llama2-7b.{name}.g8")
        _, body = engine_for(case.params).request("hello", case.params)
        asked = body["parameters"] if "parameters" in body else body
        assert asked.get("max_tokens", asked.get("max_new_tokens")) == case.params.max_output_tokens
        assert asked.get("temperature") == 0.0 or asked.get("do_sample") is False
    vllm = paper_case(paper_plan, "serve.llama2-7b.vllm.g8")
    _, body = engine_for(vllm.params).request("hello", vllm.params)
    assert body["ignore_eos"] is True and body["stream"] and body["stream_options"]["include_usage"]


# --- the engines' real streams -------------------------------------------------------------------


def events_of(name, fixture):
    engine = ENGINES[name]
    return [engine.parse(data) for data in parse_stream((FIXTURES / fixture).read_bytes())]


def test_every_fixture_names_its_source():
    for sse in FIXTURES.glob("*.sse"):
        assert sse.with_suffix(".source").is_file(), sse.name


def test_vllm_stream_takes_the_output_count_from_usage():
    events = events_of("vllm", "vllm-completions-stream.sse")
    assert sum(e.token_events for e in events) == 1
    assert [e.output_tokens for e in events if e.output_tokens] == [292]
    assert [e.prompt_tokens for e in events if e.prompt_tokens] == [27] and events[-1].finished


def test_tgi_stream_counts_token_events():
    events = events_of("tgi", "tgi-generate-stream.sse")
    assert sum(e.token_events for e in events) == 5 and all(e.output_tokens is None for e in events)


def test_tgi_final_event_carries_the_generated_token_count():
    # The shape TGI pull request #36 defines for the last event of a stream.
    event = ENGINES["tgi"].parse(
        '{"token":{"id":278,"text":" the","logprob":0.0,"special":false},"generated_text":"a the",'
        '"details":{"finish_reason":"length","generated_tokens":5,"seed":null}}'
    )
    assert (event.token_events, event.output_tokens, event.finished) == (1, 5, True)


def test_lightllm_stream_reports_running_counts():
    events = events_of("lightllm", "lightllm-generate-stream.sse")
    assert sum(e.token_events for e in events) == 3
    assert events[-1].output_tokens == 3 and events[-1].prompt_tokens == 4 and events[-1].finished


def test_transformers_serve_stream_without_done_terminator():
    events = events_of("transformers-cpu", "transformers-serve-completions-stream.sse")
    assert sum(e.token_events for e in events) == 6
    assert events[-1].output_tokens == 6 and events[-1].prompt_tokens == 7 and events[-1].finished


def test_event_framing_does_not_depend_on_how_bytes_arrive():
    raw = (FIXTURES / "lightllm-generate-stream.sse").read_bytes()
    framer = EventFramer()
    one_by_one = [data for i in range(len(raw)) for data in framer.feed(raw[i : i + 1])] + framer.close()
    assert one_by_one == parse_stream(raw) and len(one_by_one) == 3
    assert parse_stream(b"data: a\r\n\r\ndata:b\r\rdata: c") == ["a", "b", "c"]


class ReplayHandler(BaseHTTPRequestHandler):
    """Answers every POST with one fixture's bytes, event by event, then closes (HTTP/1.0)."""

    fixture = b""

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in self.fixture.split(b"\n\n"):
            if event:
                self.wfile.write(event + b"\n\n")
                self.wfile.flush()
                time.sleep(0.005)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "name, fixture, tokens, source",
    [
        ("vllm", "vllm-completions-stream.sse", 292, "server"),
        ("tgi", "tgi-generate-stream.sse", 5, "events"),
        ("lightllm", "lightllm-generate-stream.sse", 3, "server"),
        ("transformers-cpu", "transformers-serve-completions-stream.sse", 6, "server"),
    ],
)
def test_client_reads_each_engines_real_stream(smoke_plan, name, fixture, tokens, source):
    handler = type("Replay", (ReplayHandler,), {"fixture": (FIXTURES / fixture).read_bytes()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        params = smoke_serve_case(smoke_plan).params
        burst = fire_burst(f"http://127.0.0.1:{server.server_port}", ENGINES[name], params, ["p"] * 4, [7] * 4, 30)
    finally:
        server.shutdown()
    assert all(r.ok for r in burst.records), [r.error for r in burst.records]
    assert {(r.output_tokens, r.output_tokens_source) for r in burst.records} == {(tokens, source)}
    record = burst.records[0]
    assert 0 < record.ttft <= record.latency and len(record.itl) == record.token_events - 1
    assert burst.load.events > 0 and burst.load.cpu_s > 0


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
        index=index, input_tokens=100, sent_at=sent, ttft=ttft, latency=None if error else latency,
        output_tokens=tokens, token_events=tokens, error=error,
    )  # fmt: skip


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
    verdict = saturation(load(), median_itl=0.05, duration=10.0)
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
    verdict = saturation(client, median_itl=0.05, duration=10.0)
    assert verdict.client_limited and words in verdict.reasons[0]


# --- prompts of exactly L tokens -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_checkpoint():
    pytest.importorskip("torch")
    from kit.workloads.synthetic import synthetic_checkpoint

    protocol = load_protocol()
    return synthetic_checkpoint("tiny-llama", protocol.models["tiny-llama"], 1234)


def test_synthetic_checkpoint_has_a_local_tokenizer_of_the_models_vocabulary(tiny_checkpoint):
    tokenizer = served_tokenizer(str(tiny_checkpoint))
    assert len(tokenizer) == load_protocol().models["tiny-llama"].vocab_size
    assert tokenizer("x")["input_ids"][0] == tokenizer.bos_token_id == 1 and tokenizer.eos_token_id == 2
    from kit.workloads.synthetic import checkpoint_files

    assert {"tokenizer.json", "tokenizer_config.json", "config.json", "model.safetensors"} <= set(checkpoint_files(tiny_checkpoint))


@pytest.mark.parametrize("length", [2, 17, 128, 512])
def test_every_prompt_has_exactly_the_configured_token_count(tiny_checkpoint, length):
    tokenizer = served_tokenizer(str(tiny_checkpoint))
    prompts = burst_prompts(tokenizer, 50, length, seed=7)
    assert {token_count(tokenizer, p) for p in prompts} == {length}
    assert {len(tokenizer(p)["input_ids"]) for p in prompts} == {length}
    assert len(set(prompts)) == 50 and burst_prompts(tokenizer, 50, length, seed=7) == prompts


def test_gpu_engines_are_unavailable_on_a_cpu_case_with_the_reason(paper_plan):
    from kit.workloads.harness import Unavailable
    from kit.workloads.serve import check_available

    case = paper_case(paper_plan, "serve.llama2-7b.vllm.g8").model_copy(update={"device": "cpu"})
    with pytest.raises(Unavailable, match="CUDA"):
        check_available(case, engine_for(case.params))


# --- the stage, for real, on this CPU ----------------------------------------------------------


def run_dir_case(run: Path) -> Path:
    return next(run.glob("cases/serve.*"))


def request_rows(case_dir: Path) -> list[RequestRecord]:
    lines = (case_dir / "runs/1/requests.jsonl").read_text().splitlines()
    return [RequestRecord.model_validate_json(line) for line in lines]


@pytest.mark.e2e
def test_kit_run_stage_serve_writes_rows_and_aggregates(tmp_path):
    pytest.importorskip("fastapi")
    run = tmp_path / "run"
    done = subprocess.run([*SERVE_STAGE, str(run)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    case_dir = run_dir_case(run)
    result = json.loads((case_dir / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]
    params = result["case"]["params"]
    rows = request_rows(case_dir)
    assert len(rows) == params["prompts"] and all(r.ok for r in rows)
    assert {r.input_tokens for r in rows} == {r.server_prompt_tokens for r in rows} == {params["input_tokens"]}
    assert {r.output_tokens for r in rows} == {params["max_output_tokens"]}
    details = result["samples"][0]["ranks"][0]["details"]
    recomputed = aggregate(rows, details["aggregates"]["duration_s"]).model_dump()
    assert recomputed == details["aggregates"]  # every aggregate traces to the rows
    assert result["metrics"]["output_throughput"]["mean"] == pytest.approx(details["aggregates"]["output_throughput"])
    assert details["engine"]["version"] and details["engine"]["stop"]["stopped_by"] == "SIGTERM"
    assert details["model"]["kind"] == "synthetic" and "saturation" in details
    sums = (run / "SHA256SUMS").read_text()
    assert "runs/1/requests.jsonl" in sums and "runs/1/engine.log" in sums


@pytest.mark.e2e
def test_an_engine_killed_mid_burst_is_an_error_that_keeps_the_finished_requests(tmp_path, manifests_copy):
    pytest.importorskip("fastapi")
    protocol_file = manifests_copy / "protocol.yaml"
    data = yaml.safe_load(protocol_file.read_text())
    # 48 prompts of 256 tokens: 4 prefills a scheduler step, so requests finish one after another
    data["profiles"]["smoke"]["stages"]["serve"]["params"].update(prompts=48, input_tokens=256)
    protocol_file.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tmp_path / "run"
    kit = subprocess.Popen([*SERVE_STAGE, str(run)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 240
    log = None
    while time.monotonic() < deadline:
        assert kit.poll() is None, kit.stderr.read().decode()[-3000:]
        found = list(run.glob("cases/serve.*/log.txt"))
        log = found[0] if found else None
        if log and "serve: first request finished" in log.read_text():
            break
        time.sleep(0.05)
    else:
        pytest.fail("no request of the burst finished in time")
    engine = json.loads((log.parent / "runs/1/engine.json").read_text())
    os.kill(engine["pid"], signal.SIGKILL)
    assert kit.wait(timeout=240) == 0, kit.stderr.read().decode()[-3000:]

    case_dir = run_dir_case(run)
    result = json.loads((case_dir / "result.json").read_text())
    assert result["status"] == "error" and "during the burst" in result["reason"]
    assert "engine.log" in result["reason"]
    assert "Finished server process" not in (case_dir / "runs/1/engine.log").read_text()  # it did not stop cleanly
    details = result["samples"][0]["ranks"][0]["details"]
    rows = request_rows(case_dir)
    finished = [r for r in rows if r.ok]
    assert len(rows) == 48 and 0 < len(finished) < 48
    assert details["aggregates"]["completed"] == len(finished) and details["engine"]["log_tail"]
    assert json.loads((run / "run.json").read_text())["status"] == "finished"


def test_prompts_are_exact_with_a_sentencepiece_style_tokenizer_too():
    """Llama-2's own tokenizer marks word starts with "▁" (Metaspace) rather than byte-level
    "Ġ"; a user-given model brings one like it. Built here locally, the same way."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from kit.workloads.synthetic import training_text

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    raw.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=3000, special_tokens=["<unk>", "<s>", "</s>"])
    raw.train_from_iterator(training_text(3, words=40_000), trainer)
    raw.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    prompts = burst_prompts(tokenizer, 20, 96, seed=3)
    assert {len(tokenizer(p)["input_ids"]) for p in prompts} == {96}


def test_an_engine_that_exits_before_it_is_ready_fails_with_its_code(tmp_path):
    from kit.serve.process import EngineFailed, EngineProcess, free_port, log_tail

    log = tmp_path / "engine.log"
    server = EngineProcess([sys.executable, "-c", "print('cannot load weights'); raise SystemExit(3)"], log, free_port())
    with pytest.raises(EngineFailed, match="code 3"):
        server.wait_ready("/health", timeout_s=60)
    server.stop()
    assert "cannot load weights" in log_tail(log)


def test_an_engine_that_never_answers_is_given_up_after_the_ready_timeout(tmp_path):
    from kit.serve.process import EngineFailed, EngineProcess, free_port

    server = EngineProcess([sys.executable, "-c", "import time; time.sleep(600)"], tmp_path / "log", free_port())
    started = time.monotonic()
    with pytest.raises(EngineFailed, match="not ready after 2"):
        server.wait_ready("/health", timeout_s=2)
    outcome = server.stop(grace_s=5)
    assert time.monotonic() - started < 30 and outcome["stopped_by"] == "SIGTERM" and outcome["exit_code"] is not None
