"""Arrivals at a rate and the capacity search: seeded Poisson send times and the test they pass,
a percentile's distribution-free interval, the backlog that says a point is past saturation, the
search's doubling and bisection, the client sending each request at its time to a real HTTP
server, and the search on the smoke run's real vLLM."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer

import pytest
import support
from test_sweep import CountingReplay, StubPlacement, small_serve_case, smoke_serve_case

from kit.measure.rate import arrival_check, backlog, quantile_interval
from kit.measure.slo import DEFAULT_SLO, Slo, judge
from kit.plan.protocol import LENGTH_PRESETS, RateSearch, SharedPrefix
from kit.rundir.serving import (
    Backlog,
    BurstAggregates,
    ClientLoad,
    PointFiles,
    QuantileInterval,
    RatePointDetails,
    RequestRecord,
    RequestTimes,
    Saturation,
    SharedPrefixDetails,
    aggregate,
)
from kit.serve.arrivals import arrival_times
from kit.serve.client import fire_at_rate, fire_conversations
from kit.serve.engines import ENGINES
from kit.serve.rate import next_rate, verdict
from kit.units import format_value

METRICS_PAGE = support.FIXTURES / "serve" / "vllm-0.32-metrics-after-52-requests.prom"  # real vLLM 0.32 (CPU)


def stub_case_params(caching: bool):
    from kit.plan.protocol import build_plan, load_protocol

    case = next(c for c in build_plan(load_protocol(), "smoke").cases if c.stage == "serve")
    return case.model_copy(update={"params": case.params.model_copy(update={"prefix_caching": caching})})


# --- arrivals ----------------------------------------------------------------------------------------


def test_poisson_arrivals_are_seeded_and_their_gaps_pass_the_exponential_test_at_their_rate_only():
    times = arrival_times(20, 400, "poisson", seed=7)
    assert times == arrival_times(20, 400, "poisson", seed=7) != arrival_times(20, 400, "poisson", seed=8)
    assert times[0] == 0 and times == sorted(times) and 17 < 399 / times[-1] < 23
    assert arrival_check(times, 20).passes
    assert not arrival_check(times, 10).passes  # the same gaps, against half the rate
    constant = arrival_times(20, 400, "constant", seed=7)
    assert constant[1] == pytest.approx(0.05) and not arrival_check(constant, 20).passes
    assert arrival_check(times[:5], 20) is None  # too few gaps to test


def test_the_arrivals_test_rejects_gaps_of_another_shape_with_the_same_mean():
    rng = random.Random(3)
    uniform, now = [], 0.0
    for _ in range(400):  # gaps uniform on [0, 0.1]: mean 0.05 s, as Exp(20)'s
        uniform.append(now)
        now += rng.uniform(0, 0.1)
    check = arrival_check(uniform, 20)
    assert check.mean_gap_s == pytest.approx(0.05, rel=0.1) and not check.passes


# --- a percentile's interval -------------------------------------------------------------------------


def test_a_percentiles_interval_is_the_order_statistics_the_binomial_gives():
    # n = 100, the median at 95 %: ranks 40 and 61 (the textbook's table), values 39 and 60 here
    assert quantile_interval(list(range(100)), 50) == QuantileInterval(
        percentile=50, confidence=0.95, n=100, low=39, high=60
    )
    few = quantile_interval(list(range(100)), 99)  # 100 samples bound a p99 from below only
    assert few.low is not None and few.high is None
    many = quantile_interval(list(range(1000)), 99)
    assert many.low is not None and many.high is not None and many.low < 990 < many.high
    assert quantile_interval([], 99).n == 0


# --- past saturation ---------------------------------------------------------------------------------


def served_by_one_slot(rate: float, service_s: float, count: int) -> list[RequestRecord]:
    """Rows of a server that serves one request at a time, each in `service_s`, under arrivals
    at `rate`: a queue that holds when rate < 1 / service_s and grows when it is above."""
    rows, free_at = [], 0.0
    for index, sent in enumerate(arrival_times(rate, count, "constant", seed=0)):
        start = max(sent, free_at)
        free_at = start + service_s
        rows.append(
            RequestRecord(
                index=index,
                input_tokens=8,
                sent_at=sent,
                ended_at=free_at,
                ttft=start - sent + 0.001,
                latency=free_at - sent,
                output_tokens=2,
            )
        )
    return rows


def test_a_point_whose_queue_grows_while_requests_end_slower_than_they_arrive_is_past_saturation():
    kept_up = backlog(served_by_one_slot(rate=8, service_s=0.1, count=80))
    assert not kept_up.saturated and kept_up.completed_rps == pytest.approx(8, rel=0.1)
    fell_behind = backlog(served_by_one_slot(rate=20, service_s=0.1, count=200))
    assert fell_behind.saturated and fell_behind.completed_rps == pytest.approx(10, rel=0.15)
    assert (
        fell_behind.queue_growth_per_s == pytest.approx(10, rel=0.2) and "one median latency earlier" in fell_behind.why
    )
    short = backlog(served_by_one_slot(rate=20, service_s=0.1, count=5))
    assert not short.saturated and "too short to judge" in short.why


# --- the search --------------------------------------------------------------------------------------


def rate_point(rate: float, meets: bool) -> RatePointDetails:
    empty = aggregate([], 0.0)
    interval = QuantileInterval(percentile=99, confidence=0.95, n=0, low=None, high=None)
    return RatePointDetails(
        rate_rps=rate,
        process="poisson",
        planned=1,
        sent=1,
        files=PointFiles(requests="rates/p1/requests.jsonl"),
        aggregates=BurstAggregates.model_validate(empty.model_dump()),
        saturation=Saturation(client_limited=False, reasons=[], cpu_share=0, cpu_us_per_event=0),
        ttft_p99=interval,
        tpot_p99=interval,
        meets=meets,
        backlog=Backlog(window_s=0, offered_rps=0, completed_rps=0, queue_growth_per_s=0, saturated=False),
        cut_short=False,
    )


def test_the_search_doubles_to_the_first_miss_then_bisects_between_the_last_met_rate_and_it():
    search = RateSearch(start_rps=2, max_rps=100, min_requests=10, min_duration_s=1, bisections=2, max_search_s=60)
    capacity = 11.0  # a server that meets the objectives up to 11 requests/s
    points: list[RatePointDetails] = []
    while (rate := next_rate(search, points)) is not None:
        points.append(rate_point(rate, rate <= capacity))
    assert [p.rate_rps for p in points] == [2, 4, 8, 16, 12, 10]
    met = max(p.rate_rps for p in points if p.meets)
    missed = min(p.rate_rps for p in points if not p.meets)
    assert met <= capacity < missed and (met, missed) == (10, 12)


def test_the_search_stops_at_max_rps_where_every_rate_met_and_halves_where_the_first_missed():
    search = RateSearch(start_rps=2, max_rps=5, min_requests=10, min_duration_s=1, bisections=2, max_search_s=60)
    points = [rate_point(2, True), rate_point(4, True)]
    assert next_rate(search, points) == 5 and next_rate(search, [*points, rate_point(5, True)]) is None
    assert next_rate(search, [rate_point(2, False)]) == 1


def test_a_search_that_starts_above_its_largest_rate_is_refused():
    with pytest.raises(ValueError, match="start_rps"):
        RateSearch(start_rps=8, max_rps=4, min_requests=10, min_duration_s=1, bisections=2, max_search_s=60)


# --- the client at a rate, against a real HTTP server -------------------------------------------------


def test_the_client_sends_each_request_at_its_arrival_time_whatever_is_in_flight(smoke_plan):
    handler = type("Replay", (CountingReplay,), {"lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    arrivals = arrival_times(40, 30, "poisson", seed=1)
    try:
        fired = fire_at_rate(
            f"http://127.0.0.1:{server.server_port}",
            ENGINES["vllm"],
            smoke_serve_case(smoke_plan).params,
            ["p"] * 30,
            [8] * 30,
            60,
            arrivals,
        )
    finally:
        server.shutdown()
    assert len(fired.records) == handler.served == 30 and all(r.ok for r in fired.records)
    late = [r.sent_at - arrivals[r.index] for r in fired.records]
    assert min(late) >= 0 and max(late) < 0.05  # each on time, within the event loop's lag
    assert handler.most > 1  # sent whether or not the previous ones had ended
    with pytest.raises(ValueError, match="3 arrival times for 2 prompts"):
        fire_at_rate(
            "http://127.0.0.1:1", ENGINES["vllm"], smoke_serve_case(smoke_plan).params, ["p"] * 2, [8] * 2, 1, [0, 1, 2]
        )


# --- the smoke run: the real vLLM ------------------------------------------------------------------


@pytest.mark.e2e
def test_the_smoke_runs_vllm_capacity_lies_between_a_rate_that_met_the_objectives_and_one_that_missed(
    real_smoke_run, tmp_path
):
    case_dir = next(real_smoke_run.glob("cases/serve.*"))
    result = json.loads((case_dir / "result.json").read_text())
    assert result["status"] == "ok", result["reason"]
    rates = result["samples"][0]["ranks"][0]["details"]["rates"]
    points = rates["points"]
    assert rates["capacity_rps"] is not None and rates["missed_rps"] is not None
    assert rates["capacity_rps"] < rates["missed_rps"]
    assert any(p["meets"] and p["rate_rps"] == rates["capacity_rps"] for p in points)
    assert any(not p["meets"] and p["rate_rps"] == rates["missed_rps"] for p in points)
    assert rates["tokens"]["equal"]  # the rows hold every token vLLM's counters say it generated
    slo = DEFAULT_SLO.model_copy(update={"ttft_s": rates["slo_ttft_s"], "tpot_s": rates["slo_tpot_s"]})
    for entry in points:  # each point's figures and verdict from its own rows
        rows = [
            RequestRecord.model_validate_json(line)
            for line in (case_dir / "runs/1" / entry["files"]["requests"]).read_text().splitlines()
        ]
        assert aggregate(rows, entry["aggregates"]["duration_s"]).model_dump() == entry["aggregates"]
        judged = judge(rows, entry["aggregates"]["duration_s"], slo)
        if entry["meets"]:
            assert judged.meets and not entry["backlog"]["saturated"]
    # the arrivals of the points the engine kept up with pass the test for a Poisson process
    kept_up = [p for p in points if p["arrivals"] and not p["backlog"]["saturated"]]
    assert kept_up and all(p["arrivals"]["passes"] for p in kept_up)

    # shared prefixes: vLLM's own counters found cached tokens with its prefix cache on, none with it off
    prefix = SharedPrefixDetails.model_validate(result["samples"][0]["ranks"][0]["details"]["prefix"])
    assert prefix.on.cache.hit_rate > 0 and prefix.on.tokens.equal
    assert prefix.off.cache.hit_rate == 0 and prefix.off.cache.hit_tokens == 0
    assert prefix.on.requests == prefix.off.requests == 16
    # start-up: the run's own start, then a cold and a warm one, each to its first token
    starts = result["samples"][0]["ranks"][0]["details"]["startup"]["starts"]
    assert [s["cache"] for s in starts] == ["first", "cold", "warm"]
    assert all(0 < s["ready_s"] < s["first_token_s"] for s in starts)
    assert all((case_dir / "runs/1" / s["engine_log"]).is_file() for s in starts)
    # the report: the capacity with its interval and points, the prefix cache, the start-up times
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kit.cli",
            "report",
            str(real_smoke_run),
            "--format",
            "html,json",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / "report.html").read_text()
    for title in ("Serving capacity at a rate", "Shared prefixes and the prefix cache", "Engine start-up"):
        assert title in html
    interval = f"between {format_value(rates['capacity_rps'])} (met) and {format_value(rates['missed_rps'])} (missed)"
    assert interval in html
    [exported] = json.loads((tmp_path / "report.json").read_text())["rate_searches"]
    assert exported["capacity_rps"] == rates["capacity_rps"] and len(exported["points"]) == len(points)


def load(cpu_share: float, lag_max_s: float) -> ClientLoad:
    return ClientLoad(
        cpu_s=cpu_share, wall_s=1, events=1, dispatch_s=0, loop_lag_p99_s=lag_max_s, loop_lag_max_s=lag_max_s
    )


def test_a_point_meets_only_by_a_margin_of_the_clients_lag_and_never_past_saturation_or_cut_short():
    slo = Slo(ttft_s=1.0, tpot_s=0.1)
    within = judge([RequestTimes(ended_at=1, ttft=0.5, latency=1.4, output_tokens=11)], 1.0, slo)  # TPOT 90 ms
    assert within.meets
    assert verdict(within, slo, load(0.1, 0.005), None, False) == (True, None)
    meets, why = verdict(within, slo, load(0.1, 0.02), None, False)  # 90 ms + 20 ms of lag > 100 ms
    assert not meets and "client's largest event loop lag (20 ms)" in why
    assert verdict(within, slo, load(0.95, 0.0), None, False)[0] is False
    assert verdict(within, slo, load(0.1, 0.0), "the queue grew", False) == (False, "past saturation: the queue grew")
    assert verdict(within, slo, load(0.1, 0.0), None, True)[0] is False


# --- start-up, through a real HTTP server that compiles into an empty cache -----------------------


@pytest.fixture
def stub_case(smoke_plan, tmp_path, monkeypatch):
    """The smoke profile's serve case, its model's config and tokenizer made in a cache of the test's."""
    monkeypatch.setenv("KIT_CACHE", str(tmp_path / "cache"))
    return small_serve_case(smoke_plan)


