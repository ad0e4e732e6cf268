"""OpenAI Responses: hosted shell calls, programs, and the calls a program waits for.

A ``shell_call`` in a hosted container and a ``program`` (programmatic tool
calling) are the platform's to run; a ``function_call`` a program makes is ours,
and its arguments are final at its ``output_item.done`` although its status stays
``in_progress`` (the program is suspended until the output comes back).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.accumulate import Accumulator, stream_calls
from agent_gate.calls import TerminalKind, ToolCall
from agent_gate.providers import (
    ProviderToolCall,
    StreamAnomaly,
    StreamEvent,
    ToolCallArgumentsDone,
    ToolCallStarted,
    TurnDelta,
    TurnPart,
    adapter_for,
)

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "transcripts" / "openai_responses"

HOSTED_ENV = {"type": "container_reference", "container_id": "cntr_1"}
PROGRAM_CALLER = {"type": "program", "caller_id": "call_prog"}
EMAIL_ARGS = '{"to": "ops@example.com", "subject": "report", "body": "done"}'


def item_events(index: int, added: dict[str, Any], done: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        {"type": "response.output_item.done", "output_index": index, "item": done},
    ]


def mixed_response() -> list[dict[str, Any]]:
    """A hosted shell call and its output, a program, and the write the program calls."""
    shell = {
        "type": "shell_call",
        "id": "sh_1",
        "call_id": "call_sh",
        "action": {"commands": ["ls /mnt/data"]},
        "environment": HOSTED_ENV,
        "status": "in_progress",
    }
    output = {
        "type": "shell_call_output",
        "id": "sho_1",
        "call_id": "call_sh",
        "output": [],
        "status": "in_progress",
    }
    program = {
        "type": "program",
        "id": "prog_1",
        "call_id": "call_prog",
        "code": "await tools.send_email({})",
        "fingerprint": "fp_1",
    }
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_mail",
        "name": "send_email",
        "caller": PROGRAM_CALLER,
        "status": "in_progress",
    }
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
        *item_events(0, shell, {**shell, "status": "completed"}),
        {
            "type": "response.shell_call_command.added",
            "output_index": 0,
            "command_index": 0,
            "command": "ls /mnt/data",
        },
        *item_events(1, output, {**output, "status": "completed"}),
        {
            "type": "response.shell_call_output_content.delta",
            "output_index": 1,
            "item_id": "sho_1",
            "command_index": 0,
            "delta": {"stdout": "a.csv\n"},
        },
        *item_events(2, program, program),
        {
            "type": "response.output_item.added",
            "output_index": 3,
            "item": {**call, "arguments": ""},
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 3,
            "delta": EMAIL_ARGS,
        },
        {
            "type": "response.output_item.done",
            "output_index": 3,
            "item": {**call, "arguments": EMAIL_ARGS},
        },
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
    ]
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def counting_tools(ran: list[str]) -> ToolRegistry:
    """send_email, plus tools named like the hosted items: none of those may ever run."""
    tools = ToolRegistry()
    email = {
        "type": "object",
        "properties": {
            "to": {"type": "string"},
            "subject": {"type": "string"},
            "body": {"type": "string"},
        },
        "required": ["to", "subject", "body"],
        "additionalProperties": False,
    }
    anything = {"type": "object"}

    @tools.tool(schema=email, effect="write", idempotency="none")
    def send_email(to: str, subject: str, body: str) -> dict[str, Any]:
        ran.append("send_email")
        return {"queued": True}

    @tools.tool(name="shell_call", schema=anything, effect="write", idempotency="none")
    def shell_call(**_: Any) -> dict[str, Any]:
        ran.append("shell_call")
        return {}

    @tools.tool(name="program", schema=anything, effect="write", idempotency="none")
    def program(**_: Any) -> dict[str, Any]:
        ran.append("program")
        return {}

    return tools


def test_only_the_program_invoked_call_runs_once_and_a_replay_runs_nothing(db_url: str) -> None:
    ran: list[str] = []
    with Gate(counting_tools(ran), db_url) as gate:
        first = gate.run(mixed_response(), task_id="t", provider="openai-responses")
        assert first.terminal is not None and first.terminal.kind is TerminalKind.COMPLETED
        assert [(o.call_id, o.tool, o.state, o.replayed) for o in first.outcomes] == [
            ("call_mail", "send_email", CallState.SUCCEEDED, False)
        ]
        assert ran == ["send_email"]
        assert not first.anomalies
        second = gate.run(mixed_response(), task_id="t", provider="openai-responses")
        assert [(o.call_id, o.state, o.replayed) for o in second.outcomes] == [
            ("call_mail", CallState.SUCCEEDED, True)
        ]
        assert ran == ["send_email"]
        assert [r.call_id for r in gate.ledger.calls("t")] == ["call_mail"]


# -- the adapter's rules, one event at a time ------------------------------------------


class Driver:
    def __init__(self) -> None:
        self.adapter = adapter_for("openai-responses")
        self.index = 0

    def __call__(self, event: dict[str, Any]) -> list[StreamEvent]:
        out = self.adapter.translate(self.adapter.decode(event, self.index), self.index)
        self.index += 1
        # The turn's pieces are tested in tests/gate/test_next_input.py.
        return [e for e in out if not isinstance(e, TurnPart | TurnDelta)]


def added(item: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


def done(item: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return {"type": "response.output_item.done", "output_index": index, "item": item}


def shell_item(environment: object) -> dict[str, Any]:
    item = {"type": "shell_call", "id": "sh_9", "call_id": "call_9", "action": {"commands": []}}
    if environment is not None:
        item["environment"] = environment
    return {**item, "status": "completed"}


@pytest.mark.parametrize("env_type", ["container_reference", "container_auto"])
def test_a_hosted_shell_call_is_provider_executed_under_its_call_id(env_type: str) -> None:
    drive = Driver()
    out = drive(added(shell_item({"type": env_type, "container_id": "c"})))
    assert out == [ProviderToolCall("call_9", "shell_call", "shell_call", 0)]


@pytest.mark.parametrize("environment", [{"type": "local"}, None, "container_reference"])
def test_a_shell_call_for_a_local_or_unnamed_environment_is_an_unsupported_client_call(
    environment: object,
) -> None:
    out = Driver()(added(shell_item(environment)))
    assert out == [
        ToolCallStarted("call_9", "shell_call", 0, "shell_call"),
        StreamAnomaly("unsupported_call_type", ("call_9",)),
    ]


@pytest.mark.parametrize(
    "itype",
    ["shell_call_output", "apply_patch_call_output", "program_output", "function_call_output"],
)
def test_an_output_item_reusing_a_call_id_starts_no_call(itype: str) -> None:
    item = {"type": itype, "id": "out_9", "call_id": "call_9", "status": "completed"}
    assert Driver()(added(item, 1)) == []
    assert Driver()(done(item, 1)) == []


def test_a_program_item_is_provider_executed() -> None:
    item = {"type": "program", "id": "prog_9", "call_id": "call_p", "code": "", "fingerprint": "f"}
    assert Driver()(done(item)) == [ProviderToolCall("call_p", "program", "program", 0)]


def function_call(status: str, caller: object) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": "fc_9",
        "call_id": "call_9",
        "name": "send_email",
        "arguments": "{}",
        "status": status,
        "caller": caller,
    }


def test_a_program_invoked_call_is_complete_at_its_done_while_in_progress() -> None:
    out = Driver()(done(function_call("in_progress", PROGRAM_CALLER)))
    assert out[-1] == ToolCallArgumentsDone("call_9", "{}")


def test_a_program_invoked_custom_call_is_complete_at_its_done_while_in_progress() -> None:
    item = {
        "type": "custom_tool_call",
        "id": "ctc_9",
        "call_id": "call_9",
        "name": "run_sql",
        "input": "SELECT 1",
        "status": "in_progress",
        "caller": PROGRAM_CALLER,
    }
    assert Driver()(done(item))[-1] == ToolCallArgumentsDone("call_9", "SELECT 1")


@pytest.mark.parametrize(
    ("status", "caller"),
    [
        ("incomplete", PROGRAM_CALLER),
        ("in_progress", {"type": "direct"}),
        ("in_progress", None),
        ("in_progress", "program"),
        ("in_progress", {"type": "programmatic"}),
    ],
)
def test_every_other_done_without_completed_status_completes_nothing(
    status: str, caller: object
) -> None:
    out = Driver()(done(function_call(status, caller)))
    assert not any(isinstance(event, ToolCallArgumentsDone) for event in out)


@pytest.mark.parametrize("name", ["hosted_shell_call", "apply_patch_call", "local_shell_call"])
def test_hosted_tool_event_families_are_counted_progress_not_unknown(name: str) -> None:
    acc = Accumulator("openai-responses")
    list(stream_calls([(TRANSCRIPTS / f"{name}.sse").read_bytes()], acc))
    stats = acc.stats
    assert str(acc.terminal) == "completed"
    assert stats.unknown_events == 0 and stats.unknown_types == {}
    assert stats.progress_events == stats.events


@pytest.mark.parametrize(
    ("first", "then"),
    [(None, HOSTED_ENV), (HOSTED_ENV, {"type": "local"}), ({"type": "local"}, HOSTED_ENV)],
)
def test_a_shell_call_whose_environment_changes_between_added_and_done_never_runs(
    first: object, then: object
) -> None:
    acc = Accumulator("openai-responses")
    released: list[ToolCall] = []
    for n, event in enumerate(
        [
            added(shell_item(first)),
            done(shell_item(then)),
            {"type": "response.completed", "response": {"status": "completed"}},
        ]
    ):
        released += acc.feed({**event, "sequence_number": n})
    released += acc.close()
    (call,) = released
    assert call.call_id == "call_9" and not call.complete
