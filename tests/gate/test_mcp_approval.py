"""Hosted MCP approval requests (OpenAI Responses) are calls the gate decides.

Each ``mcp_approval_request`` becomes a call ``mcp:<server_label>:<name>``; the
agent gets the ``mcp_approval_response`` to send back. Allowed means approve,
anything else means deny with a reason id, and nothing runs locally.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.calls import JSON_CALL_KINDS
from agent_gate.providers.events import MCP_APPROVAL
from agent_gate.sse import ServerSentEvent, SSEDecoder

TRANSCRIPT = Path(__file__).parents[1] / "transcripts" / "openai_responses"
REQUEST_ID = "mcpr_0a11ce5e00a1"
NAME = "mcp:deepwiki:ask_question"
ARGUMENTS = {
    "repoName": "modelcontextprotocol/modelcontextprotocol",
    "question": "What transports does the spec define?",
}

ALLOW = f"""
version: 1
tools:
  get_weather:
    effect: read
    rules:
      - {{id: weather, effect: allow}}
  "{NAME}":
    rules:
      - id: deepwiki-questions
        effect: allow
        reason: Questions about public repositories are fine.
"""

APPROVE = ALLOW.replace("effect: allow\n        reason", "effect: approve\n        reason")

DENY_ALL_MCP = """
version: 1
tools:
  get_weather:
    effect: read
    rules:
      - {id: weather, effect: allow}
"""


def events() -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    out = decoder.feed((TRANSCRIPT / "mcp_approval_request.sse").read_bytes())
    decoder.end()
    return out


@pytest.fixture
def tools() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    )
    def get_weather(city: str) -> dict[str, Any]:
        return {"city": city, "celsius": 21}

    return registry


def policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def request_of(gate: Gate, task_id: str = "t") -> tuple[Any, Any]:
    """Run the transcript; the result and the approval request's outcome."""
    result = gate.run(events(), task_id=task_id, provider="openai-responses")
    (request,) = [o for o in result.outcomes if o.call_id == REQUEST_ID]
    return result, request


def answer(result: Any) -> dict[str, Any]:
    (item,) = [i for i in result.next_input("openai-responses")
               if i["type"] == "mcp_approval_response"]
    return item


def test_an_allowed_request_is_approved_recorded_and_answered_once(
    db_url: str, tools: ToolRegistry, tmp_path: Path
) -> None:
    with Gate(tools, db_url, policy=policy(tmp_path, ALLOW)) as gate:
        first, request = request_of(gate)
        assert (request.tool, request.state, request.result) == (
            NAME, CallState.SUCCEEDED, {"approve": True}
        )
        assert dict(request.arguments or {}) == ARGUMENTS
        assert answer(first) == {
            "type": "mcp_approval_response", "approval_request_id": REQUEST_ID, "approve": True,
        }
        # With previous_response_id only the answers go back: tool_results has it too.
        assert answer(first) in first.tool_results("openai-responses")
        # The same stream again: the ledger answers, nothing is decided twice.
        again, replayed = request_of(gate)
        assert replayed.replayed and answer(again) == answer(first)
        audit = [a.event for a in gate.ledger.audit("t") if a.call_id == REQUEST_ID]
        assert audit.count("succeed") == 1 and audit[-1] == "seen_again"


@pytest.mark.parametrize(
    ("text", "reason"),
    [(DENY_ALL_MCP, "policy_denied"), (None, "unknown_tool")],
    ids=["policy-without-a-rule", "no-policy-undeclared"],
)
def test_a_request_nothing_allows_is_denied_with_a_reason_id_only(
    db_url: str, tools: ToolRegistry, tmp_path: Path, text: str | None, reason: str
) -> None:
    chosen = policy(tmp_path, text) if text is not None else None
    with Gate(tools, db_url, policy=chosen) as gate:
        result, request = request_of(gate)
    assert request.state is CallState.REJECTED and request.code == reason
    assert answer(result) == {
        "type": "mcp_approval_response", "approval_request_id": REQUEST_ID,
        "approve": False, "reason": reason,
    }
    # The other call of the batch ran as usual.
    assert [o.state for o in result.outcomes if o.tool == "get_weather"] == [CallState.SUCCEEDED]