def test_a_cold_start_finds_an_empty_cache_and_a_warm_one_what_it_left(stub_case, tmp_path):
    from kit.plan.model_files import load_tokenizer
    from kit.serve.burst import burst_prompts, token_count
    from kit.serve.session import model_directory
    from kit.serve.startup import measure_startups

    engine = ENGINES["vllm"]
    model_dir, _ = model_directory(stub_case, engine, StubPlacement(0), print)
    [prompt] = burst_prompts(load_tokenizer(model_dir), 1, stub_case.params.input_tokens, 1)
    found = measure_startups(
        stub_case,
        engine,
        StubPlacement(0),
        model_dir,
        tmp_path,
        prompt,
        token_count(load_tokenizer(model_dir), prompt),
        print,
        None,
    )
    assert found.cache_variable == "VLLM_CACHE_ROOT" and found.unavailable is None
    cold, warm = found.starts
    assert (cold.cache, warm.cache) == ("cold", "warm") and cold.error is None is warm.error
    assert cold.ready_s > warm.ready_s + 0.5  # the stand-in compiled for 1 s into the empty folder only
    assert cold.first_token_s > cold.ready_s and warm.first_token_s > warm.ready_s
    assert (tmp_path / "startup/cold/engine.log").is_file() and (tmp_path / "startup/warm/engine.log").is_file()


