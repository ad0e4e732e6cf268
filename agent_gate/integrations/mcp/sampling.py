"""A sampling request from the upstream: recorded, judged and answered as a call of its own.

Why a call of its own. A sampling request runs the client's model, at the client's
cost, on a prompt the upstream wrote; whether it may, and what it asked, must be on
the record whether or not a tool call caused it. So each ``sampling/createMessage``
the upstream sends becomes a ledger row of the reserved tool ``SAMPLING_TOOL`` in the
client session's task, recorded before the request is put to the client and finished
with the client's answer: ``succeeded`` with it, ``failed`` with the client's error,
``rejected`` when the policy or a person said no. Its arguments are what a person is
shown: the tool being served (``""`` outside any tool call), the gate call that
caused it, and the request itself.

Judged by the policy's ``mcp.sampling`` rules (``Policy.evaluate`` hands the reserved
name to ``policy.mcp_rules.sampling_decision``), through the gate like any call, so
``approve`` is the gate's own hold: the request waits (``GatedCalls.held``, with
progress on the client request being served, up to ``--approval-wait``) for
``agent-gate approve``/``deny``, the inbox or the API, and the approval is bound to
the hash of the arguments as recorded: to the request that was shown.

Never answered from the ledger. Each request gets a fresh call id, so an upstream
that sends the same request again asks again: a model's answer is not a result to
replay. For the same reason a request nobody answered within the wait is withdrawn
(denied by the proxy, on the record) rather than left waiting: nothing would ever
run it, and the upstream has been told it was not answered.
"""

from __future__ import annotations

import secrets
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as mt

from agent_gate.errors import AgentGateError, NotAwaitingApproval
from agent_gate.gate import Outcome
from agent_gate.gate.desk import MCP_PROVIDER
from agent_gate.integrations.mcp.calls import GatedCalls
from agent_gate.integrations.mcp.protocol import Ask, Progress, Sampled
from agent_gate.ledger.states import CallState
from agent_gate.policy.mcp_rules import SAMPLING_TOOL
from agent_gate.tools import Effect, Idempotency

__all__ = ["PROXY_ACTOR", "SAMPLING_TOOL", "Ask", "Sampled", "SamplingCalls"]

PROXY_ACTOR = "agent-gate-mcp-proxy"
"""Who the proxy is on the record when it withdraws a request nobody answered."""

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {"type": "string"},
        "call": {"type": ["string", "null"]},
        "request": {"type": "object"},
    },
    "required": ["tool", "call", "request"],
    "additionalProperties": False,
}


@dataclass(slots=True)
class _Asking:
    """The request being run: how to reach its client, and what the client said."""

    ask: Ask
    answer: mt.CreateMessageResultWithTools | None = None
    error: mt.ErrorData | None = None


_ASKING: ContextVar[_Asking | None] = ContextVar("agent_gate_mcp_sampling", default=None)


class ClientError(AgentGateError):
    """The client answered the sampling request with an error (or could not be asked)."""


