"""``agent-gate pending``: the calls that wait for a person across tasks, with their
tool, rules, age and a short preview where a redacted field is its stand-in."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner, Result
from shared_fixtures import EXAMPLE_POLICY
from sqlalchemy import text
from support.calls import call

from agent_gate import Gate
from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger
from agent_gate.ledger.views.operators import Operators
from agent_gate.policy import Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")

BODY = "Dear customer, the secret invoice text is here."


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def listed(*args: str) -> list[dict[str, Any]]:
    got = run("pending", *args, "--json")
    assert got.exit_code == 0, got.output
    return [json.loads(line) for line in got.output.splitlines() if line.strip()]


@pytest.fixture
def ledger_url(db_url: str, support_tools: ModuleType) -> str:
    """Two tasks with mails awaiting approval (bodies redacted), one call in doubt
    nowhere, a read that ran."""
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1", roles={"support"})) as gate:
        gate.execute("other", call("w0", "get_weather", city="Rome"))
        for task, cid in (("support-1", "m1"), ("support-2", "m2"), ("support-2", "m3")):
            out = gate.execute(task, call(cid, "send_email", to=f"{cid}@gmail.com",
                                          subject="Invoice", body=BODY))
            assert out.state.value == "awaiting_approval"
    return db_url


def test_pending_lists_waiting_calls_across_tasks_oldest_first(ledger_url: str) -> None:
    rows = listed("--db", ledger_url)
    assert [(r["task_id"], r["call_id"], r["tool"]) for r in rows] == [
        ("support-1", "m1", "send_email"), ("support-2", "m2", "send_email"),
        ("support-2", "m3", "send_email")]
    first = rows[0]
    assert first["rule_ids"] and first["sealed"] is True
    # Keys in the stored (canonical) order; the redacted body as its stand-in.
    assert first["preview"] == f'body=‹redacted {len(BODY)} chars› subject="Invoice" ' \
        'to="m1@gmail.com"'
    assert "secret" not in json.dumps(rows)  # stand-ins only, never unsealed
    with Ledger(ledger_url) as ledger:
        assert [r["args_hash"] for r in rows] == [
            ledger.get(t, c).args_hash  # type: ignore[union-attr]
            for t, c in (("support-1", "m1"), ("support-2", "m2"), ("support-2", "m3"))]
    table = run("pending", "--db", ledger_url)
    assert table.exit_code == 0
    assert "m1@gmail.com" in table.output and "support-2" in table.output
    assert "secret" not in table.output


def test_pending_filters_pages_and_rights(ledger_url: str) -> None:
    rule = listed("--db", ledger_url)[0]["rule_ids"][0]
    assert [r["call_id"] for r in listed("--db", ledger_url, "--task", "support-2")] == \
        ["m2", "m3"]
    assert [r["call_id"] for r in listed("--db", ledger_url, "--search", "m3")] == ["m3"]
    assert [r["call_id"] for r in listed("--db", ledger_url, "--search", "support-1")] == \
        ["m1"]
    assert [r["call_id"] for r in listed("--db", ledger_url, "--rule", rule)] == \
        ["m1", "m2", "m3"]
    assert listed("--db", ledger_url, "--tool", "get_weather") == []
    assert [r["call_id"] for r in listed("--db", ledger_url, "--newest-first")] == \
        ["m3", "m2", "m1"]
    first = listed("--db", ledger_url, "--limit", "2")
    rest = listed("--db", ledger_url, "--after", str(first[-1]["ref"]))
    assert [r["call_id"] for r in first + rest] == ["m1", "m2", "m3"]
    with Ledger(ledger_url) as ledger:
        with ledger.engine.begin() as conn:
            conn.execute(text("UPDATE tool_calls SET updated_at = :t WHERE call_id = 'm2'"),
                         {"t": datetime.now(UTC) - timedelta(hours=3)})
        ops = Operators(ledger.engine)
        ops.add("mailer", approve=["send_email"])
        ops.add("payer", approve=["refund"])
    assert [r["call_id"] for r in listed("--db", ledger_url, "--older-than", "2h")] == ["m2"]
    assert listed("--db", ledger_url, "--older-than", "2h")[0]["age_seconds"] >= 3 * 3600 - 5
    assert len(listed("--db", ledger_url, "--operator", "mailer")) == 3
    assert listed("--db", ledger_url, "--operator", "payer") == []
    unknown = run("pending", "--db", ledger_url, "--operator", "nobody")
    assert unknown.exit_code != 0 and "no operator 'nobody'" in unknown.output


def test_pending_leaves_out_approved_calls_and_lists_in_doubt_ones(ledger_url: str) -> None:
    assert run("approve", "m1", "--by", "alice", "--db", ledger_url).exit_code == 0
    assert [r["call_id"] for r in listed("--db", ledger_url)] == ["m2", "m3"]
    assert [r["call_id"] for r in listed("--db", ledger_url, "--answered")] == \
        ["m1", "m2", "m3"]
    with Ledger(ledger_url) as ledger, ledger.engine.begin() as conn:
        conn.execute(text("UPDATE tool_calls SET state = 'in_doubt' WHERE call_id = 'm3'"))
    assert [(r["call_id"], r["state"]) for r in listed("--db", ledger_url, "--state",
                                                         "in-doubt")] == [("m3", "in_doubt")]
    assert [r["call_id"] for r in listed("--db", ledger_url, "--state", "all")] == \
        ["m2", "m3"]
    empty = run("pending", "--db", ledger_url, "--task", "nope")
    assert empty.exit_code == 0 and "no call waits for a person" in empty.output
