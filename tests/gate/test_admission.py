"""The policy judges, the ledger hashes and the tool receives one value.

A tool declared with a pydantic model receives the model's coerced value
(``Path`` normalized, strings stripped, defaults filled in). Before this was
fixed, the policy read the raw JSON, so ``./secret.txt`` passed a rule that denies
``secret.txt`` and the tool was handed ``Path("secret.txt")``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, field_validator

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.ledger.canonical import arguments_hash

POLICY = """
version: 1
tools:
  remove:
    effect: destructive
    idempotency: natural
    rules:
      - id: remove-anything
        effect: allow
      - id: keep-secret
        effect: deny
        reason: The secret file is kept.
        when:
          - arg: path
            equals: secret.txt
  notify:
    effect: write
    idempotency: none
    rules:
      - id: notify-anyone
        effect: allow
      - id: never-the-boss
        effect: deny
        when:
          - arg: to
            equals: boss@example.com
      - id: loud-needs-approval
        effect: approve
        when:
          - arg: level
            equals: loud
"""


class RemoveArgs(BaseModel):
    path: Path


class NotifyArgs(BaseModel):
    model_config = ConfigDict(str_strip_whitespace=True)

    to: str
    level: str = "loud"  # a default the raw JSON never carries


class Drifting(BaseModel):
    """A validator that changes its own output every time: never one value."""

    name: str

    @field_validator("name")
    @classmethod
    def suffix(cls, value: str) -> str:
        return value + "!"


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


def make_tools(seen: Counter[str], handed: list[Any]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(effect="destructive", idempotency="natural")
    def remove(args: RemoveArgs) -> str:
        seen["remove"] += 1
        handed.append(args.path)
        return "removed"

    @tools.tool(effect="write")
    def notify(args: NotifyArgs) -> str:
        seen["notify"] += 1
        handed.append(args.to)
        return "sent"

    @tools.tool(effect="read")
    def drift(args: Drifting) -> str:
        seen["drift"] += 1
        return "drifted"

    return tools


@pytest.mark.parametrize(
    "spelling", ["./secret.txt", "secret.txt/.", "secret.txt/", "./secret.txt/"]
)
def test_a_spelling_the_model_normalizes_is_judged_as_normalized(
    db_url: str, policy_file: Path, spelling: str
) -> None:
    seen: Counter[str] = Counter()
    handed: list[Any] = []
    with Gate(make_tools(seen, handed), db_url, policy=policy_file) as gate:
        out = gate.execute(
            "t", {"call_id": "c1", "name": "remove", "arguments": {"path": spelling}}
        )
        assert out.state is CallState.REJECTED
        assert out.code == "policy_denied"
        assert seen["remove"] == 0
        stored = gate.ledger.get("t", "c1")
        assert stored is not None and stored.arguments == {"path": "secret.txt"}
        # The hash is of the value judged, so a replay of either spelling is the same call.
        assert stored.args_hash == arguments_hash({"path": "secret.txt"})


def test_stripped_strings_and_defaults_are_what_the_policy_sees(
    db_url: str, policy_file: Path
) -> None:
    seen: Counter[str] = Counter()
    handed: list[Any] = []
    with Gate(make_tools(seen, handed), db_url, policy=policy_file) as gate:
        denied = gate.execute(
            "t", {"call_id": "c1", "name": "notify",
                  "arguments": {"to": "  boss@example.com ", "level": "quiet"}}
        )
        assert denied.state is CallState.REJECTED
        # The default ``level`` was never in the raw JSON; the tool would get "loud".
        waiting = gate.execute(
            "t", {"call_id": "c2", "name": "notify", "arguments": {"to": "ana@example.com"}}
        )
        assert waiting.state is CallState.AWAITING_APPROVAL
        quiet = gate.execute(
            "t", {"call_id": "c3", "name": "notify",
                  "arguments": {"to": " ana@example.com", "level": "quiet"}}
        )
        assert quiet.state is CallState.SUCCEEDED
    assert seen["notify"] == 1
    assert handed == ["ana@example.com"]


def test_resume_hands_over_exactly_what_was_judged(db_url: str, policy_file: Path) -> None:
    seen: Counter[str] = Counter()
    handed: list[Any] = []
    with Gate(make_tools(seen, handed), db_url, policy=policy_file) as gate:
        waiting = gate.execute(
            "t", {"call_id": "c1", "name": "notify", "arguments": {"to": " ana@example.com\n"}}
        )
        assert waiting.state is CallState.AWAITING_APPROVAL
        gate.approve("c1", by="op", task_id="t")
        [done] = gate.resume("t")
    assert done.state is CallState.SUCCEEDED
    assert handed == ["ana@example.com"]


def test_a_model_that_never_settles_is_rejected_not_run(db_url: str, policy_file: Path) -> None:
    seen: Counter[str] = Counter()
    with Gate(make_tools(seen, []), db_url) as gate:
        out = gate.execute("t", {"call_id": "c1", "name": "drift", "arguments": {"name": "x"}})
    assert out.state is CallState.REJECTED
    assert out.code == "schema_invalid"
    assert seen["drift"] == 0


def test_stored_arguments_that_would_coerce_differently_are_not_run(
    db_url: str, policy_file: Path
) -> None:
    """A row written before coercion (or edited) holds a raw spelling: the tool
    would receive something other than what is stored, so the claim refuses."""
    from agent_gate.ledger import NewCall

    seen: Counter[str] = Counter()
    with Gate(make_tools(seen, []), db_url) as gate:
        gate.ledger.record(
            NewCall(task_id="t", call_id="c1", idem_key="call:c1", tool="remove",
                    effect="destructive", idempotency="natural",
                    args_hash=arguments_hash({"path": "./x.txt"}),
                    arguments={"path": "./x.txt"}),
            provider=None,
        )
        [out] = gate.resume("t")
    assert seen["remove"] == 0
    assert out.state is not CallState.SUCCEEDED