async def _put_to_client(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The reserved tool's run: the request put to the client whose session it came on."""
    asking = _ASKING.get()
    if asking is None:  # a resume elsewhere: no client is waiting for it there
        raise ClientError("no client session is waiting for this sampling request here")
    got = await asking.ask()
    if isinstance(got, mt.ErrorData):
        asking.error = got
        raise ClientError(f"the client answered with error {got.code}")
    asking.answer = got
    return got.model_dump(mode="json", by_alias=True, exclude_none=True)


class SamplingCalls:
    """Sampling requests through ``calls``'s gate, held like its calls."""

    def __init__(self, calls: GatedCalls) -> None:
        self.calls = calls
        self.own_task = f"mcp-sampling-{secrets.token_hex(16)}"
        """The task of a request that came before its client session made any request
        (so before its task was known)."""
        gate = calls.gate
        if SAMPLING_TOOL not in gate.tools:
            gate.tools.wrap(_put_to_client, {SAMPLING_TOOL: {
                "schema": _SCHEMA,
                # Run once, never again by itself: a lost answer is in doubt, not retried.
                "effect": Effect.WRITE,
                "idempotency": Idempotency.NONE,
                "description": "a sampling request of the upstream, put to the client",
            }})

    async def request(
        self, task_id: str, params: mt.CreateMessageRequestParams, ask: Ask, *,
        tool: str | None = None, cause: str | None = None, progress: Progress | None = None,
    ) -> Sampled:
        """Record, judge and (if allowed or approved) put ``params`` to the client with
        ``ask``; ``tool``/``cause``: the tool and gate call being served, if any."""
        gate = self.calls.gate
        call_id = f"sampling-{secrets.token_hex(12)}"
        call = {"call_id": call_id, "name": SAMPLING_TOOL, "provider": MCP_PROVIDER,
                "arguments": {"tool": tool or "", "call": cause, "request": params.model_dump(
                    mode="json", by_alias=True, exclude_none=True)}}
        asking = _Asking(ask)
        token = _ASKING.set(asking)
        try:
            deadline = time.monotonic() + self.calls.approval_wait
            outcome = await gate.aexecute(task_id, call, principal=self.calls.principal)
            try:
                outcome = await self.calls.held(task_id, call, outcome, deadline, progress)
            except anyio.get_cancelled_exc_class():  # nobody waits for it any more
                with anyio.CancelScope(shield=True):
                    await self._withdraw(task_id, call, "the request was cancelled")
                raise
            if outcome.state is CallState.AWAITING_APPROVAL:
                outcome = await self._withdraw(
                    task_id, call, "nobody answered within --approval-wait; the upstream "
                    "was told so (a sampling request is never answered later)")
        finally:
            _ASKING.reset(token)
        rec = await anyio.to_thread.run_sync(gate.ledger.get, task_id, call_id)
        rule_ids = tuple(rec.rule_ids) if rec is not None else ()
        return _sampled(outcome, asking, rule_ids)

    async def _withdraw(self, task_id: str, call: dict[str, Any], why: str) -> Outcome:
        """Deny a request still waiting; if a person answered first, their answer stands."""
        gate = self.calls.gate
        try:
            return await anyio.to_thread.run_sync(lambda: gate.deny(
                call["call_id"], by=PROXY_ACTOR, task_id=task_id, reason=f"withdrawn: {why}"))
        except NotAwaitingApproval:  # approved or denied meanwhile: as it stands now
            return await gate.aexecute(task_id, call, principal=self.calls.principal)


def _sampled(outcome: Outcome, asking: _Asking, rule_ids: tuple[str, ...]) -> Sampled:
    """The upstream's answer for ``outcome``: the client's own, or an error that names
    the request's call id and the rules or person that decided."""
    call_id, state = outcome.call_id, outcome.state
    if state is CallState.SUCCEEDED and asking.answer is not None:
        return Sampled(asking.answer, call_id, state, rule_ids, None)
    if state is CallState.FAILED and asking.error is not None:  # the client's, as it came
        return Sampled(asking.error, call_id, state, rule_ids, None)
    data: dict[str, Any] = {"agent-gate/call-id": call_id}
    if state is CallState.REJECTED:
        data["agent-gate/rule-ids"] = list(rule_ids)
        if outcome.code == "policy_denied" and rule_ids:
            said = f"denied by policy rule {', '.join(rule_ids)}"
        else:
            said = f"not put to the client: {outcome.reason}"
        error = mt.ErrorData(code=mt.INVALID_REQUEST, message=(
            f"agent-gate: sampling request {call_id} {said}"), data=data)
        return Sampled(error, call_id, state, rule_ids, f"sampling ({said})")
    error = mt.ErrorData(code=mt.INTERNAL_ERROR, data=data, message=(
        f"agent-gate: sampling request {call_id} is {state.value}: {outcome.reason}"))
    return Sampled(error, call_id, state, rule_ids, f"sampling ({state.value})")
