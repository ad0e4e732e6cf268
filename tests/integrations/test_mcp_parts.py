"""The MCP integration's parts that need no server: the command line's refusals, how a
call is named, the tool classes read off annotations, and the event store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest
from click.testing import CliRunner
from mcp_harness import POLICY

from agent_gate import Gate, ToolRegistry
from agent_gate.cli import main
from agent_gate.errors import GateUsageError
from agent_gate.integrations.mcp import CALL_ID_META
from agent_gate.integrations.mcp.identity import CallIds, asked_call_id
from agent_gate.integrations.mcp.upstream import classes_of
from agent_gate.plainjson import canonical_json, sha256_hex


@pytest.mark.parametrize(
    "args, message",
    [
        (["--policy", str(POLICY)], "give the upstream server"),
        (["--policy", str(POLICY), "--upstream-url", "http://127.0.0.1:1/mcp", "--", "x"],
         "give the upstream server"),
        (["--policy", str(POLICY), "--listen", "nowhere", "--", "x"], "expected HOST:PORT"),
        (["--policy", str(POLICY), "--listen", "127.0.0.1:0", "--", "x"], "expected HOST:PORT"),
        (["--policy", str(POLICY), "--approval-wait", "soon", "--", "x"], "--approval-wait"),
    ],
)
def test_the_command_refuses_what_it_cannot_serve(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["mcp", "proxy", *args])
    assert result.exit_code == 2 and message in result.output


def _gate(tmp_path: Path, policy: Path = POLICY) -> Gate:
    gate = Gate(ToolRegistry(), f"sqlite:///{tmp_path / 'l.db'}", policy=policy, create=True)

    async def dispatch(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "ok"}]}

    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    gate.tools.wrap(dispatch, {
        "append_note": {"schema": schema, "effect": "write"},
        "count_lines": {"schema": {"type": "object"}, "effect": "read",
                        "idempotency": "natural"},
    })
    return gate


def test_writes_are_named_by_their_arguments_and_reads_by_a_sequence(tmp_path: Path) -> None:
    with _gate(tmp_path) as gate:
        ids = CallIds(gate)
        write = ids.derive("t", "append_note", {"text": "a"})
        assert write == "mcp-" + sha256_hex(canonical_json(["append_note", {"text": "a"}]))[:32]
        assert ids.derive("t", "append_note", {"text": "a"}) == write
        assert ids.derive("t", "append_note", {"text": "b"}) != write
        read = ids.derive("t", "count_lines", {})
        assert read.endswith(".0") and ids.derive("t", "count_lines", {}) == read
        gate.execute("t", {"call_id": read, "name": "count_lines", "arguments": {}})
        assert ids.derive("t", "count_lines", {}) == read[:-2] + ".1"  # finished: a new call
        assert CallIds(gate).derive("t", "count_lines", {}) == read[:-2] + ".1"


def test_a_redacting_tools_derived_id_is_keyed(tmp_path: Path) -> None:
    policy = tmp_path / "redacts.yaml"
    policy.write_text(POLICY.read_text("utf-8").replace(
        "  append_note:\n", "  append_note:\n    redact: [text]\n"), "utf-8")
    with _gate(tmp_path, policy) as gate:
        derived = CallIds(gate).derive("t", "append_note", {"text": "hunter2"})
        plain = sha256_hex(canonical_json(["append_note", {"text": "hunter2"}]))[:32]
        assert derived != "mcp-" + plain and derived.startswith("mcp-")
        assert CallIds(gate).derive("t", "append_note", {"text": "hunter2"}) == derived


def test_a_client_call_id_must_be_a_short_string() -> None:
    assert asked_call_id({CALL_ID_META: "c-1", "progressToken": 3}) == "c-1"
    assert asked_call_id(None) is None and asked_call_id({}) is None
    for bad in ("", 7, "x" * 256):
        with pytest.raises(GateUsageError, match=CALL_ID_META):
            asked_call_id({CALL_ID_META: bad})


def test_annotations_are_defaults_and_the_policy_overrides_them(tmp_path: Path) -> None:
    def tool(name: str, **hints: Any) -> mt.Tool:
        return mt.Tool(name=name, input_schema={"type": "object"},
                       annotations=mt.ToolAnnotations(**hints) if hints else None)

    with _gate(tmp_path) as gate:
        assert [v.value for v in classes_of(tool("x"), gate)] == ["destructive", "none"]
        assert [v.value for v in classes_of(tool("x", readOnlyHint=True), gate)] == [
            "read", "natural"]
        assert [v.value for v in classes_of(
            tool("x", destructiveHint=False, idempotentHint=True), gate)] == ["write", "natural"]
        # The policy says append_note is a write that must never run twice: it wins
        # over a read-only claim (and would over a destructive one).
        assert [v.value for v in classes_of(tool("append_note", readOnlyHint=True), gate)] == [
            "write", "none"]


def test_an_upstream_tool_named_like_the_gates_own_is_refused(tmp_path: Path) -> None:
    """``mcp:`` names are answered by the gate itself (hosted approvals, the proxy's
    sampling requests): an upstream tool so named would run as one, so it is left out."""
    from agent_gate.integrations.mcp.link import Fixed
    from agent_gate.integrations.mcp.upstream import register_tools
    from agent_gate.policy.mcp_rules import SAMPLING_TOOL

    tools = [mt.Tool(name=name, input_schema={"type": "object"})
             for name in (SAMPLING_TOOL, "mcp:label:send", "lookup")]
    with _gate(tmp_path) as gate:
        done = register_tools(gate, Fixed(None), tools)  # type: ignore[arg-type]
        assert done.added == ("lookup",)
        assert [name for name, _ in done.refused] == [SAMPLING_TOOL, "mcp:label:send"]
        assert all("agent-gate's own" in why for _, why in done.refused)
