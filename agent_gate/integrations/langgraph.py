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
payload (as a dict, under ``agent_gate``; ``args_hash`` is the hash of the arguments
shown): the graph stops and the checkpointer keeps it. The answer names the call it
answers by its id and carries that hash and the task shown:
``Command(resume=answer(pending, approved=True, by="alice"))``, that is
``{"agent_gate": {call_id: {"approved": True, "by": "alice", "args_hash": ...,
"task_id": ...}}}``; ``answers(...)`` puts several in one resume, and LangGraph's own
``{interrupt.id: value}`` form may carry it. LangGraph hands a resume value to
whichever parallel tool call reaches ``interrupt()`` first, so order never decides:
the call that receives it records every answer it names in the ledger, each for its
own call id, and each call then runs (once) or stays rejected as its own answer says;
a call no answer names asks again. A resume naming no call, a call of another task,
or one not waiting here is refused whole (``UnmatchedAnswer``), as is one for other
arguments (``AnswerMismatch``): nothing of it is recorded, and LangGraph does not keep
the value. A refused, failed or waiting call reaches the model as a ``ToolMessage``
with ``status="error"``, a stable reason id and no policy internals.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any

from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph import errors as langgraph_errors
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, Interrupt, interrupt
from pydantic import PlainValidator, WithJsonSchema

from agent_gate.errors import AgentGateError, GateUsageError, UnmatchedAnswer
from agent_gate.gate import Gate, Outcome
from agent_gate.integrations import _bridge
from agent_gate.ledger.states import CallState

__all__ = ["ApprovalRequest", "GateToolCalls", "answer", "answers", "gated_tool_node"]

KEY = "agent_gate"
"""The key of the adapter's part in an interrupt's value and in a resume value."""

Result = ToolMessage | Command[Any]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What ``interrupt()`` surfaces for a call that waits for a person (as a dict,
    under the key ``agent_gate``): enough to show the call and answer it."""

    task_id: str
    call_id: str
    tool: str
    arguments: Mapping[str, Any] | None
    """As the ledger recorded them: fields the policy redacts as their stand-ins."""
    args_hash: str
    """The hash of those arguments: the answer carries it back (``answer``)."""
    reason_id: str = "awaiting_approval"


class GateToolCalls:
    """``wrap_tool_call``/``awrap_tool_call`` for a ``ToolNode``: every call through ``gate``.

    ``approved_by`` names who answered when an answer does not (``"by"``).
    """

    def __init__(
        self,
        gate: Gate,
        *,
        task_id: str | None = None,
        options: _bridge.ToolOptionsByName | None = None,
        approved_by: str = "langgraph",
    ) -> None:
        if "response_schema" not in inspect.signature(interrupt).parameters:
            raise GateUsageError(
                "this LangGraph's interrupt() takes no response_schema, which the adapter "
                "needs to refuse an answer before LangGraph keeps it: upgrade langgraph"
            )
        self.gate = gate
        self.task_id = task_id
        self.options = dict(options or {})
        self.approved_by = approved_by
        # The calls of one node run ask and take answers one at a time, so that the
        # one that receives a resume value has recorded every answer in it before a
        # sibling looks for its own; ``_answered``: calls answered that way, whose own
        # wrapper has not yet seen it.
        self._asking = threading.Lock()
        self._answered: set[tuple[str, str]] = set()

    def register(self, tool: BaseTool) -> None:
        """Put ``tool`` in the gate's registry under the schema the model is shown."""
        schema = convert_to_openai_tool(tool)["function"].get("parameters") or {"type": "object"}
        _bridge.register(self.gate, tool.name, schema, tool.description or None, self.options)

    def wrap_tool_call(
        self, request: ToolCallRequest, execute: Callable[[ToolCallRequest], Result]
    ) -> Result:
        task, call = self._task(request), self._call(request)
        produced: list[Result] = []

        def run(judged: dict[str, Any]) -> Any:
            produced.append(execute(_with_args(request, judged)))
            return _content(produced[-1])

        try:
            with _bridge.invoking(call["name"], run):
                outcome = self.gate.execute(task, call)
                while outcome.state is CallState.AWAITING_APPROVAL:
                    self._await_answer(outcome)
                    outcome = self.gate.execute(task, call)
        finally:
            self._forget(task, call["call_id"])
        return _finish(_message(call["name"], call["call_id"], outcome), outcome, produced)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[Result]],
    ) -> Result:
        task, call = self._task(request), self._call(request)
        produced: list[Result] = []

        async def run(judged: dict[str, Any]) -> Any:
            produced.append(await execute(_with_args(request, judged)))
            return _content(produced[-1])

        try:
            with _bridge.invoking(call["name"], run):
                outcome = await self.gate.aexecute(task, call)
                while outcome.state is CallState.AWAITING_APPROVAL:
                    # Off the loop: the lock is a thread's, the ledger's writes block.
                    await asyncio.to_thread(self._await_answer, outcome)
                    outcome = await self.gate.aexecute(task, call)
        finally:
            self._forget(task, call["call_id"])
        return _finish(_message(call["name"], call["call_id"], outcome), outcome, produced)

    def _await_answer(self, waiting: Outcome) -> None:
        """Return once this call's answer is in the ledger; else stop the graph for it.

        Whichever call of the node reaches ``interrupt()`` receives the resume value;
        it records every answer the value names, each for its own call id, and a
        sibling named there finds its answer recorded instead of asking. A value that
        does not name this call leaves it waiting: it asks again (LangGraph's next
        interrupt of the node), so the person is shown it. The answers are checked
        and recorded as LangGraph validates the value, before it keeps it: a refused
        value is not replayed at the next resume, and the interrupt can be answered
        again.
        """
        key = (waiting.task_id, waiting.call_id)
        taking = _Taking(self.gate, waiting.task_id, self.approved_by)
        with self._asking:
            while key not in self._answered:
                rec = self.gate.ledger.get(*key)
                if rec is None or rec.state is not CallState.AWAITING_APPROVAL:
                    return  # answered meanwhile elsewhere (CLI, inbox): execute says how
                asked = ApprovalRequest(**_bridge.shown(rec))
                taken = _refusing(interrupt, {KEY: asdict(asked)}, response_schema=taking.form)
                self._answered.update((waiting.task_id, c) for c in taken.recorded)
                if waiting.call_id in taken.named:
                    break  # this call's answer, given before (a replay): execute says
            self._answered.discard(key)

    def _forget(self, task_id: str, call_id: str) -> None:
        with self._asking:
            self._answered.discard((task_id, call_id))

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

    def _call(self, request: ToolCallRequest) -> dict[str, Any]:
        name, call_id = request.tool_call["name"], request.tool_call["id"]
        if not call_id:
            raise GateUsageError(f"the model called {name!r} without a tool call id")
        if request.tool is not None:
            self.register(request.tool)
        return {"call_id": call_id, "name": name, "arguments": request.tool_call["args"]}


