"""The SSE decoders agent-gate is measured against, behind one signature.

Each candidate takes a list of byte chunks and returns the dispatched events
as ``(event, data, id)`` tuples, normalized the way each library spells "no
type" and "no id" (and nothing else: an event a peer should not have
dispatched stays in its output), so that outputs can be compared before
anything is timed.
A peer that is not installed is simply absent.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

from agent_gate.sse import SSEDecoder

Event = tuple[str, str, str]
Candidate = Callable[[list[bytes]], list[Event]]


def agent_gate(chunks: list[bytes]) -> list[Event]:
    decoder = SSEDecoder(max_stream_bytes=1 << 40)
    out: list[Event] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    decoder.end()
    return out


def _httpx_sse() -> Candidate | None:
    try:
        from httpx_sse._decoders import SSEDecoder as Decoder
        from httpx_sse._decoders import SSELineDecoder
    except ImportError:
        return None

    def run(chunks: list[bytes]) -> list[Event]:
        # What httpx-sse does over response.iter_text(): incremental UTF-8,
        # its own line splitter, then its field decoder.
        text = codecs.getincrementaldecoder("utf-8")("replace")
        lines = SSELineDecoder()
        decoder = Decoder()
        out: list[Event] = []
        for chunk in chunks:
            for line in lines.decode(text.decode(chunk)):
                event = decoder.decode(line)
                if event is not None:
                    out.append((event.event or "message", event.data, event.id or ""))
        for line in lines.flush():  # as httpx-sse does when the response ends
            event = decoder.decode(line)
            if event is not None:
                out.append((event.event or "message", event.data, event.id or ""))
        return out

    return run


def _sdk(module: str) -> Candidate | None:
    try:
        streaming = __import__(f"{module}._streaming", fromlist=["SSEDecoder"])
    except ImportError:
        return None

    def run(chunks: list[bytes]) -> list[Event]:
        out: list[Event] = []
        for event in streaming.SSEDecoder().iter_bytes(iter(chunks)):
            out.append((event.event or "message", event.data, event.id or ""))
        return out

    return run


def _sseclient() -> Candidate | None:
    try:
        import sseclient
    except ImportError:
        return None

    def run(chunks: list[bytes]) -> list[Event]:
        client = sseclient.SSEClient(iter(chunks))
        return [(e.event, e.data, e.id or "") for e in client.events()]

    return run


def limit(separator: bytes) -> Candidate:
    """The least Python can do: find blank lines, cut, decode. Not a parser."""
    prefix = b"data: "
    skip = len(prefix)

    def run(chunks: list[bytes]) -> list[Event]:
        out: list[Event] = []
        buffer = b""
        for chunk in chunks:
            buffer += chunk
            blocks = buffer.split(separator)
            buffer = blocks.pop()
            for block in blocks:
                at = block.find(prefix)
                out.append(("", block[at + skip :].decode("utf-8", "replace"), ""))
        return out

    return run


def peers() -> dict[str, Candidate]:
    """Installed peers, fastest-known first."""
    found: dict[str, Candidate | None] = {
        "httpx-sse": _httpx_sse(),
        "openai": _sdk("openai"),
        "anthropic": _sdk("anthropic"),
        "sseclient-py": _sseclient(),
    }
    return {name: run for name, run in found.items() if run is not None}