# --- lengths and shared prefixes ---------------------------------------------------------------------


def test_lengths_are_fixed_by_default_and_the_inferencex_presets_are_uniform_from_four_fifths():
    search = RateSearch(start_rps=1, max_rps=2, min_requests=2, min_duration_s=1, bisections=0, max_search_s=1)
    burst = search.length_pair(128, 32)
    assert (burst.input.low, burst.input.tokens, burst.output.low, burst.output.tokens) == (128, 128, 32, 32)
    preset = search.model_copy(update={"lengths": "inferencex-8k1k"}).length_pair(128, 32)
    assert (preset.input.low, preset.input.tokens, preset.output.low, preset.output.tokens) == (6554, 8192, 820, 1024)
    assert set(LENGTH_PRESETS) == {"inferencex-1k1k", "inferencex-1k8k", "inferencex-8k1k"}
    with pytest.raises(ValueError, match="no length preset 'sharegpt'"):
        RateSearch.model_validate({**search.model_dump(), "lengths": "sharegpt"})


def test_every_turn_resends_the_shared_prefix_and_the_conversation_so_far(stub_case):
    from kit.plan.model_files import load_tokenizer, weightless_model
    from kit.serve.burst import token_count
    from kit.serve.prefix import Conversations

    tokenizer = load_tokenizer(weightless_model(*stub_case.named_model, stub_case.params.seed, say=print))
    shape = SharedPrefix(conversations=3, turns=4, shared_tokens=40, turn_tokens=8, answer_tokens=6)
    made = Conversations(tokenizer, shape, seed=1)
    assert [len(chain) for chain in made.chains] == [4, 4, 4] and len(made.prompts) == 12
    shared = os.path.commonprefix(made.prompts)  # the system prefix (and perhaps part of a word after it)
    assert 40 <= token_count(tokenizer, shared) - token_count(tokenizer, "") <= 41
    for chain in made.chains:  # each turn extends the previous one by an answer and a user text
        for earlier, later in zip(chain, chain[1:]):
            assert made.prompts[later].startswith(made.prompts[earlier])
            assert made.input_tokens[later] - made.input_tokens[earlier] == 6 + 8
    assert made.prompts[made.chains[0][1]] != made.prompts[made.chains[1][1]]  # conversations differ after the prefix
    assert Conversations(tokenizer, shape, seed=1).prompts == made.prompts