def _with_args(request: ToolCallRequest, judged: dict[str, Any]) -> ToolCallRequest:
    """``request`` as the gate runs it: the model's own, or a person's edited arguments."""
    if judged == request.tool_call["args"]:
        return request
    return request.override(tool_call={**request.tool_call, "args": judged})


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


def answer(
    asked: Interrupt | Mapping[str, Any],
    *,
    approved: bool,
    by: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """The resume value answering the call ``asked`` shows (the ``Interrupt``, or its
    value): ``{"agent_gate": {call_id: {"approved", "args_hash", "task_id", "by",
    "reason"}}}``, the hash and the task as they were shown."""
    shown = asked.value if isinstance(asked, Interrupt) else asked
    if isinstance(shown, Mapping) and isinstance(shown.get(KEY), Mapping):
        shown = shown[KEY]
    if not (
        isinstance(shown, Mapping) and isinstance(shown.get("call_id"), str)
        and isinstance(shown.get("args_hash"), str)
    ):
        raise GateUsageError("answer() takes an agent_gate interrupt or its value")
    given: dict[str, Any] = {"approved": approved, "args_hash": shown["args_hash"]}
    if isinstance(shown.get("task_id"), str):
        given["task_id"] = shown["task_id"]
    if by is not None:
        given["by"] = by
    if reason is not None:
        given["reason"] = reason
    return {KEY: {shown["call_id"]: given}}


def answers(*values: Mapping[str, Any]) -> dict[str, Any]:
    """Several ``answer`` values as one resume value; a call answered twice is refused."""
    merged: dict[str, Any] = {}
    for value in values:
        part = value.get(KEY) if isinstance(value, Mapping) else None
        if not isinstance(part, Mapping):
            raise GateUsageError("answers() takes values made by answer()")
        for call_id, given in part.items():
            if call_id in merged:
                raise GateUsageError("answers() was given two answers for one call")
            merged[call_id] = given
    return {KEY: merged}


_FORM = 'a resume names the calls it answers: {"agent_gate": {call_id: {"approved": bool, ' \
    '"args_hash": ..., "task_id": ..., "by": ..., "reason": ...}}} (answer() makes it)'

_ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["approved", "args_hash"],
    "additionalProperties": False,
    "properties": {
        "approved": {"type": "boolean"},
        "args_hash": {"type": "string", "description": "as the interrupt showed it"},
        "task_id": {"type": "string", "description": "as the interrupt showed it"},
        "by": {"type": "string", "minLength": 1},
        "reason": {"type": "string"},
    },
}
_RESUME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [KEY],
    "additionalProperties": False,
    "properties": {KEY: {"type": "object", "minProperties": 1,
                         "additionalProperties": _ANSWER_SCHEMA}},
}
"""What a client is shown it must send (``Interrupt.response_schema``)."""


