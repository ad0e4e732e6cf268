"""Resume strategy for OpenAI Responses background mode.

A response created with ``"background": true, "stream": true`` keeps being
generated when the client's connection drops, and its events can be read again
with ``GET /v1/responses/{id}?stream=true&starting_after=N``: every event whose
``sequence_number`` is greater than ``N``. Its SSE events carry no ``id:``, so
the WHATWG ``Last-Event-ID`` route does not apply; the cursor is in the JSON.

This is the one module of the transport that reads a provider's JSON, and only
two fields of it (``response.id`` and ``sequence_number``) of events that were
already framed and yielded; it is a strategy of the OpenAI Responses adapter,
kept here because it shapes requests, which only the transport does.

The POST that created the response is never re-sent: resuming is a GET to a
different URL. A response created without ``background`` cannot be retrieved
as a stream (the API answers 400), which surfaces as a typed status error.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit

from agent_gate.errors import TruncationReason
from agent_gate.sse import ServerSentEvent
from agent_gate.transport.resume import ResumeState, StreamRequest


class OpenAIResponsesResume:
    """Resume from the last ``sequence_number`` seen, via the retrieve endpoint.

    ``responses_url`` is the collection URL (``https://api.openai.com/v1/responses``);
    by default it is the URL of the original request, which is the create
    endpoint ``POST .../responses``.
    """

    __slots__ = ("_response_id", "_responses_url", "_sequence")

    def __init__(self, responses_url: str | None = None) -> None:
        self._responses_url = responses_url
        self._response_id: str | None = None
        self._sequence: int | None = None

    @property
    def response_id(self) -> str | None:
        return self._response_id

    @property
    def sequence_number(self) -> int | None:
        """The highest sequence number seen: the ``starting_after`` of the next resume."""
        return self._sequence

    def observe(self, event: ServerSentEvent) -> None:
        data = event.data
        # Heartbeats and "[DONE]" are not JSON objects; skip them without parsing.
        if not data.startswith("{"):
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        seq = obj.get("sequence_number")
        if isinstance(seq, int) and not isinstance(seq, bool):
            self._sequence = seq if self._sequence is None else max(self._sequence, seq)
        if self._response_id is None:
            response = obj.get("response")
            if isinstance(response, dict):
                rid = response.get("id")
                if isinstance(rid, str) and rid:
                    self._response_id = rid

    def next_request(self, state: ResumeState) -> StreamRequest | TruncationReason:
        if self._response_id is None:
            # Cut before response.created: nothing identifies the answer. Only
            # the caller may decide to ask for a new one.
            return TruncationReason.NO_RESUME_POINT
        base = self._responses_url or state.original.url
        parts = urlsplit(base)
        path = parts.path.rstrip("/") + "/" + self._response_id
        url = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        params = {"stream": "true"}
        if self._sequence is not None:
            params["starting_after"] = str(self._sequence)
        return state.original.as_get(url, params)
