"""Operating agent-gate from the command line: `call show`, paged and filtered
listings, exit statuses, JSON errors, and live progress on a terminal."""

from __future__ import annotations

import io
import json
import os
import queue
import subprocess
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from click.testing import CliRunner, Result
from rich.console import Console
from rich.text import Text
from shared_fixtures import AGENT_GATE, EXAMPLE_POLICY, HERE
from sqlalchemy import event
from support.calls import call
from waiting import wait_until

from agent_gate import Gate, ToolRegistry
from agent_gate.cli import main as cli
from agent_gate.cli._listing import STATES, PagedTable
from agent_gate.cli._progress import Progress
from agent_gate.ledger import CallState, Ledger
from agent_gate.ledger.views.pages import AuditQuery, TaskQuery
from agent_gate.policy import Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")

BODY = "Dear Bob, the secret invoice text."
TASK_SEQ_INDEX = "sqlite_autoindex_audit_events_1"
"""``UNIQUE (task_id, seq)`` of the audit trail: SQLite names a table constraint's index."""


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def ledger_url(db_url: str, support_tools: ModuleType, effects_file: Path) -> str:
    """support-1: a mail awaiting approval (its body redacted), a denied delete, a read
    that ran, a call the schema refused; other: one read."""
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1", roles={"support"})) as gate:
        gate.execute("other", call("w0", "get_weather", city="Rome"))
        gate.execute("support-1", call("w2", "get_weather", city="Oslo"))
        gate.execute("support-1", call("m1", "send_email", to="bob@gmail.com",
                                       subject="Invoice", body=BODY))
        gate.execute("support-1", call("d1", "delete_file", path="/etc/passwd"))
        gate.execute("support-1", call("bad", "get_weather", town=3))
    return db_url


def test_call_show_reads_one_call_whole_and_never_unseals(ledger_url: str) -> None:
    assert run("approve", "m1", "--by", "alice", "--reason", "known customer",
               "--expires-in", "2h", "--db", ledger_url).exit_code == 0
    out = run("call", "show", "m1", "--db", ledger_url)
    assert out.exit_code == 0, out.output
    text = out.output
    assert "secret invoice" not in text and "Dear Bob…" in text  # an 8-character preview
    assert '"subject": "Invoice"' in text and '"redacted": "hmac-sha256:' in text
    assert "the values are sealed" in text
    assert "decision    approve · rules email-external-needs-approval" in text
    assert "Mail to any other domain is read by a person first." in text
    assert "#1 approved by alice at " in text and ": known customer" in text
    assert "expires " in text and "unused" in text and "bound to arguments " in text
    assert "received → awaiting_approval" in text and "approval_granted" in text
    assert "operator:alice" in text

    shown = json.loads(run("call", "show", "m1", "--db", ledger_url, "--json").output)
    assert shown["tool"] == "send_email" and shown["state"] == "awaiting_approval"
    assert shown["redacted"] is True and shown["arguments"]["to"] == "bob@gmail.com"
    assert BODY not in json.dumps(shown)
    assert shown["schema"] == {"status": "valid", "errors": []}
    assert shown["decision"]["rule_ids"] == ["email-external-needs-approval"]
    (approval,) = shown["approvals"]
    assert (approval["by"], approval["verdict"], approval["consumed"]) == (
        "alice", "approved", False)
    assert approval["args_hash"] == shown["args_hash"] and approval["expires_at"]
    assert [h["event"] for h in shown["history"]] == [
        "received", "require_approval", "approval_granted"]
    assert shown["attempts"] == []

    bad = json.loads(run("call", "show", "bad", "--db", ledger_url, "--json").output)
    assert bad["schema"] == {"status": "invalid", "errors": [
        {"keyword": "additionalProperties", "pointer": ""},
        {"keyword": "required", "pointer": "/city"}]}
    assert bad["decision"] is None and bad["state"] == "rejected"
    ran = json.loads(run("call", "show", "w2", "--db", ledger_url, "--json").output)
    assert [(a["number"], a["ended_in"]) for a in ran["attempts"]] == [(1, "succeeded")]
    assert json.loads(ran["result"]["json"]) == {"city": "Oslo", "temperature": 21}


