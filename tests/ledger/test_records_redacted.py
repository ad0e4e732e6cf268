"""Fields the policy redacts never reach the database file in clear, yet calls resume."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner
from shared_fixtures import EXAMPLE_POLICY, effect_lines

from agent_gate import CallState, Gate
from agent_gate.cli import main as cli
from agent_gate.errors import SealKeyMissing
from agent_gate.policy import Principal

BODY_SECRET = "ZEBRA-QUILL-MARMOT wire instructions"
CARD_SECRET = "KJWX"


def secret_calls() -> list[dict[str, object]]:
    return [
        {"call_id": "mail", "name": "send_email",
         "arguments": {"to": "ana@example.com", "subject": "Wire",
                       "body": f"Dear Ana, {BODY_SECRET}."}},
        {"call_id": "ext", "name": "send_email",
         "arguments": {"to": "bob@gmail.com", "subject": "Wire",
                       "body": f"Dear Bob, {BODY_SECRET}."}},
        {"call_id": "refund", "name": "refund",
         "arguments": {"order_id": "ORD-123456", "amount": 42, "card_last4": CARD_SECRET}},
    ]


def database_bytes(url: str) -> bytes:
    base = Path(url.removeprefix("sqlite:///"))
    return b"".join(p.read_bytes() for p in base.parent.glob(base.name + "*")
                    if not p.name.endswith(".key"))


def test_redacted_fields_are_never_in_the_database_file(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1")) as gate:
        states = [gate.execute("t", call).state for call in secret_calls()]
        assert states == [CallState.SUCCEEDED, CallState.AWAITING_APPROVAL,
                          CallState.SUCCEEDED]
        gate.approve("ext", by="alice")
        # Looked at while the database is open, WAL included, and after the resume.
        assert [o.state for o in gate.resume("t")] == [CallState.SUCCEEDED]
        data = database_bytes(sqlite_url)
        rec = gate.ledger.get("t", "refund")
        assert rec is not None and rec.arguments is not None
        stand_in = rec.arguments["card_last4"]
    for secret in (BODY_SECRET, "ZEBRA-QUILL", CARD_SECRET):
        assert secret.encode() not in data
    # The stand-in is a keyed digest and a preview that shows nothing of a short value.
    assert stand_in["redacted"].startswith("hmac-sha256:") and stand_in["preview"] == "…"
    # The calls ran with their real arguments.
    assert effect_lines(effects_file) == ["t send_email ana@example.com Wire",
                                          "t refund ORD-123456 42",
                                          "t send_email bob@gmail.com Wire"]
    # The default key file sits beside the database, readable by its owner only.
    key_file = Path(sqlite_url.removeprefix("sqlite:///") + ".key")
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # The audit trail shows the redacted form, also through the CLI.
    out = CliRunner().invoke(cli, ["audit", "--db", sqlite_url, "--task", "t", "--json"])
    assert out.exit_code == 0, out.output
    assert BODY_SECRET not in out.output and CARD_SECRET not in out.output
    received = [json.loads(line) for line in out.output.splitlines()
                if json.loads(line)["event"] == "received"]
    body = received[0]["detail"]["arguments"]["body"]
    assert body["preview"] == "Dear Ana…" and body["type"] == "string"


def test_a_process_without_the_key_reports_a_sealed_call_and_runs_nothing(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path, tmp_path: Path
) -> None:
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY) as gate:
        assert gate.execute("t", secret_calls()[1]).state is CallState.AWAITING_APPROVAL
        gate.approve("ext", by="alice")
    key_file = Path(sqlite_url.removeprefix("sqlite:///") + ".key")
    moved = tmp_path / "elsewhere.key"
    key_file.rename(moved)
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY) as gate:
        waiting = gate.resume("t")
        assert [o.state for o in waiting] == [CallState.AWAITING_APPROVAL]
        assert "sealed arguments and this process has no seal key" in (waiting[0].reason or "")
    assert effect_lines(effects_file) == []
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY,
              seal_key=str(moved)) as gate:
        assert [o.state for o in gate.resume("t")] == [CallState.SUCCEEDED]
    assert effect_lines(effects_file) == ["t send_email bob@gmail.com Wire"]


@pytest.mark.backends("postgresql")
def test_a_shared_database_without_a_key_is_refused_up_front(
    db_url: str, support_tools: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENT_GATE_SEAL_KEY", raising=False)
    monkeypatch.delenv("AGENT_GATE_SEAL_KEY_FILE", raising=False)
    with pytest.raises(SealKeyMissing, match="give every worker the same key"):
        Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY)
    Gate(support_tools.tools, db_url).close()  # without a redacting policy it is fine


def test_a_dedupe_key_catches_a_repeat_whether_or_not_a_redacted_field_was_sent(
    sqlite_url: str,
) -> None:
    from agent_gate import ToolRegistry
    from agent_gate.policy import Policy

    tools = ToolRegistry()
    ran: list[str] = []

    @tools.tool(schema={"type": "object", "properties": {
        "order_id": {"type": "string"}, "card_last4": {"type": "string"}}},
        effect="write", idempotency="none", dedupe=["order_id"])
    def charge(order_id: str, card_last4: str = "") -> str:
        ran.append(order_id)
        return "ok"

    policy = Policy.from_text(
        "version: 1\ntools:\n  charge:\n    redact: [card_last4]\n    rules:\n"
        "      - id: any\n        effect: allow\n"
    )
    with Gate(tools, sqlite_url, policy=policy) as gate:
        first = gate.execute("t", {"call_id": "a", "name": "charge",
                                   "arguments": {"order_id": "O-1", "card_last4": CARD_SECRET}})
        repeat = gate.execute("t", {"call_id": "b", "name": "charge",
                                    "arguments": {"order_id": "O-1"}})
    assert first.state is CallState.SUCCEEDED
    # Same dedupe key, other arguments: a conflict, never a second run.
    assert repeat.duplicate_of == "a" and repeat.code == "conflict"
    assert ran == ["O-1"]


def test_an_exported_bundle_holds_no_redacted_value(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path, tmp_path: Path
) -> None:
    """The trail never holds a sealed or redacted value, so neither does a bundle: every
    file of a task's bundle and of a full export is searched for the secrets."""
    import os

    from agent_gate.evidence.note import SignerKey

    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1")) as gate:
        for call in secret_calls():
            gate.execute("t", call)
        gate.approve("ext", by="alice")
        gate.resume("t")
    key = tmp_path / "ledger.key"
    key.write_text(SignerKey.generate("ledger.example/redaction").text)
    os.chmod(key, 0o600)
    runner = CliRunner()
    for name, extra in (("task", ["--task", "t"]), ("all", [])):
        done = runner.invoke(cli, ["audit", "export", *extra, "--out", str(tmp_path / name),
                                   "--signing-key", str(key), "--db", sqlite_url])
        assert done.exit_code == 0, done.output
    exported = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()
                        and p.parent.name in ("task", "all"))
    assert b'"call": "refund"' in exported and b"hmac-sha256:" in exported
    for secret in (BODY_SECRET, "ZEBRA-QUILL", CARD_SECRET):
        assert secret.encode() not in exported
