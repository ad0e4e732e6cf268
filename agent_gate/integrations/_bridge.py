"""What every agent-framework adapter shares: a framework's tool registered in the
gate once, a person's answer given through the framework recorded once, for the call
it names by id and the arguments whose hash it carries (never for whichever call
happens to ask), and a call that did not run told to the model without the policy's
internals.

The framework keeps running its own tools (its validation, its dependencies, its
context); the gate decides whether and when. So the function registered in the
gate's registry is a dispatcher: the adapter sets, for the call at hand, the
framework's own invocation in a context variable, and the gate's runner, having
committed ``executing``, calls the dispatcher, which runs exactly that invocation.
Run outside an adapter (``Gate.resume`` or ``agent-gate resume`` on such a task,
with nothing set), the dispatcher refuses rather than guess at a framework context
it does not have, and the call is recorded ``failed`` (``GateUsageError``) without
its tool having run: calls of framework tools are carried on by the framework.
"""

from __future__ import annotations

import contextvars
import inspect
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from agent_gate.errors import (
    AnswerMismatch,
    ApprovalRefused,
    GateUsageError,
    NotAwaitingApproval,
    ToolDefinitionError,
    UnmatchedAnswer,
    safe_name,
)
from agent_gate.gate import Gate, Outcome
from agent_gate.gate.render import tool_output
from agent_gate.ledger.approvals import APPROVED, DENIED, ApprovalRecord
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import CallState
from agent_gate.tools import Effect, Idempotency, ToolOptions, ToolSpec

__all__ = [
    "APPROVED_BY",
    "FrameworkAnswer",
    "Refusal",
    "ToolOptionsByName",
    "approve_waiting",
    "check_options",
    "input_text",
    "invoking",
    "model_result",
    "record_answers",
    "refusal",
    "register",
    "shown",
]

APPROVED_BY = "approved_by"
"""The metadata key under which an application names who approved a call through
the framework (a person's id, as ``agent-gate approve --by`` takes it)."""

ToolOptionsByName = Mapping[str, ToolOptions]
"""Per-tool gate options (``effect``, ``idempotency``, ``dedupe``, ``timeout`` ...),
keyed by the framework's tool name; what the framework's definition cannot say."""

_CAREFUL: ToolOptions = {"effect": Effect.WRITE, "idempotency": Idempotency.NONE}
"""A framework tool says nothing of its side effects: it is taken to write, and never
to be re-run blindly, unless its options say otherwise (a policy may only make a
tool more careful, so the code's default must not be the least careful one)."""

Invocation = Callable[[dict[str, Any]], Any]
"""The framework's own call of a tool, given the arguments the gate runs it with."""

_invocation: contextvars.ContextVar[tuple[str, Invocation] | None] = (
    contextvars.ContextVar("agent_gate_framework_invocation", default=None)
)


class _Dispatcher:
    """The function the gate runs for a framework's tool: that framework's own call."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    async def __call__(self, **judged: Any) -> Any:
        # The judged arguments are those of the invocation set below, unless a person
        # edited the call before approving it (``Gate.approve(edit=...)``): then they
        # are the edited version, and the framework's call is made with them.
        held = _invocation.get()
        if held is None or held[0] != self.__name__:
            raise GateUsageError(
                f"tool {self.__name__!r} belongs to an agent framework and runs only "
                "inside that framework's run (through its agent_gate adapter)"
            )
        result = held[1](judged)
        if inspect.isawaitable(result):
            result = await result
        return result


@contextmanager
def invoking(name: str, run: Invocation) -> Iterator[None]:
    """Within this block, the gate running ``name`` runs ``run`` (sync or async) with
    the arguments it judged: the framework's own, or a person's edited version."""
    token = _invocation.set((name, run))
    try:
        yield
    finally:
        _invocation.reset(token)


def register(
    gate: Gate,
    name: str,
    schema: Mapping[str, Any],
    description: str | None,
    options: ToolOptionsByName,
) -> None:
    """Register a framework's tool in the gate under the framework's own schema, once.

    Seeing the same tool again with the same schema is a no-op (a framework lists
    its tools at every step); another schema, or a tool of that name the
    application registered with its own function, is a ``ToolDefinitionError``:
    the gate would judge calls against a schema the model was not shown.
    """
    existing = gate.tools.get(name)
    if existing is not None:
        if not isinstance(existing.fn, _Dispatcher):
            raise ToolDefinitionError(
                f"tool {name!r} is already registered in the gate with its own function"
            )
        if dict(existing.spec.schema) != dict(schema):
            raise ToolDefinitionError(
                f"tool {name!r} changed its schema since the gate registered it"
            )
        return
    chosen: ToolOptions = {**_CAREFUL, "description": description, **options.get(name, {})}
    gate.tools.add(ToolSpec.build(name, schema=dict(schema), **chosen), _Dispatcher(name))


def check_options(options: ToolOptionsByName, names: set[str]) -> None:
    """Options naming no tool of the framework's are a typo: refuse them early."""
    unknown = sorted(set(options) - names)
    if unknown:
        raise ToolDefinitionError(
            f"options name tools the framework does not have: {', '.join(unknown)}"
        )


def approve_waiting(
    gate: Gate, outcome: Outcome, by: str, args_hash: str | None = None
) -> Refusal | None:
    """Record the approval a person gave through the framework for a waiting call.

    It is the one approval of the call in the ledger, bound to the arguments' and the
    policy's hashes as ``agent-gate approve`` binds it; the next ``execute`` consumes
    it and runs the call. ``args_hash``: the hash of the arguments the person was
    shown, which the ledger holds the call to (``AnswerMismatch`` if they differ).
    Returns why it could not be recorded, if so (the policy's approvers do not
    include ``by``): the call then goes on waiting.
    """
    try:
        gate.approve(outcome.call_id, by=by, task_id=outcome.task_id, args_hash=args_hash)
    except ApprovalRefused:
        return refusal(replace(outcome, code=R.APPROVAL_REFUSED, reason=None))
    except NotAwaitingApproval:
        pass  # answered meanwhile (another worker ran or denied it): execute reports it
    return None


