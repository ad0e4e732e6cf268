"""``Outcome.arguments``: the arguments as recorded, redacted fields as stand-ins.

An agent loop (and an operator reading outcomes) needs the call it is answering;
before this, an outcome carried no arguments at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_gate import CallState, Gate, ToolRegistry

POLICY = """
version: 1
tools:
  send:
    redact: [body]
    rules:
      - {id: send-ok, effect: allow}
"""


def test_outcomes_carry_the_recorded_arguments_with_stand_ins(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_GATE_SEAL_KEY", "11" * 32)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    tools = ToolRegistry()
    tools.register(lambda to, body: "sent", name="send", schema={"type": "object"},
                   effect="write")
    call = {"call_id": "c1", "name": "send",
            "arguments": {"to": "ana@example.com", "body": "the secret body text"}}
    with Gate(tools, db_url, policy=policy) as gate:
        first = gate.execute("t", call)
        again = gate.execute("t", call)
        unknown = gate.execute("t", {"call_id": "c2", "name": "nope", "arguments": {"a": 1}})
    assert first.state is CallState.SUCCEEDED and again.replayed
    for out in (first, again):
        assert out.arguments is not None and out.arguments["to"] == "ana@example.com"
        assert "the secret body text" not in repr(out.arguments)
        assert out.arguments["body"] != "the secret body text"
    assert unknown.arguments is None
