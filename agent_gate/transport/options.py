"""What to send and how to resume it: one value for every entry point that opens a stream.

``stream_events``, ``astream_events``, ``run_live`` and ``arun_live`` used to
each spell out the same nine keywords (headers, params, body, limits, the
reconnect policy, the resume strategy...). They now take one ``StreamOptions``
(``run_live`` a ``LiveOptions``, which adds the gate's own) and still accept the
old keywords one by one, merged over it by ``StreamOptions.of``, so that no
caller written before the options object breaks.

The value is also where the request and the session are built, so the sync and
the async layer build them the same way: ``session`` turns options into a
``StreamSession``, ``build_request`` turns the session's ``StreamRequest`` into an
``httpx.Request`` with the caller's client.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Self

import httpx

from agent_gate.transport.config import ReconnectPolicy, StreamLimits
from agent_gate.transport.resume import ResumeStrategy, StreamRequest
from agent_gate.transport.session import StreamSession, TerminalPredicate


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamOptions:
    """The request's extras and the stream's rules, shared by the sync and async entry points.

    ``resume`` is a strategy *instance*, and one instance serves exactly one
    stream (it remembers what it observed): build new options, or ``replace``
    the strategy, for every stream that resumes through one.
    """

    headers: Mapping[str, str] | None = None
    params: Mapping[str, str] | None = None
    content: bytes | None = None
    json: Any = None
    limits: StreamLimits | None = None
    reconnect: ReconnectPolicy | None = None
    resume: ResumeStrategy | None = None
    resumable: bool = False
    """The caller declares that re-sending this (non-GET) request with
    ``Last-Event-ID`` continues the same answer instead of asking for a new one."""
    last_event_id: str = ""
    rng: random.Random | None = None
    """The reconnect jitter's random source (tests pass a seeded one)."""

    @classmethod
    def of(cls, options: StreamOptions | None, overrides: Mapping[str, Any]) -> Self:
        """``options`` (or the defaults) with ``overrides`` set: the keywords a caller
        passed one by one, as every entry point accepted before this class existed.

        A plain ``StreamOptions`` given where a subclass is wanted is widened to it.
        An unknown keyword raises ``TypeError`` naming it, as a misspelt argument would.
        """
        if options is None:
            return cls(**overrides)
        if not isinstance(options, cls):
            kept = {f.name: getattr(options, f.name) for f in fields(options)}
            return cls(**{**kept, **overrides})
        return replace(options, **overrides) if overrides else options

    def session(
        self, method: str, url: str | httpx.URL, is_terminal: TerminalPredicate
    ) -> StreamSession:
        """The sans-IO session that decides every step of one stream with these options."""
        spec = StreamRequest(
            method.upper(),
            str(url),
            headers=dict(self.headers or {}),
            params=dict(self.params or {}),
            content=self.content,
            json=self.json,
        )
        return StreamSession(
            spec,
            is_terminal=is_terminal,
            limits=self.limits,
            policy=self.reconnect,
            strategy=self.resume,
            resumable=self.resumable,
            last_event_id=self.last_event_id,
            rng=self.rng,
        )


def build_request(
    client: httpx.Client | httpx.AsyncClient, spec: StreamRequest, read_timeout: float | None
) -> httpx.Request:
    """Build with the caller's client so its base URL, default headers and cookies apply.

    The read timeout is lowered to the stream's limits (see
    ``StreamSession.read_timeout``); connect, write and pool timeouts stay the
    client's own.
    """
    headers = dict(spec.headers)
    lowered = {k.lower() for k in headers}
    if "accept" not in lowered:
        headers["Accept"] = "text/event-stream"
    if "cache-control" not in lowered:
        headers["Cache-Control"] = "no-cache"
    base = client.timeout
    timeout = httpx.Timeout(
        connect=base.connect, read=read_timeout, write=base.write, pool=base.pool
    )
    kwargs: dict[str, Any] = {"headers": headers, "timeout": timeout}
    if spec.params:
        kwargs["params"] = dict(spec.params)
    if spec.content is not None:
        kwargs["content"] = spec.content
    elif spec.json is not None:
        kwargs["json"] = spec.json
    return client.build_request(spec.method, spec.url, **kwargs)