@dataclass(frozen=True, slots=True)
class FrameworkAnswer:
    """A person's answer to one call, as a framework carried it back: the call is
    named by its id, never by its place among the calls that wait."""

    call_id: str
    approved: bool
    by: str
    args_hash: str | None = None
    """The hash of the arguments the person was shown (None: the framework shows
    none, and its own call id is all that binds the answer)."""
    reason: str | None = None
    task_id: str | None = None
    """The task of the call shown (None: the framework's run names it alone)."""


def record_answers(gate: Gate, task_id: str, answers: Sequence[FrameworkAnswer]) -> list[str]:
    """Record each answer for the call it names, in task ``task_id``.

    All are checked before any is written: an answer naming a call the task does not
    have, a call of another task, or a call that no longer waits (unless this same
    answer was already recorded for it: a framework replays the answers it was given)
    refuses the whole lot (``UnmatchedAnswer``); one carrying the hash of other
    arguments than the call's, ``AnswerMismatch``. Messages name the answers by their
    place, and their call ids only where printable. Each is then written with its
    hash, which the ledger compares again inside the answer's own transaction; an
    approver the policy refuses is ``ApprovalRefused``, as from ``Gate.approve``.
    Returns the ids of the calls that were waiting and now hold their answer.
    """
    problems: list[str] = []
    mismatched: list[str] = []
    waiting: list[FrameworkAnswer] = []
    for place, given in enumerate(answers, 1):
        details = gate.ledger.call_details(task_id, given.call_id, max_shown=0)
        where = f"answer {place} (call {safe_name(given.call_id)})"
        if given.task_id is not None and given.task_id != task_id:
            problems.append(f"{where} was given for a call of another task")
        elif details is None:
            problems.append(f"{where} names no call of this task")
        elif given.args_hash is not None and given.args_hash != details.call.args_hash:
            mismatched.append(f"{where} was given for other arguments than the call's")
        elif details.call.state is CallState.AWAITING_APPROVAL:
            waiting.append(given)
        elif not _given_before(given, details.approvals):
            problems.append(f"{where}: the call is {details.call.state.value}, not waiting")
    if problems or mismatched:
        error = UnmatchedAnswer if problems else AnswerMismatch
        raise error("answer refused, nothing recorded: " + "; ".join(problems + mismatched))
    for given in waiting:
        try:
            if given.approved:
                gate.approve(given.call_id, by=given.by, reason=given.reason, task_id=task_id,
                             args_hash=given.args_hash)
            else:
                gate.deny(given.call_id, by=given.by, reason=given.reason, task_id=task_id,
                          args_hash=given.args_hash)
        except NotAwaitingApproval:
            # Answered meanwhile, by another worker or person: fine only if so.
            details = gate.ledger.call_details(task_id, given.call_id, max_shown=0)
            if details is None or not _given_before(given, details.approvals):
                raise UnmatchedAnswer(
                    f"call {safe_name(given.call_id)} was answered otherwise meanwhile; "
                    "this answer was not recorded"
                ) from None
    return [given.call_id for given in waiting]


def shown(rec: CallRecord) -> dict[str, Any]:
    """What a person is shown of a waiting call to answer it: its ids, tool, arguments
    as recorded (redacted fields as their stand-ins) and their hash, which the answer
    carries back (``FrameworkAnswer.args_hash``)."""
    return {
        "task_id": rec.task_id,
        "call_id": rec.call_id,
        "tool": rec.tool,
        "arguments": dict(rec.arguments) if isinstance(rec.arguments, Mapping) else None,
        "args_hash": rec.args_hash,
    }


def _given_before(given: FrameworkAnswer, answers: Sequence[ApprovalRecord]) -> bool:
    verdict = APPROVED if given.approved else DENIED
    return any(a.verdict == verdict and a.decided_by == given.by.strip() for a in answers)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a call did not (yet) give the model a result, and the text the model reads.

    ``reason_id`` is stable (a ``ReasonCode`` value, or the state's name): an
    application matches on it. ``text`` is what the gate renders for every provider
    (``render.tool_output``): the state, whether it ran, the reason id, and a fixed
    sentence in place of the policy's or an operator's own reasons.
    """

    reason_id: str
    state: CallState
    call_id: str
    text: str

    @property
    def waiting(self) -> bool:
        return self.state is CallState.AWAITING_APPROVAL


def input_text(text: str, judged: Mapping[str, Any]) -> str:
    """The framework's argument text to invoke a tool with: its own ``text`` when the
    gate runs those arguments, else the JSON of the ones it runs (a person's edit)."""
    try:
        same = json.loads(text) == dict(judged)
    except ValueError:
        same = False
    return text if same else json.dumps(dict(judged), ensure_ascii=False)


def model_result(outcome: Outcome) -> Any:
    """What a framework hands the model for a call that succeeded: the tool's result,
    or, for a call a person edited before approving, the text that also names the
    arguments it ran with (``render.tool_output``): the model must not believe it
    sent what ran."""
    return tool_output(outcome) if outcome.edited else outcome.result


def refusal(outcome: Outcome) -> Refusal | None:
    """Why ``outcome`` gives the model no result (None: it succeeded)."""
    if outcome.state is CallState.SUCCEEDED:
        return None
    reason_id = outcome.code or outcome.state.value
    return Refusal(reason_id, outcome.state, outcome.call_id, tool_output(outcome))
