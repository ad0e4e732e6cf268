"""The recorded HTTP response body of each fixture, taken out of its source file.

Fixtures are kept byte-exact as their source repository has them, so the body is
extracted here, the way the source's own test harness serves it:

- ``raw``: the file is the ``text/event-stream`` body itself;
- ``lines``: one JSON chunk per line (Vercel AI's ``*.chunks.txt``); the source's
  test serves each non-empty line as ``data: <line>\\n\\n`` (every line, the empty
  last one included, where ``keep_empty`` is set) and, where ``done`` is set, a
  final ``data: [DONE]\\n\\n``;
- ``sdk_lines``: the Anthropic SDK's ``get_response`` helper: every line of the file
  followed by one ``\\n`` (so a file stored without its final blank line is served
  without it);
- ``vcr``: a VCR.py cassette (YAML); the body is ``interactions[i].response.body.string``
  (text, or bytes under ``!!binary``, gunzipped when the recorded headers say so).
"""

from __future__ import annotations

import gzip
from typing import Any

import yaml


def _vcr_body(data: bytes, interaction: int) -> bytes:
    if data[:2] == b"\x1f\x8b":  # a gzipped cassette (``*.yaml.gz``)
        data = gzip.decompress(data)
    cassette = yaml.safe_load(data)
    response = cassette["interactions"][interaction]["response"]
    body: Any = response["body"]["string"]
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    headers = {str(k).lower(): v for k, v in (response.get("headers") or {}).items()}
    if "gzip" in str(headers.get("content-encoding", "")) and raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw


def _lines_body(data: bytes, done: bool, keep_empty: bool) -> bytes:
    lines = data.split(b"\n")
    events = [b"data: " + line + b"\n\n" for line in lines if keep_empty or line.strip()]
    if done:
        events.append(b"data: [DONE]\n\n")
    return b"".join(events)


def body(data: bytes, extract: dict[str, Any]) -> bytes:
    """The response body of a fixture file, as its ``extract`` table in the manifest says."""
    kind = extract["kind"]
    if kind == "raw":
        return data
    if kind == "lines":
        return _lines_body(
            data, bool(extract.get("done", False)), bool(extract.get("keep_empty", False))
        )
    if kind == "sdk_lines":
        return b"".join(line.encode("utf-8") + b"\n" for line in data.decode("utf-8").splitlines())
    if kind == "vcr":
        return _vcr_body(data, int(extract.get("interaction", 0)))
    raise ValueError(f"unknown extract kind {kind!r}")
