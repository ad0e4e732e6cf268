"""An outcome as each provider's API expects a tool result back.

The text is explicit when nothing ran (rejected, waiting, in doubt), so the model
is never handed silence it could read as success. It names why by the stable
reason id (``reason_id``, a ``ReasonCode``); where the why is the policy's or an
operator's (its rules, its reasons, who decided), the model reads a fixed
sentence instead of it: policy internals are for the audit trail, not the model.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agent_gate.errors import GateUsageError
from agent_gate.gate.mcp_approval import is_approval_name
from agent_gate.ledger.reasons import ReasonCode as R
from agent_gate.ledger.states import CallState
from agent_gate.privacy.results import RESULT_UNSTORABLE

__all__ = [
    "EDITED_NOTE", "PROVIDERS", "Rendered", "approval_response", "edited_note",
    "model_reason", "render_tool_result", "tool_output",
]


class Rendered(Protocol):
    """What rendering reads of a call's outcome; ``outcome.Outcome`` is one.

    A shape and not the class: ``Outcome`` renders itself through this module, so
    naming the class here would close a circle (render -> outcome -> render) and
    neither could be read or tested without the other.
    """

    @property
    def call_id(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def state(self) -> CallState: ...
    @property
    def code(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def result(self) -> Any: ...
    @property
    def error(self) -> Mapping[str, Any] | None: ...
    @property
    def result_omitted(self) -> bool: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def edited(self) -> tuple[str, ...]: ...
    @property
    def arguments(self) -> Mapping[str, Any] | None: ...

_FIXED_REASONS: dict[str, str] = {
    R.POLICY_DENIED: "the policy does not allow this call; it was not run",
    R.AWAITING_APPROVAL: "this call waits for a person's approval; it has not run",
    R.DENIED_BY_OPERATOR: "a person denied this call; it was not run",
    R.APPROVED: "a person approved this call",
    R.APPROVAL_REFUSED: "the approval given is not one the policy accepts; the call still waits",
    R.ARGUMENTS_SEALED: "this call cannot be decided here; it has not run",
    R.ARGUMENTS_CHANGED: "the recorded arguments changed after the decision; it was not run",
    R.CONFLICT: "this call id was already used for another call; it was not run",
}
"""Reason ids whose recorded text is the policy's or an operator's, and what the
model reads instead."""


def model_reason(outcome: Rendered) -> str | None:
    """Why, as the model may read it: a fixed sentence for a policy's or operator's
    decision, the recorded reason otherwise (schema errors, tool errors: already
    free of argument values)."""
    if outcome.code in _FIXED_REASONS:
        return _FIXED_REASONS[outcome.code]
    return outcome.reason


EDITED_NOTE = ("a person changed these argument fields before approving the call; "
               "it runs with these arguments, not the ones you sent")
"""What the model reads beside the result of a call an approver edited."""


def edited_note(outcome: Rendered) -> dict[str, Any]:
    """The arguments an edited call runs with, as the model is told them: the stored
    form (a field the policy seals stays its stand-in), the fields changed."""
    return {"fields": list(outcome.edited), "arguments": outcome.arguments,
            "note": EDITED_NOTE}


def tool_output(outcome: Rendered) -> str:
    """Text the model reads as the tool's result; explicit when nothing ran, and
    naming the arguments it ran with when a person edited them (``edited``)."""
    unstorable = outcome.code == RESULT_UNSTORABLE
    succeeded = outcome.state is CallState.SUCCEEDED
    if succeeded and not outcome.result_omitted and not unstorable:
        if outcome.edited:
            return json.dumps({"result": outcome.result, "edited": edited_note(outcome)},
                              ensure_ascii=False, sort_keys=True)
        if isinstance(outcome.result, str):
            return outcome.result
        # Keys sorted, as the ledger keeps them: the text a replay renders from the
        # stored result is the text this run rendered (the next turn is the same).
        return json.dumps(outcome.result, ensure_ascii=False, sort_keys=True)
    executed = outcome.state.ran
    body: dict[str, Any] = {
        "status": outcome.state.value,
        "executed": "unknown" if executed is None else executed,
    }
    if succeeded:
        body["note"] = "the tool succeeded; its result was too large to keep"
        if unstorable:
            body["note"] = "the tool succeeded; its result has no JSON form to show"
            body["result"] = outcome.result
    if outcome.error:
        body["error"] = dict(outcome.error)
    if outcome.code and not succeeded:
        body["reason_id"] = outcome.code
    reason = model_reason(outcome)
    if reason:
        body["reason"] = reason
    if outcome.edited:
        body["edited"] = edited_note(outcome)
    if outcome.state is CallState.IN_DOUBT:
        body["note"] = (
            "it is unknown whether this call took effect; it will not be retried "
            "automatically. Do not assume it succeeded or repeat it."
        )
    return json.dumps(body, ensure_ascii=False)


def approval_response(outcome: Rendered) -> dict[str, Any]:
    """The ``mcp_approval_response`` answering a hosted MCP approval request's outcome
    (``mcp_approval``): approved only when the gate recorded the answer ``succeeded``;
    otherwise denied with the stable reason id (never the policy's text)."""
    item: dict[str, Any] = {
        "type": "mcp_approval_response",
        "approval_request_id": outcome.call_id,
        "approve": outcome.state is CallState.SUCCEEDED,
    }
    if not item["approve"]:
        item["reason"] = outcome.code or outcome.state.value
    return item


def _openai_responses(outcome: Rendered) -> dict[str, Any]:
    if is_approval_name(outcome.tool):
        return approval_response(outcome)
    output = tool_output(outcome)
    return {"type": "function_call_output", "call_id": outcome.call_id, "output": output}


def _openai_chat(outcome: Rendered) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": outcome.call_id, "content": tool_output(outcome)}


def _anthropic(outcome: Rendered) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": outcome.call_id,
        "content": tool_output(outcome),
        "is_error": outcome.is_error,
    }


def _gemini(outcome: Rendered) -> dict[str, Any]:
    key = "error" if outcome.is_error else "result"
    text = tool_output(outcome)
    try:
        payload: Any = json.loads(text)
    except ValueError:
        payload = text
    response = {"id": outcome.call_id, "name": outcome.tool, "response": {key: payload}}
    return {"functionResponse": response}


_RENDERERS: dict[str, Callable[[Rendered], dict[str, Any]]] = {
    "openai-responses": _openai_responses,
    "openai-chat": _openai_chat,
    "anthropic": _anthropic,
    "gemini": _gemini,
}
PROVIDERS = tuple(sorted(_RENDERERS))
"""The protocols a tool result can be rendered for."""


def render_tool_result(outcome: Rendered, provider: str) -> dict[str, Any]:
    """The message/block that answers ``outcome``'s call in ``provider``'s protocol."""
    try:
        renderer = _RENDERERS[provider]
    except KeyError:
        raise GateUsageError(
            f"no tool-result format for provider {provider!r}; known: {', '.join(PROVIDERS)}"
        ) from None
    return renderer(outcome)
