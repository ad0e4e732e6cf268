"""A gate's ``Outcome`` as the ``tools/call`` result an MCP client reads.

A call that ran returns the upstream's own result, as it came back the first time
(from the ledger when the call is answered again). Every other outcome is a tool
result with ``isError`` set and one sentence a model can act on: denied (with the
rule ids and the policy's reason), waiting for approval (with the call id, the task
and the command that approves it), in doubt, failed; and a call the proxy could not
deliver because its upstream is down (``unavailable``: not run, retry later). A
call whose tool reported an error (``isError``) is ``failed``: the request that ran
it gets the upstream's result as it came; a repeat gets the error text the ledger
kept. The same facts travel as ``_meta`` under ``agent-gate/*`` keys for programs.
"""

from __future__ import annotations

import json
from typing import Any

import mcp.types as mt
from pydantic import ValidationError

from agent_gate.gate import Outcome
from agent_gate.gate.render import edited_note
from agent_gate.integrations.mcp.upstream import reported_result
from agent_gate.ledger.states import CallState

__all__ = ["UNAVAILABLE_META", "result_of", "unavailable"]

UNAVAILABLE_META = "agent-gate/upstream-unavailable"
"""``_meta`` key, true on the result of a call refused because the upstream is down."""


def _text(message: str, meta: dict[str, Any]) -> mt.CallToolResult:
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=message)], is_error=True, _meta=meta
    )


def _meta(outcome: Outcome, rule_ids: tuple[str, ...]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "agent-gate/call-id": outcome.call_id,
        "agent-gate/task": outcome.task_id,
        "agent-gate/state": outcome.state.value,
        "agent-gate/replayed": outcome.replayed,
    }
    if outcome.duplicate_of:
        meta["agent-gate/duplicate-of"] = outcome.duplicate_of
    if outcome.code:
        meta["agent-gate/code"] = outcome.code
    if rule_ids:
        meta["agent-gate/rule-ids"] = list(rule_ids)
    return meta


def _ran(outcome: Outcome, meta: dict[str, Any]) -> mt.CallToolResult:
    if outcome.result_omitted:
        return _text(
            f"call {outcome.call_id} ran already; its result was too large to keep, so it "
            "cannot be shown again", meta,
        )
    try:
        result = mt.CallToolResult.model_validate(outcome.result)
    except ValidationError:
        return _text(f"call {outcome.call_id} ran; its stored result is not a tool result", meta)
    result.meta = {**(result.meta or {}), **meta}
    if outcome.edited:
        # The client's model sent other arguments: it reads the ones that ran.
        note = edited_note(outcome)
        result.meta["agent-gate/edited"] = note
        result.content = [*result.content, mt.TextContent(
            type="text", text="agent-gate: " + json.dumps(note, ensure_ascii=False,
                                                          sort_keys=True))]
    return result


def _failed(outcome: Outcome, meta: dict[str, Any]) -> mt.CallToolResult:
    """The upstream's own ``isError`` result for the request that ran it; afterwards the
    error as the ledger keeps it (its text, bounded and scrubbed)."""
    reported = reported_result(outcome.exception) if not outcome.replayed else None
    if reported is not None:
        try:
            result = mt.CallToolResult.model_validate(reported)
        except ValidationError:
            pass
        else:
            result.meta = {**(result.meta or {}), **meta}
            return result
    error = outcome.error or {}
    said = error.get("message") or error.get("type") or "an error"
    return _text(f"call {outcome.call_id} failed upstream and will not be run again: {said}",
                 meta)


def result_of(outcome: Outcome, rule_ids: tuple[str, ...] = ()) -> mt.CallToolResult:
    """The ``tools/call`` result for ``outcome`` (``rule_ids``: the deciding rules)."""
    meta = _meta(outcome, rule_ids)
    call, task = outcome.call_id, outcome.task_id
    rules = f" (rule {', '.join(rule_ids)})" if rule_ids else ""
    match outcome.state:
        case CallState.SUCCEEDED:
            return _ran(outcome, meta)
        case CallState.AWAITING_APPROVAL:
            held = outcome.duplicate_of or call
            same = f" (the same call as {held}, by its dedupe key)" if held != call else ""
            return _text(
                f"call {call} of task {task}{same} waits for approval{rules}: "
                f"{outcome.reason}. It has not run. Once approved (agent-gate approve "
                f"{held} --task {task} --by NAME), send the same call again: it runs once "
                "and returns its result.",
                meta,
            )
        case CallState.REJECTED | CallState.INCOMPLETE:
            return _text(f"call {call} was not run{rules}: {outcome.reason}", meta)
        case CallState.IN_DOUBT:
            return _text(
                f"call {call} may or may not have run ({outcome.reason}); it will not be run "
                f"again until an operator resolves it (agent-gate resolve {call} --task {task})",
                meta,
            )
        case CallState.FAILED:
            return _failed(outcome, meta)
        case _:
            return _text(
                f"call {call} is {outcome.state.value} ({outcome.reason}); send it again later "
                "to get its result", meta,
            )


def unavailable(tool: str, why: str, call_id: str | None = None) -> mt.CallToolResult:
    """A call not run because the upstream cannot be reached now (``why``): retryable.

    Nothing of it is recorded as run or failed: a call refused before it was
    recorded has no row, and one whose request never left is runnable again
    (``call_id``), so the same call sent later runs once the upstream is back."""
    meta: dict[str, Any] = {UNAVAILABLE_META: True, "agent-gate/retry": True}
    if call_id is not None:
        meta["agent-gate/call-id"] = call_id
    return _text(
        f"upstream unavailable, retry: {tool!r} was not run ({why}). Send the same call "
        "again in a moment; it runs once the upstream is back.", meta,
    )
