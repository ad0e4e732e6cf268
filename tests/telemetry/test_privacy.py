"""No span, event, link, metric label or log record carries a payload.

A unique secret is planted in a call's arguments, in what its tool returns and in
a tool's exception text; the gate then executes, runs a live stream, fails a
tool and waits for (then gets) an approval, with every signal captured by the
SDK's in-memory exporters and a log handler at DEBUG. The secret is in the ledger
where it belongs (the stored result) and nowhere in the telemetry.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx

from agent_gate import CallState, Gate
from agent_gate.gate.live import run_live
from agent_gate.stream_server import Fault, FaultRule, StreamServer
from agent_gate.transport import ReconnectPolicy

from .conftest import Otel
from .scenario import chat_stream, policy_file, registry


def texts(value: Any) -> list[str]:
    """Every string inside an attribute value, a mapping or a sequence of them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*texts(k), *texts(v))]
    if isinstance(value, list | tuple | set | frozenset):
        return [t for v in value for t in texts(v)]
    return [repr(value)]


def everything(otel: Otel) -> list[str]:
    found: list[str] = []
    for span in otel.spans():
        found += [span.name, *texts(dict(span.attributes or {}))]
        found += texts(span.status.description or "")
        for event in span.events:
            found += [event.name, *texts(dict(event.attributes or {}))]
        for link in span.links:
            found += texts(dict(link.attributes or {}))
    for metric in otel.all_metrics():
        found.append(metric.name)
        for point in metric.data.data_points:
            found += texts(dict(point.attributes or {}))
    for record in otel.logs.records:
        found.append(record.getMessage())
        found += texts({k: v for k, v in vars(record).items() if k not in ("args", "msg")})
        found += texts(record.args or ())
    return found


def test_the_secret_is_nowhere_in_spans_metrics_or_logs(tmp_path: Path, otel: Otel) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    gate = Gate(
        registry(otel.tracer_provider, secret), f"sqlite:///{tmp_path / 'ledger.db'}",
        policy=policy_file(tmp_path), telemetry=otel.observer, create=True,
    )
    with gate:
        ok = gate.execute("t1", {"call_id": "c1", "name": "lookup", "arguments": {"q": secret}})
        failed = gate.execute(
            "t1", {"call_id": "c2", "name": "explode", "arguments": {"q": secret}}
        )
        waiting = gate.execute("t1", {"call_id": "c3", "name": "pay", "arguments": {"q": secret}})
        gate.approve("c3", by="ana", task_id="t1")
        (paid,) = gate.resume("t1")
        transcript = chat_stream([("call_9", "lookup", {"q": secret})])
        rules = [FaultRule(Fault(cut_after_events=2), times=1)]
        with StreamServer({"s": transcript}, faults=rules, join_timeout=2.0) as server, \
                httpx.Client() as client:
            live = run_live(
                gate, server.stream_url("s"), provider="openai-chat", task_id="t2",
                client=client, reconnect=ReconnectPolicy(initial_delay=0.001, max_delay=0.01),
            )
        stored = gate.ledger.get("t1", "c1")
    assert ok.state is CallState.SUCCEEDED and secret in str(ok.result)
    assert failed.state is CallState.FAILED and secret in str(failed.exception)
    assert waiting.state is CallState.AWAITING_APPROVAL and paid.state is CallState.SUCCEEDED
    assert live.completed and [o.state for o in live.outcomes] == [CallState.SUCCEEDED]
    assert stored is not None and secret in str(stored.result)  # the ledger keeps it
    # Telemetry saw every part of it...
    assert len(otel.call_spans()) == 5 and len(otel.logs.records) > 10
    # ...and none of the payloads.
    leaks = [text for text in everything(otel) if secret in text]
    assert leaks == []
