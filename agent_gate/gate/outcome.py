"""What the gate reports: one ``Outcome`` per call, a ``RunResult`` per response,
a ``Blocker`` per call that stands between a task and its end.

These are values that cross the gate's boundary (to the agent, the CLI, an
operator); they are built from ledger rows here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agent_gate.gate import render
from agent_gate.gate.next_input import next_input, tool_results
from agent_gate.ledger.states import CallState

if TYPE_CHECKING:
    from agent_gate.accumulate import Anomaly
    from agent_gate.calls import Terminal
    from agent_gate.ledger.records import CallRecord
    from agent_gate.turn import Turn

__all__ = ["Blocker", "Outcome", "RunResult", "outcome_of"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What happened to one call, as the agent and the operator need to know it.

    ``replayed`` is True when this outcome was read from the ledger rather than
    produced now (the tool was not called by this invocation). ``result`` is the
    tool's return value as JSON, as the ledger stored it: fields the policy redacts
    (``redact_result``) as stand-ins and the call's redacted argument values cut out
    of every string; after a replay ``None`` with ``result_omitted`` when it was too
    large to keep; a ``{"result_unstorable": ...}`` stand-in (code
    ``result_unstorable``) when it had no JSON form (NaN, bytes, a lone surrogate).
    """

    task_id: str
    call_id: str
    tool: str
    state: CallState
    replayed: bool
    code: str | None = None
    reason: str | None = None
    result: Any = None
    error: Mapping[str, Any] | None = None
    attempt: int = 0
    duplicate_of: str | None = None
    result_omitted: bool = False
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    arguments: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The call's arguments as the ledger recorded them: the value the policy judged,
    with the fields it redacts as their stand-ins (never unsealed); None when the
    call never had an argument object (unknown tool, text that is not an object)."""
    edited: tuple[str, ...] = ()
    """Argument paths a person edited before approving: the call runs (ran) with
    ``arguments``, not what the agent sent, and every rendering for the model says so."""

    @property
    def ok(self) -> bool:
        return self.state is CallState.SUCCEEDED

    @property
    def ran(self) -> bool | None:
        """Did the tool run (at any time)? ``None``: unknown (in doubt, running)."""
        return self.state.ran

    @property
    def is_error(self) -> bool:
        return self.state is not CallState.SUCCEEDED

    def to_dict(self) -> dict[str, Any]:
        """The JSON form ``agent-gate replay --json`` prints (plus code and attempt)."""
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "state": self.state.value,
            "replayed": self.replayed,
            "reason": self.reason,
            "code": self.code,
            "attempt": self.attempt,
            **({"duplicate_of": self.duplicate_of} if self.duplicate_of else {}),
            **({"edited": list(self.edited)} if self.edited else {}),
        }

    # The model-facing forms live in ``render``; these keep them one attribute away.

    def tool_output(self) -> str:
        """Text the model reads as the tool's result; explicit when nothing ran."""
        return render.tool_output(self)

    def to_openai_responses(self) -> dict[str, Any]:
        return render.render_tool_result(self, "openai-responses")

    def to_openai_chat(self) -> dict[str, Any]:
        return render.render_tool_result(self, "openai-chat")

    def to_anthropic(self) -> dict[str, Any]:
        return render.render_tool_result(self, "anthropic")

    def to_gemini(self) -> dict[str, Any]:
        return render.render_tool_result(self, "gemini")


@dataclass(frozen=True, slots=True)
class RunResult:
    """Everything ``Gate.run`` saw: one outcome per tool call, and how the response ended."""

    outcomes: tuple[Outcome, ...]
    terminal: Terminal | None
    error: str | None = None
    """Set when the stream itself was abandoned (a limit, a decoding error)."""
    anomalies: tuple[Anomaly, ...] = ()
    provider: str | None = None
    """The wire protocol the events were read as: the one named, or the one
    ``provider="auto"`` detected (``auto`` if the stream never told)."""
    turn: Turn | None = field(default=None, compare=False, repr=False)
    """The assistant's turn as the stream delivered it (``agent_gate.turn``)."""

    def tool_results(self, provider: str) -> list[dict[str, Any]]:
        """Tool-result messages for every call, so no call is left dangling (a
        Gemini ``functionResponse`` names only an id the stream gave)."""
        return tool_results(self.turn, self.outcomes, provider)

    def next_input(self, provider: str) -> list[dict[str, Any]]:
        """The assistant's turn and the tool results, as ``provider``'s input items
        or messages to append for the next request (``agent_gate.gate.next_input``):
        fresh copies, safe to change. ``GateUsageError`` when the turn was not kept
        (over ``max_turn_chars``) or was streamed as another protocol."""
        return next_input(self.turn, self.outcomes, provider)


@dataclass(frozen=True, slots=True)
class Blocker:
    """A call that stands between a task and its completion, and what it needs."""

    call_id: str
    tool: str
    state: CallState
    needs: str
    """``approval``, ``resolution`` (in doubt), ``run`` (authorized or received: the
    next resume runs or decides it), ``nothing`` (running under a live lease) or
    ``none`` for ``incomplete`` calls, which never run (the model must ask again)."""
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "state": self.state.value}


def outcome_of(
    rec: CallRecord,
    *,
    replayed: bool,
    call_id: str | None = None,
    state: CallState | None = None,
    code: str | None = None,
    reason: str | None = None,
    duplicate_of: str | None = None,
    result: Any = None,
    exception: BaseException | None = None,
) -> Outcome:
    """The outcome a ledger row reports; ``state`` (with ``code``/``reason``) reports
    something other than the row's own state (a conflict, a wait) without its columns."""
    final = state or rec.state
    stored = rec.result if final is CallState.SUCCEEDED else None
    return Outcome(
        task_id=rec.task_id,
        call_id=call_id or rec.call_id,
        tool=rec.tool,
        state=final,
        replayed=replayed,
        code=str(code or rec.reason_code) if (code or rec.reason_code) else None,
        reason=reason if reason is not None else (rec.reason if state is None else None),
        result=result if result is not None else stored,
        error=rec.error if state is None else None,
        attempt=rec.attempt if state is None else 0,
        duplicate_of=duplicate_of,
        # The in-memory result of this run is whole even when the ledger kept a hash.
        result_omitted=rec.result_omitted and final is CallState.SUCCEEDED and result is None,
        exception=exception,
        arguments=rec.arguments,
        edited=rec.edited,
    )
