"""A call rejected before redaction stores a keyed digest, never a plain SHA-256.

An unknown tool's arguments (or text that is not a JSON object) cannot be
redacted field by field, so only a hash of them is kept; a plain SHA-256 of a short
secret is confirmed by anyone who guesses it. With a policy that redacts fields,
that hash is now keyed with the ledger's seal key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger.canonical import arguments_hash, raw_arguments_hash

POLICY = """
version: 1
redact: [password]
tools:
  login:
    rules:
      - {id: login-ok, effect: allow}
"""


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("log_in", {"user": "ana", "password": "hunter2"}),  # unknown tool
        ("login", '{"user": "ana", "password": "hunter2"'),  # never a JSON object
    ],
)
def test_a_call_rejected_before_redaction_keeps_no_guessable_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, arguments: object
) -> None:
    monkeypatch.delenv("AGENT_GATE_SEAL_KEY", raising=False)
    monkeypatch.delenv("AGENT_GATE_SEAL_KEY_FILE", raising=False)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    tools = ToolRegistry()
    tools.register(lambda **_: "ok", name="login", schema={"type": "object"})
    db = tmp_path / "ledger.db"
    guessable = {
        arguments_hash({"user": "ana", "password": "hunter2"}),
        raw_arguments_hash(arguments if isinstance(arguments, str) else None),
        raw_arguments_hash(json.dumps(arguments)),
    }
    call = {"call_id": "c1", "name": name, "arguments": arguments}
    with Gate(tools, f"sqlite:///{db}", policy=policy, create=True) as gate:
        out = gate.execute("t", call)
        assert out.state is CallState.REJECTED
        [rec] = gate.ledger.calls("t")
        assert rec.args_hash not in guessable
        assert rec.arguments is None
        # The digest is stable: the same call again is the same call, answered as stored.
        assert gate.execute("t", call).replayed
        trail = json.dumps([e.detail for e in gate.ledger.audit("t")])
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.db*") if p.is_file())
    for digest in guessable:
        assert digest.encode() not in stored and digest not in trail
    assert b"hunter2" not in stored