def test_call_show_bounds_a_large_result(db_url: str) -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read")
    def big() -> str:
        return "x" * 5000

    with Gate(tools, db_url) as gate:
        assert gate.execute("t", call("c", "big")).ok
    out = json.loads(run("call", "show", "c", "--db", db_url, "--json",
                         "--max-result", "100").output)
    assert out["result"]["truncated"] is True and out["result"]["bytes"] == 5002
    assert out["result"]["json"].startswith('"xxx') and "[4902 more chars]" in \
        out["result"]["json"]
    assert "(cut; --max-result shows more)" in run("call", "show", "c", "--db", db_url,
                                                   "--max-result", "100").output


def test_errors_name_the_flags_and_are_json_with_json(ledger_url: str,
                                                      support_tools: ModuleType) -> None:
    with Gate(support_tools.tools, ledger_url) as gate:
        gate.execute("other", call("m1", "get_weather", city="Paris"))  # m1 twice now
    twice = run("call", "show", "m1", "--db", ledger_url)
    assert twice.exit_code == 2
    assert "call id 'm1' is in 2 tasks ('support-1', 'other'); name one with --task TASK" \
        in twice.output
    assert run("call", "show", "m1", "--task", "other", "--db", ledger_url).exit_code == 0
    approve = run("approve", "m1", "--by", "alice", "--db", ledger_url, "--json")
    assert approve.exit_code == 2
    error = json.loads(approve.output)["error"]
    assert error["kind"] == "usage" and "--task TASK" in error["message"]
    blank = run("approve", "m1", "--task", "support-1", "--by", "  ", "--db", ledger_url)
    assert blank.exit_code == 2 and "--by" in blank.output and "by=" not in blank.output
    assert "expected who answers, e.g. --by alice" in blank.output
    usage = json.loads(run("tasks", "--limit", "0", "--db", ledger_url, "--json").output)
    assert usage["error"]["kind"] == "usage" and usage["error"]["exit_code"] == 2
    assert "--limit" in usage["error"]["message"]
    missing = run("tasks", "--db", "sqlite:////nonexistent/ledger.db", "--json")
    assert missing.exit_code == 3
    assert json.loads(missing.output)["error"]["kind"] == "ledger"
    nope = run("call", "show", "zz", "--db", ledger_url, "--json")
    assert nope.exit_code == 1 and json.loads(nope.output)["error"]["kind"] == "error"


def test_listings_filter_and_page_by_keyset(ledger_url: str) -> None:
    everything = [json.loads(x) for x in run("audit", "--db", ledger_url, "--json")
                  .output.splitlines()]
    seqs = [e["seq"] for e in everything]
    assert seqs == sorted(seqs) and len(seqs) > 8
    first = run("audit", "--db", ledger_url, "--limit", "3")
    assert [line.split()[0] for line in first.stdout.splitlines()[1:]] == [
        str(s) for s in seqs[:3]]
    assert f"more may follow: --after {seqs[2]} --limit 3" in first.stderr
    page = [json.loads(x)["seq"] for x in run(
        "audit", "--db", ledger_url, "--after", str(seqs[2]), "--limit", "3", "--json"
    ).output.splitlines()]
    assert page == seqs[3:6]
    mails = [json.loads(x) for x in run("audit", "--db", ledger_url, "--tool", "send_email",
                                        "--json").output.splitlines()]
    assert {e["call"] for e in mails} == {"m1"} and {e["tool"] for e in mails} == {"send_email"}
    rejected = [json.loads(x) for x in run("audit", "--db", ledger_url, "--state", "rejected",
                                           "--json").output.splitlines()]
    assert sorted(e["call"] for e in rejected) == ["bad", "d1"]
    assert run("audit", "--db", ledger_url, "--since", "2999-01-01T00:00:00Z").output \
        .startswith("no audit events for that filter")
    assert len(run("audit", "--db", ledger_url, "--since", "1h", "--json").output
               .splitlines()) == len(seqs)
    bad_since = run("audit", "--db", ledger_url, "--since", "yesterday")
    assert bad_since.exit_code == 2 and "30m, 2h, 7d" in bad_since.output

    def tasks(*args: str) -> list[str]:
        done = run("tasks", "--db", ledger_url, "--json", *args)
        assert done.exit_code == 0, done.output
        return [json.loads(x)["task"] for x in done.output.splitlines()]

    assert sorted(tasks()) == ["other", "support-1"]
    assert tasks("--state", "awaiting_approval") == ["support-1"]
    assert tasks("--tool", "delete_file") == ["support-1"]
    assert tasks("--state", "in_doubt") == []
    one = tasks("--limit", "1")
    assert len(one) == 1 and tasks("--after", one[0]) == [
        t for t in ("support-1", "other") if t != one[0]]
    unknown = run("tasks", "--db", ledger_url, "--after", "nope")
    assert unknown.exit_code == 1 and "--after TASK" in unknown.output


