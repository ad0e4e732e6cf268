"""Hosted MCP approval requests, decided by the gate like any other call.

An OpenAI Responses ``mcp_approval_request`` asks the client whether the platform
may call one tool of a remote MCP server; the platform waits for the client's
``mcp_approval_response``. The accumulator surfaces each request as a call named
``mcp:<server_label>:<name>`` (kind ``mcp_approval``, the request's id as call
id, its JSON ``arguments``). The gate decides it exactly as it decides a call: a
schema, the policy's rules for that name, approvals by an operator, the ledger.
What differs is what "running" it means: nothing runs locally. The one thing the
client does is answer, so the stand-in tool's function returns the answer
``{"approve": true}``, and the ledger records it as the call's result:

* allowed (by the policy, or with no policy when the registry declares the name):
  the call is ``succeeded`` with that result, and the turn answers ``approve:
  true``. Seen again (a replay, a resume), the ledger returns the same answer and
  nothing is decided twice;
* denied, unknown, invalid, incomplete: ``rejected``/``incomplete``; the answer is
  ``approve: false`` with the outcome's reason id (``policy_denied``...);
* sent to a person: ``awaiting_approval`` like any call; until an operator
  approves and a resume records the answer, the turn answers ``approve: false``
  with reason ``awaiting_approval`` (the model must not take a pending answer for
  a yes).

Which tool the gate looks such a name up as (``ApprovalTools.get``):

* the registry declares a tool of that exact name: its spec (schema, effect,
  idempotency, dispatch) with its function replaced by the answer; the declared
  function never runs;
* otherwise, a gate with a policy (a file or an ``Authorizer``): a stand-in that
  takes any object, classed ``write`` (it is answered only once the response
  completed) and ``natural`` (answering twice gives the same answer); the
  policy's rules for that name decide, and its default is deny;
* otherwise none: the call is an unknown tool, rejected. Without a policy nothing
  says that a remote write is wanted, so no request is approved by default.

The ``mcp:`` prefix is reserved: a function call of that name (no OpenAI function
name can contain ``:``) is answered the same way and never runs a local function.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent_gate.errors import UnknownTool
from agent_gate.tools import Effect, Idempotency, Tool, ToolRegistry, ToolSpec

__all__ = ["APPROVED", "MCP_PREFIX", "ApprovalTools", "is_approval_name"]

MCP_PREFIX = "mcp:"
APPROVED = {"approve": True}
"""The result an allowed approval request records: the answer, not a tool's output."""
_MAX_STANDINS = 1024


def is_approval_name(name: str) -> bool:
    """``mcp:<server_label>:<name>``, both parts non-empty."""
    if not name.startswith(MCP_PREFIX):
        return False
    label, _, tool = name[len(MCP_PREFIX) :].partition(":")
    return bool(label) and bool(tool)


def _answer(*_args: Any, **_kwargs: Any) -> dict[str, bool]:
    return dict(APPROVED)


class ApprovalTools(ToolRegistry):
    """The registry the gate looks calls up in: the caller's tools, and a tool for
    each MCP approval request (see the module docstring). Registering goes to the
    caller's registry; this view only looks up."""

    def __init__(self, tools: ToolRegistry, *, decided: bool) -> None:
        super().__init__()
        self._declared = tools
        self._decided = decided
        self._standins: dict[str, Tool] = {}

    def get(self, name: str) -> Tool | None:
        declared = self._declared.get(name)
        if not is_approval_name(name) or (declared is None and not self._decided):
            return declared
        known = self._standins.get(name)
        if known is not None and (declared is None or known.spec is declared.spec):
            return known
        spec = declared.spec if declared is not None else ToolSpec.build(
            name,
            schema={"type": "object"},
            effect=Effect.WRITE,
            idempotency=Idempotency.NATURAL,
            description="a hosted MCP call waiting for the client's approval",
        )
        tool = Tool(spec, _answer)
        if len(self._standins) < _MAX_STANDINS:
            self._standins[name] = tool
        return tool

    def __getitem__(self, name: str) -> Tool:
        tool = self.get(name)
        if tool is None:
            raise UnknownTool(name)
        return tool

    def add(self, spec: ToolSpec, fn: Any) -> Tool:
        return self._declared.add(spec, fn)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)

    def names(self) -> list[str]:
        return self._declared.names()
