"""The OpenAI Agents SDK behind a gate (``pip install 'agent-gate[openai-agents]'``).

    agent = Agent(name="payer", tools=gate_tools([send_payment], gate, task_id="order-17"))

``gate_tools`` returns copies of the SDK's function tools whose every invocation goes
through the gate. Each tool is registered in the gate's registry under the SDK's own
``params_json_schema``; ``options`` adds what the schema cannot say (``effect``,
``idempotency``, ``dedupe`` ...; a tool without options is taken to write and never
to be re-run blindly). The call id is the model's ``call_id``, so a repeated run, or
a run resumed from a ``RunState`` (even the same saved state twice), is answered from
the ledger: a write runs once.

The copies' ``needs_approval`` is the gate's decision (``Gate.adecide``: the policy,
with quotas charged as for any call): a call the policy sends to a person surfaces
as the SDK's own interruption (``result.interruptions``); ``approval_request`` gives
what to show of it from the ledger, with ``args_hash``, the hash of its arguments.
The SDK matches a decision to its call by call id. Approving the call the SDK way
(``state.approve(item)`` and running the state again) records that approval in the
ledger, as the one approval of that call, bound to its argument and policy hashes
(who approved: ``approved_by``), and runs the call once. A standing approval
(``state.approve(item, always_approve=True)``) answers no call in particular: the
gate records none from it, and a call it covers goes on waiting (the model reads
``awaiting_approval``) until approved by its id. ``record_approval`` and
``record_rejection`` write a person's answer to the ledger themselves, carrying the
``args_hash`` they were shown (``AnswerMismatch`` if the call's arguments are others
now); the SDK answers a rejection itself and never invokes the tool, so a rejection
given the SDK way (``state.reject``) is recorded only by ``record_rejection``. An
answer naming no call of the task, or a call answered otherwise, is
``UnmatchedAnswer``. A refused, failed or waiting call reaches the model as the SDK's
tool-error result (a text output) with a stable reason id and no policy internals. A
tool's own ``needs_approval`` is replaced: the policy decides who must approve.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from agents import FunctionTool, RunContextWrapper, ToolApprovalItem
from agents.tool_context import ToolContext

from agent_gate.errors import GateUsageError, ToolDefinitionError, UnmatchedAnswer, safe_name
from agent_gate.gate import Gate, Outcome
from agent_gate.integrations import _bridge
from agent_gate.ledger.states import CallState

__all__ = ["approval_request", "gate_tools", "record_approval", "record_rejection"]


def gate_tools(
    tools: Sequence[FunctionTool],
    gate: Gate,
    *,
    task_id: str,
    options: _bridge.ToolOptionsByName | None = None,
    approved_by: str = "openai-agents",
) -> list[FunctionTool]:
    """The SDK's ``tools``, each invocation decided, recorded and run once by ``gate``.

    Only function tools can be gated (hosted tools run at the provider); they are
    registered in the gate's registry now.
    """
    chosen = dict(options or {})
    for tool in tools:
        if not isinstance(tool, FunctionTool):
            raise ToolDefinitionError(
                f"only function tools run where the gate can hold them, not {type(tool).__name__}"
            )
    _bridge.check_options(chosen, {t.name for t in tools})
    gated = []
    for tool in tools:
        _bridge.register(gate, tool.name, tool.params_json_schema, tool.description or None, chosen)
        gated.append(_Gated(tool, gate, task_id, approved_by).tool())
    return gated


class _Gated:
    """One SDK function tool and the two hooks the gate takes over."""

    def __init__(self, tool: FunctionTool, gate: Gate, task_id: str, approved_by: str) -> None:
        self.original = tool
        self.gate = gate
        self.task_id = task_id
        self.approved_by = approved_by

    def tool(self) -> FunctionTool:
        return dataclasses.replace(
            self.original, on_invoke_tool=self.invoke, needs_approval=self.needs_approval
        )

    async def needs_approval(
        self, _ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        """Does the policy send this call to a person? Decided (and kept) in the ledger."""
        call = {"call_id": call_id, "name": self.original.name, "arguments": params}
        outcome = await self.gate.adecide(self.task_id, call)
        return outcome.state is CallState.AWAITING_APPROVAL

    async def invoke(self, ctx: ToolContext[Any], input_json: str) -> Any:
        name, call_id = self.original.name, ctx.tool_call_id
        if not call_id:
            raise GateUsageError(f"the SDK invoked {name!r} without a call id")
        call = {"call_id": call_id, "name": name, "arguments": input_json}

        def run(judged: dict[str, Any]) -> Any:
            return self.original.on_invoke_tool(ctx, _bridge.input_text(input_json, judged))

        with _bridge.invoking(name, run):
            outcome = await self.gate.aexecute(self.task_id, call)
            if outcome.state is CallState.AWAITING_APPROVAL and _approved_by_id(
                ctx, name, call_id
            ):
                refused = await asyncio.to_thread(
                    _bridge.approve_waiting, self.gate, outcome, self.approved_by
                )
                if refused is not None:
                    return refused.text
                outcome = await self.gate.aexecute(self.task_id, call)
        return _answer(outcome)


def _answer(outcome: Outcome) -> Any:
    """The tool's output, or the text the model reads instead (the SDK's tool error)."""
    why = _bridge.refusal(outcome)
    if why is None:
        return _bridge.model_result(outcome)
    if (
        not outcome.replayed and outcome.state is CallState.FAILED
        and isinstance(outcome.exception, Exception)
    ):
        raise outcome.exception  # the SDK fails the run, as it would without a gate
    return why.text


def _approved_by_id(ctx: ToolContext[Any], name: str, call_id: str) -> bool:
    """Whether the SDK holds an approval of this very call, not a standing one for the
    tool: the SDK says both the same way, so a call id it never issued is asked too."""
    if not ctx.is_tool_approved(name, call_id):
        return False
    return not ctx.is_tool_approved(name, f"agent-gate-probe-{uuid.uuid4().hex}")


def approval_request(gate: Gate, item: ToolApprovalItem, *, task_id: str) -> dict[str, Any]:
    """What to show a person of an interruption, from the ledger: the call's ids, tool,
    arguments as recorded (redacted fields as their stand-ins) and ``args_hash``."""
    rec = gate.ledger.get(task_id, _call_id(item))
    if rec is None:
        raise UnmatchedAnswer(f"no call {safe_name(item.call_id)} in this task")
    return _bridge.shown(rec)


def record_approval(
    gate: Gate,
    item: ToolApprovalItem,
    *,
    task_id: str,
    by: str,
    args_hash: str | None = None,
    reason: str | None = None,
) -> bool:
    """Write a person's approval of the interruption ``item`` to the ledger, for the
    arguments hashing to ``args_hash`` (as ``approval_request`` showed them); the
    call then runs when the state is run again (``state.approve(item)``). Returns
    whether the call was waiting (False: it ran or was rejected since, by this same
    answer). The same approval given twice is one approval."""
    answer = _bridge.FrameworkAnswer(_call_id(item), True, by, args_hash, reason)
    return bool(_bridge.record_answers(gate, task_id, [answer]))


def record_rejection(
    gate: Gate,
    item: ToolApprovalItem,
    *,
    task_id: str,
    by: str,
    reason: str | None = None,
    args_hash: str | None = None,
) -> bool:
    """Write a rejection given the SDK way (``state.reject(item)``) to the ledger; the
    SDK answers the model itself and never invokes the tool. Returns whether the
    call was waiting (and is now ``rejected``; False: this same rejection was
    recorded before)."""
    answer = _bridge.FrameworkAnswer(_call_id(item), False, by, args_hash, reason)
    return bool(_bridge.record_answers(gate, task_id, [answer]))


def _call_id(item: ToolApprovalItem) -> str:
    call_id = item.call_id
    if not call_id:
        raise UnmatchedAnswer("the interruption names no call id")
    return call_id
