"""The turn the agent sends back: the assistant's turn and the tool results, as
each provider expects them appended to the conversation for the next request.

``RunResult.next_input(provider)`` is this module. The assistant's part is what
the stream delivered (``agent_gate.turn``): reasoning items and thinking blocks
with their ids, encrypted content and signatures, text, each call with the
arguments the model sent, hosted tools' items. The results are each call's
outcome as ``render`` renders it (one concept once), in the turn's call order,
so that every call sent back has its answer and no answer lacks its call:

* a call whose arguments never completed (``incomplete``: the response was cut
  in it) is left out with its result: the provider never finished it;
* a call the gate holds (approval) or rejected gets the result text the model
  should read, with its reason id and no policy internals (``render``);
* an OpenAI Responses ``mcp_approval_request`` is answered by an
  ``mcp_approval_response`` (``approve`` only when the gate allowed it; otherwise
  ``false`` with the reason id, see ``mcp_approval``);
* an OpenAI Responses client call of a kind agent-gate cannot run (computer use,
  a local shell) is left out with its result: an output the gate cannot give
  would misstate what happened.

Per provider:

* ``openai-responses``: the output items as ``response.output_item.done`` gave
  them, then one ``function_call_output`` / ``custom_tool_call_output`` /
  ``mcp_approval_response`` per call;
* ``openai-chat``: one ``assistant`` message (``content`` the text or null,
  ``tool_calls`` with each call's id, name and argument text), then one ``tool``
  message per call. A server that streamed ``reasoning_content`` (DeepSeek's
  thinking mode) gets it back on a message with tool calls, as DeepSeek's
  thinking-mode guide requires (it answers 400 without it, even when empty);
  on a message without calls it is left out (the older ``deepseek-reasoner``
  refused it there, newer models ignore it);
* ``anthropic``: one ``assistant`` message with every content block (thinking with
  its signature, redacted thinking, text, ``tool_use`` with its input, hosted
  tools' blocks and results), then one ``user`` message of ``tool_result`` blocks
  (``is_error`` where the call did not succeed);
* ``gemini``: one ``model`` content with every part (thought signatures kept),
  then one ``user`` content of ``functionResponse`` parts, each with its call's
  ``id`` only when the wire gave one (``tool_results`` follows the same rule).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent_gate.calls import CallStatus, ToolCall
from agent_gate.errors import GateUsageError
from agent_gate.gate.render import PROVIDERS, Rendered, approval_response, render_tool_result

if TYPE_CHECKING:
    from agent_gate.turn import Turn, TurnEntry

__all__ = ["next_input", "tool_results"]

Item = dict[str, Any]


def _object(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as an object, for protocols that send them back as one."""
    if call.arguments is not None:
        return dict(call.arguments)
    try:
        value = json.loads(call.raw_arguments or "{}")
    except (ValueError, RecursionError):  # not JSON, or nested beyond the parser
        return {}
    return value if isinstance(value, dict) else {}


_Pair = tuple["TurnEntry", "Rendered | None"]


def _calls(turn: Turn, outcomes: Mapping[str, Rendered]) -> list[_Pair]:
    """Each entry of the turn with its outcome; a call that never completed, or has
    no outcome, is left out (see the module docstring)."""
    kept: list[_Pair] = []
    for entry in turn.entries:
        if entry.call_id is None:
            kept.append((entry, None))
            continue
        outcome = outcomes.get(entry.call_id)
        call = entry.call
        if outcome is None or call is None or call.status is CallStatus.INCOMPLETE:
            continue
        kept.append((entry, outcome))
    return kept


def _turn_then_results(role: str, key: str, parts: list[Item], results: list[Item]) -> list[Item]:
    """The model's message with its parts, then one ``user`` message with every result:
    how both Anthropic (``content`` blocks) and Gemini (``parts``) take a turn back, so
    the shape is written once and only the names differ. Either message is left out
    when it has nothing to carry."""
    out: list[Item] = [{"role": role, key: parts}] if parts else []
    if results:
        out.append({"role": "user", key: results})
    return out


def _responses(pairs: list[_Pair]) -> list[Item]:
    items: list[Item] = []
    results: list[Item] = []
    for entry, outcome in pairs:
        part = copy.deepcopy(dict(entry.part))
        if outcome is None:
            items.append(part)
            continue
        kind = part.get("type")
        assert entry.call is not None
        if kind == "mcp_approval_request":
            results.append(approval_response(outcome))
        elif kind == "function_call":
            part.setdefault("arguments", entry.call.raw_arguments or "")
            results.append(render_tool_result(outcome, "openai-responses"))
        elif kind == "custom_tool_call":
            part.setdefault("input", entry.call.raw_arguments or "")
            result = render_tool_result(outcome, "openai-responses")
            results.append({**result, "type": "custom_tool_call_output"})
        else:
            continue  # a client call agent-gate cannot answer: neither item nor output
        items.append(part)
    return items + results


