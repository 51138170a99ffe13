"""How fast can the kit's load generator go? Output tokens per second of the client's own CPU.

A burst (default: the paper's 1000 requests, 512 output tokens each) against a local streaming
server that does no work: it answers every request with vLLM 0.32's recorded chunk format
(tests/fixtures/serve/vllm-0.32-completions-stream.sse, with the token ids `return_token_ids`
adds), one token per chunk, written a few chunks at a time, ending with the usage chunk and
`data: [DONE]`. The server runs in its own process, so the client's figure is its own: the CPU
time of the thread running its event loop (what ClientLoad.cpu_s measures), over the burst.

    python tests/benchmarks/client_capacity.py [--requests 1000] [--tokens 512] [--rounds 3]

Prints, per round and as the median: output tokens per client-CPU-second, client CPU per
event, and the share of a core the client used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
from pathlib import Path

CHUNKS_PER_WRITE = 8


def response_bytes(tokens: int) -> list[bytes]:
    """One streamed response, cut into writes: chunk-encoded HTTP/1.1 body pieces."""
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "serve" / "vllm-0.32-completions-stream.sse"
    chunk = json.loads(fixture.read_text().split("\n\n")[0].removeprefix("data: "))
    events = []
    for index in range(tokens):
        chunk["choices"][0].update(
            text=" x", token_ids=[100 + index % 50], finish_reason="length" if index == tokens - 1 else None
        )
        events.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n")
    usage = {
        **chunk,
        "choices": [],
        "usage": {"prompt_tokens": 8, "total_tokens": 8 + tokens, "completion_tokens": tokens},
    }
    events.append(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n")
    pieces = [b"".join(events[i : i + CHUNKS_PER_WRITE]) for i in range(0, len(events), CHUNKS_PER_WRITE)]
    return [b"%x\r\n%s\r\n" % (len(piece), piece) for piece in pieces] + [b"0\r\n\r\n"]


def serve(port_queue, tokens: int) -> None:
    """The no-work server (its own process): reads a request, streams the canned response."""
    body = response_bytes(tokens)
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )

    async def handle(reader, writer):
        headers = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1]) for line in headers.split(b"\r\n") if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
        writer.write(head)
        for piece in body:
            writer.write(piece)
            await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
        port_queue.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from kit.plan.protocol import build_plan, load_protocol
    from kit.serve.client import fire_burst
    from kit.serve.engines import ENGINES

    case = next(c for c in build_plan(load_protocol(), "paper").cases if c.id == "serve.llama2-7b.vllm.g8")
    params = case.params.model_copy(update={"prompts": args.requests, "max_output_tokens": args.tokens})
    ports = multiprocessing.Queue()
    server = multiprocessing.Process(target=serve, args=(ports, args.tokens), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get(timeout=30)}"
    prompts = [f"prompt {i}" for i in range(args.requests)]
    rates = []
    try:
        for round_ in range(1, args.rounds + 1):
            burst = fire_burst(url, ENGINES["vllm"], params, prompts, [8] * args.requests, 600)
            failed = [r.error for r in burst.records if not r.ok]
            if failed:
                sys.exit(f"round {round_}: {len(failed)} requests failed, first: {failed[0]}")
            tokens = sum(r.streamed_tokens for r in burst.records)
            rate = tokens / burst.load.cpu_s
            rates.append(rate)
            print(
                f"round {round_}: {tokens} output tokens in {burst.duration:.2f} s; client CPU {burst.load.cpu_s:.2f} s "
                f"({100 * burst.load.cpu_share:.0f} % of a core): {rate / 1e3:.0f}k tokens per client-CPU-second, "
                f"{burst.load.cpu_us_per_event:.1f} us per event"
            )
    finally:
        server.terminate()
    print(
        f"median over {args.rounds} rounds: {statistics.median(rates) / 1e3:.0f}k output tokens per client-CPU-second "
        f"({args.requests} requests x {args.tokens} tokens, all at once)"
    )


if __name__ == "__main__":
    main()
