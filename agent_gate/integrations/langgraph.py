"""LangGraph / LangChain tools behind a gate (``pip install 'agent-gate[langgraph]'``).

    tools_node = gated_tool_node([send_payment, lookup], gate)
    graph.add_node("tools", tools_node)   # compiled with a checkpointer

``gated_tool_node`` is LangGraph's own ``ToolNode`` with a ``wrap_tool_call`` (and
``awrap_tool_call``) that sends each call through the gate; ``GateToolCalls`` is that
wrapper alone, for a ``ToolNode`` (or ``create_agent`` middleware) built elsewhere.
Each tool is registered in the gate's registry under the parameters schema LangChain
binds to the model (``convert_to_openai_tool``); ``options`` adds what that schema
cannot say (``effect``, ``idempotency``, ``dedupe`` ...; a tool without options is
taken to write and never to be re-run blindly). The call id is the model's tool
call id and the task is ``task_id`` or else the run's ``thread_id``, so a node that
re-runs (on resume, on a replay from a checkpoint, in a repeated run) is answered
from the ledger: a write runs once.

A call the policy sends to a person calls ``interrupt()`` with an ``ApprovalRequest``
payload (as a dict): the graph stops and the checkpointer keeps it. Resuming with
``Command(resume={"approved": True, "by": "alice"})`` (or ``True``/``False``) records
that answer in the ledger (one approval, bound to the call's argument and policy
hashes, or a denial) and, when approved, runs the call once. A refused, failed or
waiting call reaches the model as a ``ToolMessage`` with ``status="error"``, a stable
reason id and no policy internals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from agent_gate.errors import GateUsageError
from agent_gate.gate import Gate, Outcome
from agent_gate.integrations import _bridge
from agent_gate.ledger.states import CallState

__all__ = ["ApprovalRequest", "GateToolCalls", "gated_tool_node"]

Result = ToolMessage | Command[Any]
# What the sans-IO walk of one call asks its driver for: run the gate on the call.
_Step = Generator[Mapping[str, Any], Outcome, tuple[Result, Outcome | None]]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What ``interrupt()`` surfaces for a call that waits for a person (as a dict,
    under the key ``agent_gate``): enough to show the call and answer it."""

    task_id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any] | None
    """As the ledger recorded them: fields the policy redacts as their stand-ins."""
    reason_id: str = "awaiting_approval"


class GateToolCalls:
    """``wrap_tool_call``/``awrap_tool_call`` for a ``ToolNode``: every call through ``gate``.

    ``approved_by`` names who approved when a resume value does not (``"by"``).
    """

    def __init__(
        self,
        gate: Gate,
        *,
        task_id: str | None = None,
        options: _bridge.ToolOptionsByName | None = None,
        approved_by: str = "langgraph",
    ) -> None:
        self.gate = gate
        self.task_id = task_id
        self.options = dict(options or {})
        self.approved_by = approved_by

    def register(self, tool: BaseTool) -> None:
        """Put ``tool`` in the gate's registry under the schema the model is shown."""
        schema = convert_to_openai_tool(tool)["function"].get("parameters") or {"type": "object"}
        _bridge.register(self.gate, tool.name, schema, tool.description or None, self.options)

    def wrap_tool_call(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Result]
    ) -> Result:
        walk = self._walk(request)
        asked = next(walk)
        produced: list[Result] = []

        def run() -> Any:
            produced.append(execute(request))
            return _content(produced[-1])

        with _bridge.invoking(request.tool_call["name"], run):
            try:
                while True:
                    asked = walk.send(self.gate.execute(self._task(request), asked))
            except StopIteration as stop:
                return _finish(*stop.value, produced)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[Result]],
    ) -> Result:
        walk = self._walk(request)
        asked = next(walk)
        produced: list[Result] = []

        async def run() -> Any:
            produced.append(await execute(request))
            return _content(produced[-1])

        with _bridge.invoking(request.tool_call["name"], run):
            try:
                while True:
                    asked = walk.send(await self.gate.aexecute(self._task(request), asked))
            except StopIteration as stop:
                return _finish(*stop.value, produced)

    def _task(self, request: ToolCallRequest) -> str:
        if self.task_id is not None:
            return self.task_id
        config = getattr(request.runtime, "config", None) or {}
        thread = (config.get("configurable") or {}).get("thread_id")
        if not thread:
            raise GateUsageError(
                "a gated tool call needs a task: pass task_id= or run the graph with "
                "a thread_id in its config"
            )
        return str(thread)

    def _walk(self, request: ToolCallRequest) -> _Step:
        """One call through the gate, as a generator of the calls it hands the gate
        (the sync and async wrappers differ only in how they await the gate)."""
        name, call_id = request.tool_call["name"], request.tool_call["id"]
        if not call_id:
            raise GateUsageError(f"the model called {name!r} without a tool call id")
        if request.tool is not None:
            self.register(request.tool)
        call = {"call_id": call_id, "name": name, "arguments": request.tool_call["args"]}
        outcome = yield call
        if outcome.state is CallState.AWAITING_APPROVAL:
            asked = ApprovalRequest(
                outcome.task_id, outcome.call_id, name,
                dict(outcome.arguments) if outcome.arguments is not None else None,
            )
            approved, by, reason = _answer(interrupt({"agent_gate": asdict(asked)}))
            if not approved:
                self.gate.deny(outcome.call_id, by=by or self.approved_by, reason=reason,
                               task_id=outcome.task_id)
                outcome = yield call
            else:
                refused = _bridge.approve_waiting(self.gate, outcome, by or self.approved_by)
                if refused is not None:
                    return _error(name, call_id, refused.text), None
                outcome = yield call
        return _message(name, call_id, outcome), outcome


