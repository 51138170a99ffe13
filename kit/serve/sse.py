"""Server-sent events, framed incrementally from the bytes of an HTTP response body.

Engines differ in details that matter here: vLLM writes `data: {...}` and ends with
`data: [DONE]`; TGI writes `data: {...}` (no terminator); LightLLM writes `data:{...}` without
the space; transformers serve (5.23) writes `data: {...}` and no terminator. The SSE
specification (WHATWG HTML, "Server-sent events", "Interpreting an event stream") allows all
of these: one optional space after the colon, events separated by a blank line, CR, LF or CRLF.
"""

from __future__ import annotations


class EventFramer:
    """Feed it chunks of bytes as they arrive; it returns the `data` of each complete event.

    The buffer is split on blank lines once per chunk (never re-sliced line by line), which
    keeps the client's cost per event low enough not to limit a fast engine.
    """

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[str]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            held = b"\r" if buffer.endswith(b"\r") else b""  # maybe the first half of a CRLF
            buffer = buffer[: len(buffer) - len(held)].replace(b"\r\n", b"\n").replace(b"\r", b"\n") + held
        blocks = buffer.split(b"\n\n")
        self._buffer = blocks.pop()
        return [data for data in map(_event_data, blocks) if data is not None]

    def close(self) -> list[str]:
        """The last event of a stream that ended without its blank line (allowed in practice);
        whether it is whole is for the engine's parser to say."""
        rest, self._buffer = self._buffer.rstrip(b"\r\n"), b""
        data = _event_data(rest) if rest else None
        return [data] if data is not None else []


def _event_data(block: bytes) -> str | None:
    """The data of one event block (its `data:` lines joined), or None for a block without data
    (a comment, a keep-alive, an empty block)."""
    if block.startswith(b"data: ") and b"\n" not in block:  # the common case: one data line
        return block[6:].decode("utf-8")
    values = []
    for line in block.split(b"\n"):
        if line.startswith(b"data:"):
            value = line[5:]
            values.append(value[1:] if value.startswith(b" ") else value)
        # other fields (event:, id:, retry:) and comments (":") carry nothing the kit reads
    return b"\n".join(values).decode("utf-8") if values else None


def parse_stream(raw: bytes) -> list[str]:
    """Every event's data of a whole captured stream."""
    framer = EventFramer()
    return framer.feed(raw) + framer.close()