def test_the_state_choices_are_the_ledgers_states() -> None:
    assert set(STATES) == {s.value for s in CallState}


@pytest.mark.backends("sqlite")
def test_a_page_is_an_indexed_range_read(ledger_url: str) -> None:
    """Each listing query reads an index in its order: no full scan of the trail and no
    sort of it, whatever the ledger holds (the benchmark measures the same reads)."""
    ledger = Ledger(ledger_url)
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        seen.append((statement, params))

    event.listen(ledger.engine, "before_cursor_execute", record)
    try:
        ledger.audit_page(AuditQuery(limit=50))
        ledger.audit_page(AuditQuery(task_id="support-1", after=3, limit=50))
        ledger.audit_page(AuditQuery(newest=True, limit=10))
        ledger.tasks_page(TaskQuery(limit=50))
        ledger.tasks_page(TaskQuery(after="support-1", limit=50))
        ledger.call_details("support-1", "m1")
    finally:
        event.remove(ledger.engine, "before_cursor_execute", record)
    plans: list[str] = []
    with ledger.engine.connect() as conn:
        for statement, params in seen:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params).all()
            plans.append(" | ".join(str(r[-1]) for r in rows))
    ledger.close()
    trail = [p for p in plans if "audit_events" in p]
    assert len(trail) >= 4, plans
    for plan in trail:
        # Read in index order and stopped by LIMIT (a SCAN in rowid order is that too);
        # never every row sorted.
        assert "TEMP B-TREE" not in plan, plan
    # A task's page: its (task_id, seq) key from the cursor's seq on (revision 0008).
    assert any(f"USING INDEX {TASK_SEQ_INDEX} (task_id=? AND seq>?)" in p
               for p in trail), trail
    counts = next(p for p in plans if "tool_calls" in p and "audit_events" not in p)
    assert "USING" in counts and "INDEX" in counts, counts
    # Tasks newest first: their (updated_at, id) index read backwards, never sorted.
    tasks = [p for p in plans if "ix_tasks_updated_at_id" in p]
    assert len(tasks) == 2 and all("TEMP B-TREE" not in p for p in tasks), plans
    # One call's history through its own index, not every entry of its task.
    assert any("ix_audit_events_call_row_id_id" in p for p in trail), trail


def test_ids_are_never_cut_on_a_narrow_terminal() -> None:
    long_id = "call_" + "x" * 75
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=True, width=60, color_system=None)
    table = PagedTable(out, ("#", "task", "call", "event", "reason"), ids=("task", "call"))
    table.print([[Text("1"), Text("task-1"), Text(long_id), Text("require_approval"),
                  Text("a long reason that folds over several lines " * 2)]])
    table.print([[Text("2"), Text("task-1"), Text("c2"), Text("claim"), Text("ok")]])
    lines = buf.getvalue().splitlines()
    assert any(long_id in line for line in lines)
    assert sum("task" in line.split() for line in lines) == 1  # the header printed once
    assert any(line.split()[:3] == ["2", "task-1", "c2"] for line in lines)


