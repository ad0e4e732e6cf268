"""What "the same call" is, for tool calls that arrive over MCP without an id of their own.

MCP's ``tools/call`` carries no call id the gate could key its at-most-once
promise on (the JSON-RPC request id is per connection and reused after a
reconnect). So:

- A client that wants to say which calls are the same passes its own id in the
  request's ``_meta`` under ``agent-gate/call-id`` (``CALL_ID_META``). Within a task,
  that id is the call: sent again, it is answered from the ledger (or attaches to
  the call while it waits or runs); the same id with other arguments is a conflict
  and never runs.
- Otherwise the id is derived from the tool's name and its whole argument object
  (canonical JSON, hashed; keyed with the ledger's seal key for a tool whose fields
  the policy redacts, so the id reveals nothing a guess could confirm):
  - a tool whose effective effect is ``write`` or ``destructive`` gets that id
    itself: the same tool with the same arguments, in the same task, runs at most
    once, ever. A client that means to run an identical write twice passes
    distinct ``agent-gate/call-id`` values;
  - a ``read`` tool gets that id with a sequence number: a repeat joins a call of
    it that has not finished (one waiting for approval, one running) and otherwise
    starts a new one, so a read is never answered with a stale result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_gate.errors import GateUsageError
from agent_gate.gate import Gate
from agent_gate.ledger.models import ID_LEN
from agent_gate.plainjson import canonical_json, sha256_hex
from agent_gate.privacy import seal as sealing
from agent_gate.tools import Effect

__all__ = ["CALL_ID_META", "CallIds", "asked_call_id"]

CALL_ID_META = "agent-gate/call-id"
"""The ``_meta`` key of a ``tools/call`` request naming the call (a string)."""


def asked_call_id(meta: Mapping[str, Any] | None) -> str | None:
    """The call id the client gave in ``_meta``, if any (a non-empty string)."""
    if not meta or CALL_ID_META not in meta:
        return None
    value = meta[CALL_ID_META]
    if not isinstance(value, str) or not value or len(value) > ID_LEN:
        raise GateUsageError(
            f"_meta {CALL_ID_META!r} must be a non-empty string of at most {ID_LEN} characters"
        )
    return value


class CallIds:
    """Derives call ids for one gate; remembers where each read's sequence stands."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self._next: dict[tuple[str, str], int] = {}

    def _digest(self, name: str, arguments: Mapping[str, Any]) -> str:
        text = canonical_json([name, dict(arguments)])
        rules = self.gate.rules
        if rules is not None and rules.redacts(name):
            key = self.gate.seal_key or sealing.resolve(None, self.gate.ledger.url, create=True)
            if key is None:  # pragma: no cover - the gate refuses this configuration
                raise GateUsageError("redacted fields need a seal key and none is configured")
            return key.keyed_hash(text)[:32]
        return sha256_hex(text)[:32]

    def _effect(self, name: str) -> Effect:
        tool = self.gate.tools.get(name)
        if tool is None:
            return Effect.DESTRUCTIVE  # rejected as unknown anyway: never a sequence
        rules = self.gate.rules
        return rules.effective(tool.spec).effect if rules is not None else tool.spec.effect

    def derive(self, task_id: str, name: str, arguments: Mapping[str, Any]) -> str:
        """The call id of this tool call in this task (reads the ledger for reads)."""
        base = f"mcp-{self._digest(name, arguments)}"
        if self._effect(name) is not Effect.READ:
            return base
        n = self._next.get((task_id, base), 0)
        while True:
            call_id = f"{base}.{n}"
            rec = self.gate.ledger.get(task_id, call_id)
            if rec is None or not rec.state.terminal:
                self._next[(task_id, base)] = n
                return call_id
            n += 1
