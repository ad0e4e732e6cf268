"""``agent-gate policy backtest`` / ``gate.backtest``: past calls judged again, read-only."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from click.testing import CliRunner
from support import EXAMPLE_POLICY as EXAMPLE
from support.tables import table_rows

from agent_gate import Gate
from agent_gate.cli import main
from agent_gate.demo.tools import tools
from agent_gate.gate.backtest import backtest
from agent_gate.ledger.history import read_only_engine
from agent_gate.policy import Policy, Principal, TaskScope, Verdict

KEY = os.urandom(32)
SUPPORT = Principal(id="u1", roles={"support"})

CALLS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("t1", "c1", "refund", {"order_id": "ORD-123456", "amount": 40, "card_last4": "4242"}),
    ("t1", "c2", "refund", {"order_id": "ORD-123456", "amount": 60}),
    ("t1", "c3", "refund", {"order_id": "ORD-123456", "amount": 400}),
    ("t1", "c4", "send_email", {"to": "x@elsewhere.org", "subject": "s", "body": "b"}),
    ("t1", "c5", "refund", {"order_id": "bad"}),  # schema: amount missing
    ("t2", "c1", "get_weather", {"city": "Oslo"}),
    ("t2", "c2", "fetch_url", {"url": "https://docs.python.org/"}),
]

# refunds above 50 need a person; at most two refunds per task; weather for nobody
DRAFT = (
    EXAMPLE.read_text(encoding="utf-8")
    .replace("number: {gt: 0, max: 100}", "number: {gt: 0, max: 50}")
    .replace("number: {gt: 100, max: 5000}", "number: {gt: 50, max: 5000}")
    .replace("      - id: refund-count-per-task\n        max_calls: 5\n        effect: approve",
             "      - id: refund-count-per-task\n        max_calls: 2\n        effect: deny")
    .replace("          - arg: city\n            length: {min: 1, max: 100}",
             "          - arg: city\n            length: {min: 1, max: 2}")
)


@pytest.fixture
def ledger(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AGENT_GATE_DEMO_OUTBOX", str(tmp_path / "outbox.jsonl"))
    with Gate(tools, db_url, policy=EXAMPLE, principal=SUPPORT, seal_key=KEY,
              scope=TaskScope(name="support")) as gate:
        for task, call_id, tool, arguments in CALLS:
            gate.execute(task, {"call_id": call_id, "name": tool, "arguments": arguments})
    return db_url


@pytest.fixture
def draft(tmp_path: Path) -> Path:
    path = tmp_path / "draft.yaml"
    path.write_text(DRAFT, encoding="utf-8")
    return path


def _moves(report: Any) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    return {f"{c.call.task_id}/{c.call.call_id}": (c.before.value, c.after.value, c.after_rules)
            for c in report.changes}


def test_every_change_by_transition_and_rule(ledger: str, draft: Path) -> None:
    report = backtest(Policy.load(draft), ledger, seal_key=KEY)
    assert _moves(report) == {
        # sealed: opened with the key, judged on the real amount
        "t1/c2": ("allow", "approve", ("refund-large-needs-approval",)),
        # c1 and c2 were authorized in fact: under the draft's two-refund limit the
        # third goes over, whatever the draft would have said of c2
        "t1/c3": ("approve", "deny", ("refund-count-per-task",)),
        "t2/c1": ("allow", "deny", ("agent-gate:default-deny",)),
    }
    assert report.judged == 6
    assert [(u.call.call_id, u.why) for u in report.unjudged] == [
        ("c5", "never judged by a policy file (schema_invalid)")]
    transitions = {(b.value, a.value): len(v) for (b, a), v in report.by_transition().items()}
    assert transitions == {("allow", "approve"): 1, ("approve", "deny"): 1, ("allow", "deny"): 1}
    assert set(report.by_rule()) == {
        "refund-large-needs-approval", "refund-count-per-task", "agent-gate:default-deny"}


def test_the_same_policy_changes_nothing(ledger: str) -> None:
    report = backtest(Policy.load(EXAMPLE), ledger, seal_key=KEY)
    assert report.changes == () and report.judged == 6
    assert report.same_verdict_other_rules == 0


def test_task_and_since_narrow_the_calls(ledger: str, draft: Path) -> None:
    policy = Policy.load(draft)
    assert set(_moves(backtest(policy, ledger, task="t2", seal_key=KEY))) == {"t2/c1"}
    from datetime import UTC, datetime, timedelta

    later = datetime.now(UTC) + timedelta(hours=1)
    assert backtest(policy, ledger, since=later, seal_key=KEY).judged == 0


def test_sealed_calls_without_the_key_cannot_be_judged(
    ledger: str, draft: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AGENT_GATE_SEAL_KEY", "AGENT_GATE_SEAL_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    report = backtest(Policy.load(draft), ledger)
    sealed = [u for u in report.unjudged if u.why == "sealed arguments and no seal key"]
    assert {u.call.tool for u in sealed} == {"refund", "send_email", "get_weather", "fetch_url"}
    assert report.judged == 0


def _fingerprint(url: str) -> str:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    digest = hashlib.sha256()
    with engine.connect() as conn:
        for table in ("tasks", "tool_calls", "audit_events", "quota_charges", "approvals"):
            for row in conn.execute(sqlalchemy.text(f"SELECT * FROM {table} ORDER BY 1")):
                digest.update(repr(tuple(row)).encode())
    engine.dispose()
    return digest.hexdigest()


def test_it_never_writes_the_ledger(ledger: str, draft: Path) -> None:
    before = _fingerprint(ledger)
    sqlite_file = ledger.removeprefix("sqlite:///") if ledger.startswith("sqlite") else None
    if sqlite_file is not None:
        with sqlite3.connect(sqlite_file) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        file_before = hashlib.sha256(Path(sqlite_file).read_bytes()).hexdigest()
    result = CliRunner().invoke(main, ["policy", "backtest", str(draft), "--db", ledger],
                                env={"AGENT_GATE_SEAL_KEY": KEY.hex()})
    assert result.exit_code == 0, result.output
    assert _fingerprint(ledger) == before
    if sqlite_file is not None:
        assert hashlib.sha256(Path(sqlite_file).read_bytes()).hexdigest() == file_before
    # and the connection it reads through refuses a write outright
    engine = read_only_engine(ledger)
    with pytest.raises(sqlalchemy.exc.DBAPIError), engine.begin() as conn:
        conn.execute(sqlalchemy.text("DELETE FROM quota_charges"))
    engine.dispose()
    assert _fingerprint(ledger) == before


def test_the_cli_reports_counts_and_ids_never_arguments(ledger: str, draft: Path) -> None:
    runner = CliRunner()
    env = {"AGENT_GATE_SEAL_KEY": KEY.hex()}
    result = runner.invoke(main, ["policy", "backtest", str(draft), "--db", ledger], env=env)
    assert result.exit_code == 0, result.output
    assert "6 calls judged: 3 would change" in result.stdout
    assert "allow -> approve" in result.stdout and "t1/c2" in result.stdout
    assert "cannot judge 1: never judged by a policy file (schema_invalid): t1/c5" in (
        result.stdout)
    assert "4242" not in result.stdout and "ORD-123456" not in result.stdout
    rule_rows = table_rows(result.stdout, "by the draft's deciding rule")
    assert rule_rows and all(len(row) == 4 for row in rule_rows)
    assert any("allow -> approve" in row[2] and "t1/c2" in row[3] for row in rule_rows)
    data = json.loads(runner.invoke(
        main, ["policy", "backtest", str(draft), "--db", ledger, "--json"], env=env).stdout)
    assert data["changed"] == 3
    rules = {r["rule_id"]: [c["call_id"] for c in r["calls"]] for r in data["rules"]}
    assert rules["refund-count-per-task"] == ["c3"]
    assert "4242" not in json.dumps(data)


def test_a_bad_draft_and_a_missing_ledger(tmp_path: Path, draft: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ntools: {t: {rules: [{id: x, efect: allow}]}}\n")
    runner = CliRunner()
    result = runner.invoke(main, ["policy", "backtest", str(bad), "--db",
                                  f"sqlite:///{tmp_path}/l.db"])
    assert result.exit_code == 1 and "efect" in result.stderr
    result = runner.invoke(main, ["policy", "backtest", str(draft), "--db",
                                  f"sqlite:///{tmp_path}/none.db"])
    assert result.exit_code == 2 and "no SQLite ledger" in result.stderr
    assert not (tmp_path / "none.db").exists()


def test_verdicts_are_the_policy_layers(ledger: str, draft: Path) -> None:
    report = backtest(Policy.load(draft), ledger, seal_key=KEY)
    assert all(isinstance(c.after, Verdict) for c in report.changes)

