"""A call's arguments are encoded once: the canonical JSON the gate writes to check
them is the text the ledger hashes and stores (for a tool without a model, whose
object is stored as it came). Counted, and the stored text and hash held to the
definitions they must equal.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry, plainjson
from agent_gate.gate import admission as gate_admission
from agent_gate.ledger import Ledger
from agent_gate.ledger import records as ledger_records
from agent_gate.ledger.canonical import arguments_hash
from agent_gate.plainjson import canonical_json

ARGUMENTS = {"zeta": [3, {"b": "é", "a": None}], "alpha": "ünïcode", "n": 1.5}


class Dictish(dict[str, Any]):
    """A mapping that is a dict but not exactly one: its copy is encoded on its own."""


def _gate(path: Path) -> Gate:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"})
    def echo(**_: Any) -> str:
        return "ok"

    return Gate(tools, Ledger(f"sqlite:///{path}", create=True))


def _stored(path: Path, call_id: str) -> tuple[str, str]:
    with sqlite3.connect(path) as db:
        text, digest = db.execute(
            "SELECT arguments, args_hash FROM tool_calls WHERE call_id = ?", (call_id,)
        ).fetchone()
    return text, digest


@pytest.mark.parametrize("kind", [dict, Dictish])
def test_the_stored_text_and_hash_are_those_of_the_canonical_json(
    tmp_path: Path, kind: type[dict[str, Any]]
) -> None:
    path = tmp_path / "l.db"
    with _gate(path) as gate:
        done = gate.execute("t", {"call_id": "c1", "name": "echo", "arguments": kind(ARGUMENTS)})
        assert done.state is CallState.SUCCEEDED
    text, digest = _stored(path, "c1")
    assert text == canonical_json(ARGUMENTS)
    assert digest == arguments_hash(ARGUMENTS)


def test_a_calls_arguments_are_encoded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[object] = []
    real = plainjson.canonical_json

    def counting(value: object) -> str:
        encoded.append(value)
        return real(value)

    # Every name the call's path reaches canonical JSON by.
    monkeypatch.setattr(plainjson, "canonical_json", counting)
    monkeypatch.setattr(gate_admission, "canonical_json", counting)
    monkeypatch.setattr(ledger_records, "canonical_json", counting)
    with _gate(tmp_path / "l.db") as gate:
        gate.execute("t", {"call_id": "warm", "name": "echo", "arguments": {}})
        encoded.clear()
        gate.execute("t", {"call_id": "c1", "name": "echo", "arguments": dict(ARGUMENTS)})
    assert sum(1 for value in encoded if value == ARGUMENTS) == 1