def gated_tool_node(
    tools: Sequence[BaseTool | Callable[..., Any]],
    gate: Gate,
    *,
    task_id: str | None = None,
    options: _bridge.ToolOptionsByName | None = None,
    approved_by: str = "langgraph",
    **tool_node_options: Any,
) -> ToolNode:
    """LangGraph's ``ToolNode`` over ``tools``, every call going through ``gate``.

    The tools are registered in the gate's registry now; ``tool_node_options`` are
    ``ToolNode``'s own (``name``, ``handle_tool_errors``, ``messages_key`` ...).
    """
    calls = GateToolCalls(gate, task_id=task_id, options=options, approved_by=approved_by)
    node = ToolNode(
        tools,
        wrap_tool_call=calls.wrap_tool_call,
        awrap_tool_call=calls.awrap_tool_call,
        **tool_node_options,
    )
    _bridge.check_options(calls.options, set(node.tools_by_name))
    for tool in node.tools_by_name.values():
        calls.register(tool)
    return node


def _answer(value: Any) -> tuple[bool, str | None, str | None]:
    """A resume value as (approved, by, reason): ``True``/``False`` or a mapping with
    ``approved`` (and optionally ``by`` and ``reason``)."""
    if isinstance(value, bool):
        return value, None, None
    if isinstance(value, Mapping) and isinstance(value.get("approved"), bool):
        by, reason = value.get("by"), value.get("reason")
        return (
            value["approved"],
            by if isinstance(by, str) and by.strip() else None,
            reason if isinstance(reason, str) else None,
        )
    raise GateUsageError(
        'resume an approval with True, False or {"approved": bool, "by": "...", "reason": "..."}'
    )


def _content(result: Result) -> Any:
    """What the ledger keeps of a tool's message: its content (a command has none)."""
    if isinstance(result, ToolMessage):
        if result.status == "error":
            raise _ToolErrored(str(result.content))
        return result.content
    return None


class _ToolErrored(Exception):
    """The ToolNode turned the tool's exception into an error message: the call failed."""


def _finish(message: Result, outcome: Outcome | None, produced: list[Result]) -> Result:
    """The framework's own message when the tool ran in this very call (success or the
    ToolNode's error message); the tool's own exception raised again, for the
    ToolNode's ``handle_tool_errors`` to treat as it would without a gate; else ours."""
    if produced:
        return produced[-1]
    if (
        outcome is not None and not outcome.replayed and outcome.state is CallState.FAILED
        and isinstance(outcome.exception, Exception)
    ):
        raise outcome.exception
    return message


def _message(name: str, call_id: str, outcome: Outcome) -> ToolMessage:
    why = _bridge.refusal(outcome)
    if why is None:
        content = outcome.result if outcome.result is not None else ""
        return ToolMessage(content=content, name=name, tool_call_id=call_id)
    return _error(name, call_id, why.text)


def _error(name: str, call_id: str, text: str) -> ToolMessage:
    return ToolMessage(content=text, name=name, tool_call_id=call_id, status="error")