def test_a_request_the_policy_sends_to_a_person_waits_and_is_answered_after_approval(
    db_url: str, tools: ToolRegistry, tmp_path: Path
) -> None:
    with Gate(tools, db_url, policy=policy(tmp_path, APPROVE)) as gate:
        held, request = request_of(gate)
        assert request.state is CallState.AWAITING_APPROVAL
        # Until a person decides, the model reads "not approved", with the reason id
        # and never the policy's own reason text.
        assert answer(held) == {
            "type": "mcp_approval_response", "approval_request_id": REQUEST_ID,
            "approve": False, "reason": "awaiting_approval",
        }
        assert "repositories" not in json.dumps(held.next_input("openai-responses"))
        gate.approve(REQUEST_ID, by="ana", task_id="t")
        (resumed,) = gate.resume("t")
        assert resumed.state is CallState.SUCCEEDED and resumed.result == {"approve": True}
        after = gate.run(events(), task_id="t", provider="openai-responses")
        assert answer(after)["approve"] is True


def test_the_approval_kind_carries_json_arguments() -> None:
    assert MCP_APPROVAL in JSON_CALL_KINDS  # spelled out twice; held equal here


def test_a_declared_name_gives_its_schema_and_its_function_never_runs(
    db_url: str, tools: ToolRegistry
) -> None:
    ran: list[dict[str, Any]] = []
    schema = {
        "type": "object",
        "properties": {"repoName": {"type": "string", "pattern": "^public/"}},
        "required": ["repoName"],
    }
    tools.register(lambda **kw: ran.append(kw), name=NAME, schema=schema)
    with Gate(tools, db_url) as gate:
        result, request = request_of(gate)
    assert request.state is CallState.REJECTED and request.code == "schema_invalid"
    assert answer(result)["reason"] == "schema_invalid"
    tools2 = ToolRegistry()
    tools2.register(lambda **kw: ran.append(kw), name=NAME, schema={"type": "object"})
    with Gate(tools2, db_url) as gate:
        allowed, _ = request_of(gate, "t2")
    assert answer(allowed)["approve"] is True
    assert ran == []  # approving is the answer; the declared function never runs


TOOLS_MODULE = """
from agent_gate import ToolRegistry

tools = ToolRegistry()


@tools.tool(schema={"type": "object", "properties": {"city": {"type": "string"}}})
def get_weather(city: str) -> dict:
    return {"city": city}
"""


def test_the_cli_replay_writes_the_answer_to_send_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from agent_gate.cli import main

    (tmp_path / "mcp_cli_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(main, [
        "replay", str(TRANSCRIPT / "mcp_approval_request.sse"), "--provider", "auto",
        "--task", "t", "--tools", "mcp_cli_tools", "--db", f"sqlite:///{tmp_path / 'l.db'}",
        "--json", "--next-input", str(tmp_path / "next.json"),
    ])
    assert out.exit_code == 4, out.output  # a call was rejected: the exit code says so
    rows = {r.get("call_id"): r for r in map(json.loads, out.stdout.splitlines())}
    # No policy and no declared tool: the request is an unknown tool, denied.
    assert rows[REQUEST_ID]["tool"] == NAME and rows[REQUEST_ID]["state"] == "rejected"
    items = json.loads((tmp_path / "next.json").read_text("utf-8"))
    assert [i["type"] for i in items][-2:] == ["mcp_approval_response", "function_call_output"]
    assert items[-2] == {"type": "mcp_approval_response", "approval_request_id": REQUEST_ID,
                         "approve": False, "reason": "unknown_tool"}


def test_the_cli_run_decides_a_live_request_by_policy_and_writes_the_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from agent_gate.cli import main
    from agent_gate.stream_server import StreamServer, Transcript

    (tmp_path / "mcp_run_tools.py").write_text(TOOLS_MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    transcript = Transcript.from_file(TRANSCRIPT / "mcp_approval_request.sse")
    with StreamServer({"mcp": transcript}) as server:
        out = CliRunner().invoke(main, [
            "run", "--provider", "openai-responses", "--url", server.stream_url("mcp"),
            "--task", "t", "--tools", "mcp_run_tools", "--db", f"sqlite:///{tmp_path / 'l.db'}",
            "--policy", str(policy(tmp_path, ALLOW)), "--json",
            "--next-input", str(tmp_path / "next.json"),
        ])
    assert out.exit_code == 0, out.output
    rows = {r.get("call_id"): r for r in map(json.loads, out.stdout.splitlines())}
    assert rows[REQUEST_ID]["tool"] == NAME and rows[REQUEST_ID]["state"] == "succeeded"
    items = json.loads((tmp_path / "next.json").read_text("utf-8"))
    assert {"type": "mcp_approval_response", "approval_request_id": REQUEST_ID,
            "approve": True} in items
