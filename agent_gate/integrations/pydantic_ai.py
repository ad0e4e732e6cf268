"""pydantic-ai behind a gate: ``GatedToolset`` wraps any toolset so every call of
its tools goes through ``Gate.aexecute`` (``pip install 'agent-gate[pydantic-ai]'``).

    gated = GatedToolset(toolset, gate, task_id="order-17")
    agent = Agent(model, toolsets=[gated], output_type=[str, DeferredToolRequests])

Each tool is registered in the gate's registry under the JSON Schema pydantic-ai
shows the model (``ToolDefinition.parameters_json_schema``); ``options`` adds what
a definition cannot say (``effect``, ``idempotency``, ``dedupe`` ...; a tool without
options is taken to write and never to be re-run blindly). The call id is
pydantic-ai's ``tool_call_id``, so a run repeated over the same message history, or
resumed with ``deferred_tool_results``, is answered from the ledger: a write runs once.

A call the policy sends to a person raises pydantic-ai's ``ApprovalRequired``: the
run ends with ``DeferredToolRequests``, whose ``metadata[id]["agent_gate"]`` names the
gate's call, its reason id and ``args_hash``, the hash of the arguments shown.
pydantic-ai matches every answer to its call by ``tool_call_id`` (it refuses answers
for calls it did not defer, or missing ones). Approving it the pydantic-ai way
(``DeferredToolResults(approvals={id: True}, metadata={id: {"approved_by": "alice",
"args_hash": ...}})`` on the next run) records that approval in the ledger, for the
arguments whose hash it carries (``AnswerMismatch`` if the call's are others now),
and runs the call once; who approved is ``metadata[id]["approved_by"]`` if given,
else ``approved_by``. An approval that overrides the arguments
(``ToolApproved(override_args=...)``) is not one for the call shown: the gate refuses
those arguments under that call id and the call goes on waiting. A denial given the
pydantic-ai way never reaches the toolset: ``record_denials`` writes it to the
ledger, by call id, with its hash. A call refused, failed or in doubt reaches the
model as pydantic-ai's failed tool result (``ToolFailed``) with a stable reason id
and no policy internals.
The policy decides who must approve: a toolset inside that raises ``ApprovalRequired``
itself (``ApprovalRequiredToolset``) would do so inside the gate's run, which records
the call failed; put such a wrapper outside ``GatedToolset``, or none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import DeferredToolResults, RunContext, ToolDenied
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
from pydantic_core import to_jsonable_python

from agent_gate.errors import GateUsageError
from agent_gate.gate import Gate, Outcome
from agent_gate.integrations import _bridge
from agent_gate.integrations._bridge import APPROVED_BY
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import CallState

__all__ = ["APPROVED_BY", "GatedToolset"]


@dataclass
class GatedToolset(WrapperToolset[Any]):
    """A toolset whose every tool call is decided, recorded and run once by ``gate``."""

    gate: Gate
    task_id: str = field(kw_only=True)
    options: _bridge.ToolOptionsByName = field(default_factory=dict, kw_only=True)
    approved_by: str = field(default="pydantic-ai", kw_only=True)

    def __init__(
        self,
        wrapped: AbstractToolset[Any],
        gate: Gate,
        *,
        task_id: str,
        options: _bridge.ToolOptionsByName | None = None,
        approved_by: str = "pydantic-ai",
    ) -> None:
        self.wrapped = wrapped
        self.gate = gate
        self.task_id = task_id
        self.options = dict(options or {})
        self.approved_by = approved_by

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        for name, tool in tools.items():
            d = tool.tool_def
            _bridge.register(self.gate, name, d.parameters_json_schema, d.description, self.options)
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        if not ctx.tool_call_id:
            raise GateUsageError(f"pydantic-ai called {name!r} without a tool call id")
        call = {
            "call_id": ctx.tool_call_id,
            "name": name,
            "arguments": to_jsonable_python(tool_args, by_alias=True),
        }

        def run(judged: dict[str, Any]) -> Any:
            # A person's edit: pydantic-ai's own validator makes the tool's input of it.
            args = (tool_args if judged == call["arguments"]
                    else tool.args_validator.validate_python(judged))
            return self.wrapped.call_tool(name, args, ctx, tool)

        with _bridge.invoking(name, run):
            outcome = await self.gate.aexecute(self.task_id, call)
            if outcome.state is CallState.AWAITING_APPROVAL and ctx.tool_call_approved:
                by, args_hash = _given(ctx.tool_call_metadata, self.approved_by)
                refused = await asyncio.to_thread(
                    _bridge.approve_waiting, self.gate, outcome, by, args_hash
                )
                if refused is not None:
                    raise ToolFailed(refused.text)
                outcome = await self.gate.aexecute(self.task_id, call)
            if outcome.state is CallState.AWAITING_APPROVAL:
                rec = await asyncio.to_thread(self.gate.ledger.get, self.task_id, outcome.call_id)
                raise _waiting(outcome, rec)
        return _answer(outcome)

    def record_denials(self, results: DeferredToolResults, *, by: str | None = None) -> int:
        """Write the denials in ``results`` to the ledger (pydantic-ai answers the model
        itself and never calls the toolset for them); returns how many were new.

        Each is matched to its call by id, in this toolset's task, and carries the
        ``args_hash`` of its ``metadata``, if any; who denied is ``by``, else the
        metadata's ``approved_by``, else ``approved_by``. A denial naming no call of
        the task, or one answered otherwise, refuses them all (``UnmatchedAnswer``);
        one for other arguments, ``AnswerMismatch``: nothing is recorded. A denied
        call then reads ``rejected`` everywhere (``agent-gate calls``, the audit
        trail), instead of waiting for an approval that will not come.
        """
        denials = []
        for call_id, answer in results.approvals.items():
            if answer is not False and not isinstance(answer, ToolDenied):
                continue
            who, args_hash = _given(results.metadata.get(call_id), self.approved_by)
            reason = answer.message if isinstance(answer, ToolDenied) else None
            denials.append(_bridge.FrameworkAnswer(call_id, False, by or who, args_hash, reason))
        return len(_bridge.record_answers(self.gate, self.task_id, denials))


def _given(meta: object, default_by: str) -> tuple[str, str | None]:
    """Who answered and the hash of the arguments they were shown, from an answer's
    pydantic-ai metadata (``approved_by``, ``args_hash``)."""
    if not isinstance(meta, Mapping):
        return default_by, None
    named, args_hash = meta.get(APPROVED_BY), meta.get("args_hash")
    by = named if isinstance(named, str) and named.strip() else default_by
    return by, args_hash if isinstance(args_hash, str) else None


def _waiting(outcome: Outcome, rec: CallRecord | None) -> ApprovalRequired:
    """pydantic-ai's deferral of a call that waits, with what a person is shown of it."""
    why = _bridge.refusal(outcome)
    return ApprovalRequired(metadata={"agent_gate": {
        "call_id": outcome.call_id, "task_id": outcome.task_id,
        "reason_id": why.reason_id if why is not None else outcome.state.value,
        "args_hash": rec.args_hash if rec is not None else None,
    }})


def _answer(outcome: Outcome) -> Any:
    """The tool's result, or pydantic-ai's own way of saying there is none."""
    why = _bridge.refusal(outcome)
    if why is None:
        return _bridge.model_result(outcome)
    if isinstance(outcome.exception, ModelRetry | ToolFailed) and not outcome.replayed:
        raise outcome.exception  # the tool's own request to the model, this very run
    raise ToolFailed(why.text)