def test_audit_follow_prints_entries_as_they_are_appended(
    ledger_url: str, support_tools: ModuleType
) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([str(AGENT_GATE), "audit", "--follow", "--json", "--task", "later",
                             "--db", ledger_url], stdout=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()],
                              daemon=True)
    reader.start()
    got: list[dict[str, Any]] = []

    def have(n: int) -> bool:
        while not lines.empty():
            got.append(json.loads(lines.get()))
        assert proc.poll() is None, "audit --follow ended by itself"
        return len(got) >= n

    try:
        with Gate(support_tools.tools, ledger_url, policy=EXAMPLE_POLICY) as gate:
            gate.execute("later", call("w9", "get_weather", city="Bern"))
            wait_until(lambda: have(5), what="the first call's entries")
            gate.execute("later", call("w10", "get_weather", city="Chur"))
            wait_until(lambda: have(9), what="the second call's entries")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert [e["call"] for e in got if e["call"]] == ["w9"] * 4 + ["w10"] * 4
    assert [e["seq"] for e in got] == sorted(e["seq"] for e in got)


def test_progress_on_a_terminal_shows_each_call_and_the_stream(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    buf = io.StringIO()
    term = Console(file=buf, force_terminal=True, width=120, color_system=None)
    with Gate(support_tools.tools, db_url) as gate:
        progress = Progress(gate.ledger, "live", live=term, plain=False)
        gate.execute("live", call("w1", "get_weather", city="Oslo"))
        wait_until(lambda: progress.calls.get("w1") is not None
                   and progress.calls["w1"].state == "succeeded", what="the call's success")
        progress.replayed_event()
        progress.close()
    shown = buf.getvalue()
    assert "w1" in shown and "get_weather" in shown and "succeeded" in shown
    assert "task live · 1 events · 0 heartbeats" in shown


@pytest.mark.backends("sqlite")
def test_audit_streams_page_after_page_and_stops_with_its_reader(db_url: str) -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="read")
    def ping() -> str:
        return "pong"

    with Gate(tools, db_url) as gate:
        for i in range(70):  # 4 entries a call, 281 in all: more than one page
            gate.execute(f"t{i % 3}", call(f"c{i}", "ping"))
    with Ledger(db_url) as ledger:
        every = [e.seq for e in ledger.audit()]
    assert len(every) > 200
    listed = [json.loads(x)["seq"] for x in run("audit", "--db", db_url, "--json")
              .output.splitlines()]
    assert listed == every
    of_t1 = [json.loads(x)["seq"] for x in run("audit", "--db", db_url, "--task", "t1",
                                               "--json").output.splitlines()]
    with Ledger(db_url) as ledger:
        assert of_t1 == [e.seq for e in ledger.audit(task_id="t1")]
    # `agent-gate audit | head -3`: the reader stops, the command ends quietly.
    proc = subprocess.Popen([str(AGENT_GATE), "audit", "--db", db_url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    head = [proc.stdout.readline() for _ in range(3)]
    proc.stdout.close()
    proc.wait(timeout=60)
    assert head[0].split()[:2] == ["#", "time"] and head[1].split()[0] == str(every[0])
    assert "Traceback" not in proc.stderr.read()


def test_resume_shows_each_change_and_exits_with_what_is_left(ledger_url: str) -> None:
    assert run("approve", "m1", "--by", "alice", "--db", ledger_url).exit_code == 0
    out = CliRunner().invoke(cli, ["resume", "support-1", "--tools", "support_tools",
                                   "--policy", str(EXAMPLE_POLICY), "--db", ledger_url])
    progress = out.stderr.splitlines()
    assert "call m1 (send_email): awaiting_approval → authorized [approve]" in progress
    assert "call m1 (send_email): executing → succeeded [succeed]" in progress
    assert out.exit_code == 4, out.output  # every call finished; d1 and bad were rejected
    assert "Exit status: 0 every call finished" in run("resume", "--help").output