def test_the_prefix_cache_counts_are_read_from_vllms_own_metrics_page():
    from kit.serve.prefix import cache_counts
    from kit.serve.prometheus import parse_samples

    page = METRICS_PAGE.read_text()
    after = parse_samples(page)
    queries = 'vllm:prefix_cache_queries_total{engine="0",model_name="/models/tiny-llama"}'
    start = parse_samples(
        page.replace(f"{queries} 3228.0", f"{queries} 3000.0")
    )  # the same page 228 looked-up tokens earlier
    counts = cache_counts(ENGINES["vllm"], start, after)
    assert (counts.queried_tokens, counts.hit_tokens, counts.hit_rate) == (228.0, 0.0, 0.0)
    assert (
        cache_counts(ENGINES["vllm"], "GET /metrics failed: refused", after).unavailable
        == "GET /metrics failed: refused"
    )
    assert cache_counts(ENGINES["tgi"], after, after).unavailable == (
        "Text Generation Inference exposes no prefix cache counters"
    )
    assert "--no-enable-prefix-caching" not in ENGINES["vllm"].arguments(stub_case_params(True), "/m", "h", 1)
    assert "--no-enable-prefix-caching" in ENGINES["vllm"].arguments(stub_case_params(False), "/m", "h", 1)


def test_a_conversation_sends_its_next_turn_only_once_the_previous_one_ended(smoke_plan):
    handler = type("Replay", (CountingReplay,), {"lock": threading.Lock()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    chains = [[0, 1, 2], [3, 4, 5]]
    try:
        fired = fire_conversations(
            f"http://127.0.0.1:{server.server_port}",
            ENGINES["vllm"],
            smoke_serve_case(smoke_plan).params,
            ["p"] * 6,
            [8] * 6,
            60,
            chains,
            [4] * 6,
        )
    finally:
        server.shutdown()
    rows = {row.index: row for row in fired.records}
    assert len(rows) == 6 and all(row.ok for row in rows.values()) and handler.most == 2
    for chain in chains:
        for earlier, later in zip(chain, chain[1:]):
            assert rows[later].sent_at >= rows[earlier].ended_at


# --- SGLang: its spec against its recorded outputs ----------------------------------------------------


def test_sglangs_recorded_stream_chunks_are_one_token_event_each():
    engine = ENGINES["sglang"]
    payloads = (support.FIXTURES / "serve" / "sglang-completions-stream.data").read_text().splitlines()
    events = [engine.parse(payload) for payload in payloads]
    assert len(events) == 4 and all((e.token_events, e.tokens, e.finished) == (1, 1, False) for e in events)
    assert all(e.error is None and e.output_tokens is None for e in events)
    assert engine.parse("[DONE]").finished


def test_sglangs_counters_are_read_from_its_documented_metrics_page():
    from kit.serve.prefix import cache_counts
    from kit.serve.prometheus import parse_samples

    engine = ENGINES["sglang"]
    samples = parse_samples((support.FIXTURES / "serve" / "sglang-metrics-docs.prom").read_text())
    assert engine.generated_tokens.total(samples) == 7557572.0
    assert engine.prefix_cache_queries.total(samples) == 8128902.0
    # that page predates the finished-request and cached-token counters: said, never a zero
    assert engine.finished_requests.total(samples) is None
    assert cache_counts(engine, samples, samples).unavailable == "/metrics has no sglang:cached_tokens_total"


def test_sglang_is_started_as_its_docs_start_it_with_random_weights_and_its_metrics():
    engine = ENGINES["sglang"]
    on, off = stub_case_params(True), stub_case_params(False)
    argv = engine.arguments(on, "/m", "0.0.0.0", 30000)
    assert engine.command == ("python3", "-m", "sglang.launch_server") and engine.container_port == 30000
    for flag, value in (("--model-path", "/m"), ("--load-format", "dummy"), ("--port", "30000"), ("--device", "cpu")):
        assert argv[argv.index(flag) + 1] == value
    assert "--enable-metrics" in argv and "--disable-radix-cache" not in argv
    assert "--disable-radix-cache" in engine.arguments(off, "/m", "0.0.0.0", 30000)
    path, body = engine.request("p", on.params, 7)
    assert path == "/v1/completions" and body["max_tokens"] == 7 and body["stream_options"] == {"include_usage": True}


def test_sglang_is_pinned_by_digest_with_its_source_and_has_no_cpu_environment():
    from kit.images import load_lock

    lock = load_lock()
    image = lock.images["serve-sglang"]
    assert image.reference.startswith("lmsysorg/sglang:") and image.digest.startswith("sha256:")
    assert image.digest_source and image.versions == {"sglang": "0.5.20"}
    assert {(env.engine, env.device) for env in lock.environments.values() if env.engine == "sglang"} == {
        ("sglang", "cuda")
    }


def test_a_cache_that_found_nothing_has_a_hit_rate_of_zero_even_where_it_looked_up_nothing():
    from kit.rundir.serving import PrefixCacheCounts

    assert PrefixCacheCounts(queried_tokens=0, hit_tokens=0).hit_rate == 0.0  # vLLM with its cache off
    assert PrefixCacheCounts(queried_tokens=2576, hit_tokens=1024).hit_rate == pytest.approx(0.3975, abs=1e-4)
    assert PrefixCacheCounts(unavailable="GET /metrics failed").hit_rate is None


# --- a whole serve run through a real HTTP server: the burst, the search, shared prefixes, start-up ---


def test_a_serve_run_records_its_rate_search_shared_prefixes_and_start_up_beside_the_burst(stub_case, tmp_path):
    from test_sweep import serve_through_stub

    params = stub_case.params.model_copy(
        update={
            "sweep": None,
            "rates": RateSearch(
                start_rps=20, max_rps=40, min_requests=10, min_duration_s=0.5, bisections=1, max_search_s=60
            ),
            "prefix": SharedPrefix(conversations=2, turns=3, shared_tokens=32, turn_tokens=8, answer_tokens=4),
            "startup": True,
        }
    )
    sample = serve_through_stub(stub_case.model_copy(update={"params": params}), tmp_path, refuse_every=0)
    [driver] = sample.ranks
    assert sample.status == "ok", driver.reason
    details = driver.details
    rates = details.rates
    assert [p.rate_rps for p in rates.points] == [20, 40] and rates.capacity_rps == 40 and rates.missed_rps is None
    assert rates.stopped.startswith("every rate met the objectives") and rates.tokens.equal
    for point in rates.points:  # each point's rows on disk, as many as it sent
        rows = (tmp_path / "case/runs/1" / point.files.requests).read_text().splitlines()
        assert len(rows) == point.sent == point.planned == max(10, round(point.rate_rps * 0.5))
    prefix = details.prefix
    assert prefix.on.requests == prefix.off.requests == 6 and prefix.on.tokens.equal
    assert prefix.on.cache.unavailable == "/metrics has no vllm:prefix_cache_queries_total"  # the stand-in keeps none
    assert "--no-enable-prefix-caching" in (tmp_path / "case/runs/1/prefix/off/engine.log").read_text()
    assert [start.cache for start in details.startup.starts] == ["first", "cold", "warm"]
    assert all(start.first_token_s > start.ready_s > 0 for start in details.startup.starts)


def test_the_preflight_serves_one_request_without_the_search_prefixes_or_start_up(smoke_plan):
    from kit.execute.preflight import miniature

    params = miniature(smoke_serve_case(smoke_plan)).params
    assert (params.prompts, params.sweep, params.rates, params.prefix, params.startup) == (1, None, None, None, False)
