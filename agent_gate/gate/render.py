"""An outcome as each provider's API expects a tool result back.

The text is explicit when nothing ran (rejected, waiting, in doubt), so the model
is never handed silence it could read as success.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent_gate.errors import GateUsageError
from agent_gate.ledger.outcome_store import RESULT_UNSTORABLE
from agent_gate.ledger.states import CallState

if TYPE_CHECKING:
    from agent_gate.gate.outcome import Outcome

__all__ = ["PROVIDERS", "render_tool_result", "tool_output"]


def tool_output(outcome: Outcome) -> str:
    """Text the model reads as the tool's result; explicit when nothing ran."""
    unstorable = outcome.code == RESULT_UNSTORABLE
    succeeded = outcome.state is CallState.SUCCEEDED
    if succeeded and not outcome.result_omitted and not unstorable:
        if isinstance(outcome.result, str):
            return outcome.result
        return json.dumps(outcome.result, ensure_ascii=False)
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
    if outcome.reason:
        body["reason"] = outcome.reason
    if outcome.state is CallState.IN_DOUBT:
        body["note"] = (
            "it is unknown whether this call took effect; it will not be retried "
            "automatically. Do not assume it succeeded or repeat it."
        )
    return json.dumps(body, ensure_ascii=False)


def _openai_responses(outcome: Outcome) -> dict[str, Any]:
    output = tool_output(outcome)
    return {"type": "function_call_output", "call_id": outcome.call_id, "output": output}


def _openai_chat(outcome: Outcome) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": outcome.call_id, "content": tool_output(outcome)}


def _anthropic(outcome: Outcome) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": outcome.call_id,
        "content": tool_output(outcome),
        "is_error": outcome.is_error,
    }


def _gemini(outcome: Outcome) -> dict[str, Any]:
    key = "error" if outcome.is_error else "result"
    text = tool_output(outcome)
    try:
        payload: Any = json.loads(text)
    except ValueError:
        payload = text
    response = {"id": outcome.call_id, "name": outcome.tool, "response": {key: payload}}
    return {"functionResponse": response}


_RENDERERS: dict[str, Callable[[Outcome], dict[str, Any]]] = {
    "openai-responses": _openai_responses,
    "openai-chat": _openai_chat,
    "anthropic": _anthropic,
    "gemini": _gemini,
}
PROVIDERS = tuple(sorted(_RENDERERS))
"""The protocols a tool result can be rendered for."""


def render_tool_result(outcome: Outcome, provider: str) -> dict[str, Any]:
    """The message/block that answers ``outcome``'s call in ``provider``'s protocol."""
    try:
        renderer = _RENDERERS[provider]
    except KeyError:
        raise GateUsageError(
            f"no tool-result format for provider {provider!r}; known: {', '.join(PROVIDERS)}"
        ) from None
    return renderer(outcome)