@dataclass(frozen=True, slots=True)
class _Taken:
    named: frozenset[str]
    """Every call the value answers."""
    recorded: tuple[str, ...]
    """Those that were waiting, and now hold their answer."""


class _Taking:
    """The resume value's validator: read the answers, record each for its call."""

    def __init__(self, gate: Gate, task_id: str, default_by: str) -> None:
        self.gate, self.task_id, self.default_by = gate, task_id, default_by
        self.form = Annotated[Any, PlainValidator(self), WithJsonSchema(_RESUME_SCHEMA)]

    def __call__(self, value: Any) -> _Taken:
        # Raised as it is (not a ValueError): LangGraph keeps no value that raised.
        given = _parse(value, self.default_by)
        recorded = _bridge.record_answers(self.gate, self.task_id, given)
        return _Taken(frozenset(g.call_id for g in given), tuple(recorded))


def _parse(value: Any, default_by: str) -> list[_bridge.FrameworkAnswer]:
    """A resume value as the answers it names; anything else is refused."""
    part = value.get(KEY) if isinstance(value, Mapping) else None
    if not isinstance(part, Mapping) or not part or len(value) != 1:
        raise UnmatchedAnswer(_FORM)
    out: list[_bridge.FrameworkAnswer] = []
    for place, (call_id, given) in enumerate(part.items(), 1):
        if not (
            isinstance(call_id, str) and call_id and isinstance(given, Mapping)
            and isinstance(given.get("approved"), bool)
            and isinstance(given.get("args_hash"), str)
            and isinstance(given.get("task_id", ""), str)
            and set(given) <= {"approved", "by", "reason", "args_hash", "task_id"}
        ):
            raise UnmatchedAnswer(f"answer {place} is not an answer: {_FORM}")
        by, reason = given.get("by"), given.get("reason")
        if by is not None and not (isinstance(by, str) and by.strip()):
            raise UnmatchedAnswer(f"answer {place}: by must name who answered")
        if reason is not None and not isinstance(reason, str):
            raise UnmatchedAnswer(f"answer {place}: reason must be text")
        out.append(_bridge.FrameworkAnswer(call_id, given["approved"], by or default_by,
                                  given["args_hash"], reason, given.get("task_id")))
    return out


def _refusing(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``, its refusal marked as a bad resume value: ``ToolNode`` then never
    turns it into a message for the model (``handle_tool_errors``), and the graph
    stays where it was, its interrupt to be answered again."""
    try:
        return fn(*args, **kwargs)
    except AgentGateError as exc:  # UnmatchedAnswer, or ApprovalRefused (the approver)
        _mark_invalid_resume(exc)
        raise


def _mark_invalid_resume(exc: BaseException) -> None:
    # LangGraph's own mark for a resume value its interrupt refuses (private, so
    # looked up: an older LangGraph without it has no such exemption to give).
    mark = getattr(langgraph_errors, "_mark_invalid_resume", None)
    if callable(mark):
        mark(exc)


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
        last = produced[-1]
        if outcome is not None and outcome.edited and isinstance(last, ToolMessage):
            # A person edited the call: the model reads the arguments it ran with too.
            return last.model_copy(update={"content": message.content})
        return last
    if (
        outcome is not None and not outcome.replayed and outcome.state is CallState.FAILED
        and isinstance(outcome.exception, Exception)
    ):
        raise outcome.exception
    return message


def _message(name: str, call_id: str, outcome: Outcome) -> ToolMessage:
    why = _bridge.refusal(outcome)
    if why is None:
        result = _bridge.model_result(outcome)
        content = result if result is not None else ""
        return ToolMessage(content=content, name=name, tool_call_id=call_id)
    return _error(name, call_id, why.text)


def _error(name: str, call_id: str, text: str) -> ToolMessage:
    return ToolMessage(content=text, name=name, tool_call_id=call_id, status="error")
