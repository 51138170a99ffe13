"""Server-sent events, framed incrementally from the bytes of an HTTP response body.

Engines differ in details that matter here: vLLM writes `data: {...}` and ends with
`data: [DONE]`; TGI writes `data: {...}` (no terminator); LightLLM writes `data:{...}` without
the space; transformers serve (5.23) writes `data: {...}` and no terminator. The SSE
specification (WHATWG HTML, "Server-sent events", "Interpreting an event stream") allows all
of these: one optional space after the colon, events separated by a blank line, CR, LF or CRLF.
"""

from __future__ import annotations


class EventFramer:
    """Feed it chunks of bytes as they arrive; it returns the `data` of each complete event."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        self._buffer += chunk
        events = []
        while True:
            cut = _line_end(self._buffer)
            if cut is None:
                return events
            end, skip = cut
            line = self._buffer[:end].decode("utf-8")
            self._buffer = self._buffer[end + skip :]
            if line == "":
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
            elif line.startswith("data:"):
                value = line[5:]
                self._data.append(value[1:] if value.startswith(" ") else value)
            # other fields (event:, id:, retry:) and comments (":") carry nothing the kit reads

    def close(self) -> list[str]:
        """The last event of a stream that ended without its blank line (allowed in practice)."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        return events


def _line_end(buffer: bytes) -> tuple[int, int] | None:
    """Where the first line ends and how long its terminator is; None while it is incomplete."""
    lf, cr = buffer.find(b"\n"), buffer.find(b"\r")
    if cr == -1 or (lf != -1 and lf < cr):
        return (lf, 1) if lf != -1 else None
    if cr + 1 == len(buffer):
        return None  # a CR at the end may be the first half of CRLF
    return cr, 2 if buffer[cr + 1 : cr + 2] == b"\n" else 1


def parse_stream(raw: bytes) -> list[str]:
    """Every event's data of a whole captured stream."""
    framer = EventFramer()
    return framer.feed(raw) + framer.close()