def _chat(pairs: list[_Pair]) -> list[Item]:
    text: str | None = None
    reasoning: str | None = None
    calls: list[Item] = []
    results: list[Item] = []
    for entry, outcome in pairs:
        if outcome is None:
            content = entry.part.get("content")
            text = (text or "") + content if isinstance(content, str) else text
            thought = entry.part.get("reasoning_content")
            reasoning = (reasoning or "") + thought if isinstance(thought, str) else reasoning
            continue
        assert entry.call is not None
        calls.append(
            {
                "id": entry.call.call_id,
                "type": "function",
                "function": {"name": entry.call.name, "arguments": entry.call.raw_arguments or ""},
            }
        )
        results.append(render_tool_result(outcome, "openai-chat"))
    if text is None and not calls:
        return []
    message: Item = {"role": "assistant", "content": text or None}
    if calls and reasoning is not None:
        # DeepSeek's thinking mode refuses (400) a tool-call turn sent back without
        # its reasoning_content, empty or not; a turn without calls goes back
        # without it (deepseek-reasoner refused it there, newer models ignore it).
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = calls
    return [message, *results]


def _anthropic(pairs: list[_Pair]) -> list[Item]:
    blocks: list[Item] = []
    results: list[Item] = []
    for entry, outcome in pairs:
        block = copy.deepcopy(dict(entry.part))
        if outcome is not None:
            assert entry.call is not None
            block["input"] = _object(entry.call)
            results.append(render_tool_result(outcome, "anthropic"))
        elif isinstance(block.get("input"), str):  # a hosted tool's streamed input
            try:
                block["input"] = json.loads(block["input"] or "{}")
            except ValueError:
                block["input"] = {}
        if block.get("type") == "text" and not block.get("text"):
            continue  # the API refuses empty text blocks
        blocks.append(block)
    return _turn_then_results("assistant", "content", blocks, results)


def _gemini_result(outcome: Rendered, wire_id: bool) -> Item:
    """A ``functionResponse`` with the call's id only when the wire gave that id:
    Gemini mostly sends calls without one, and agent-gate's stand-in
    (``<response>:<candidate>:<ordinal>``) is no id the model ever issued."""
    result = render_tool_result(outcome, "gemini")
    if not wire_id:
        result["functionResponse"].pop("id", None)
    return result


def _gemini_wire_ids(turn: Turn | None) -> set[str]:
    """The call ids the Gemini stream itself carried (none when no turn was kept)."""
    ids: set[str] = set()
    if turn is None or turn.provider != "gemini":
        return ids
    for entry in turn.entries:
        call = entry.part.get("functionCall") or entry.part.get("function_call")
        given = call.get("id") if isinstance(call, Mapping) else None
        if isinstance(given, str) and given and given == entry.call_id:
            ids.add(given)
    return ids


def tool_results(turn: Turn | None, outcomes: tuple[Rendered, ...], provider: str) -> list[Item]:
    """Each outcome's result in ``provider``'s form (``RunResult.tool_results``); for
    Gemini with the same id rule as ``next_input``: never an id the wire did not
    give (when the turn was not kept, none is known, so none is sent)."""
    if provider != "gemini":
        return [render_tool_result(outcome, provider) for outcome in outcomes]
    given = _gemini_wire_ids(turn)
    return [_gemini_result(outcome, outcome.call_id in given) for outcome in outcomes]


def _gemini(pairs: list[_Pair]) -> list[Item]:
    parts: list[Item] = []
    results: list[Item] = []
    for entry, outcome in pairs:
        part = copy.deepcopy(dict(entry.part))
        if outcome is not None:
            assert entry.call is not None
            key = "functionCall" if "functionCall" in part else "function_call"
            call = dict(part.get(key) or {"name": entry.call.name})
            call.setdefault("args", _object(entry.call))
            part[key] = call
            results.append(_gemini_result(outcome, call.get("id") == outcome.call_id))
        parts.append(part)
    return _turn_then_results("model", "parts", parts, results)


_BUILDERS: dict[str, Callable[[list[_Pair]], list[Item]]] = {
    "openai-responses": _responses,
    "openai-chat": _chat,
    "anthropic": _anthropic,
    "gemini": _gemini,
}
assert tuple(sorted(_BUILDERS)) == PROVIDERS


def next_input(turn: Turn | None, outcomes: tuple[Rendered, ...], provider: str) -> list[Item]:
    """The items or messages to append for the next request (module docstring)."""
    if provider not in _BUILDERS:
        raise GateUsageError(
            f"no next-turn format for provider {provider!r}; known: {', '.join(PROVIDERS)}"
        )
    if turn is None:
        raise GateUsageError("this result carries no turn (it was not read from a stream)")
    if turn.dropped is not None:
        raise GateUsageError(
            f"the assistant turn was not kept ({turn.dropped}): raise the bound, or "
            "build the next request from the tool results (RunResult.tool_results)"
        )
    if turn.provider != provider:
        raise GateUsageError(
            f"the turn was streamed as {turn.provider!r}; it goes back as that protocol, "
            f"not {provider!r}"
        )
    by_id = {outcome.call_id: outcome for outcome in outcomes}
    return _BUILDERS[provider](_calls(turn, by_id))
