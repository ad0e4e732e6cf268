"""A call ``audit archive`` pruned is refused by the database itself, never run again.

The tombstone is checked by a trigger on ``tool_calls`` (revision 0011), not by a read
in intake (that read was a third PostgreSQL round trip per call,
``tests/ledger/backend/test_pg_pipeline_round_trips.py``). Each test runs on SQLite
and PostgreSQL and over both storages (``tests/ledger/conftest.py``): the plain-Core
reference, where the refusal comes with the ``INSERT``, and the fast backends, where the
insert is deferred (folded, pipelined) and the refusal surfaces at a later statement or
the ``COMMIT``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, func, insert, select, text
from sqlalchemy.exc import IntegrityError

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main
from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.models import ARCHIVED_CALLS, AUDIT_EVENTS, TOOL_CALLS
from agent_gate.ledger.pruned import ARCHIVED_ROW, tombstone_text
from agent_gate.sse import SSEDecoder

FUTURE = (datetime.now(UTC) + timedelta(days=1)).isoformat()

RAW_SSE = b"".join(
    b"data: " + json.dumps(chunk).encode() + b"\n\n"
    for chunk in (
        {"id": "c1", "object": "chat.completion.chunk", "choices": [{
            "index": 0, "finish_reason": None, "delta": {"tool_calls": [{
                "index": 0, "id": "call_pay", "type": "function",
                "function": {"name": "pay", "arguments": '{"amount": 5}'}}]}}]},
        {"id": "c1", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    )
) + b"data: [DONE]\n\n"
"""A provider's response as it came off the wire: one write call, ``call_pay``."""

WORKER = textwrap.dedent("""
    import json, sys
    from agent_gate import Gate, ToolRegistry
    from agent_gate.sse import SSEDecoder
    url, effects, raw = sys.argv[1], sys.argv[2], sys.stdin.buffer.read()
    tools = ToolRegistry()
    def pay(amount: int) -> dict:
        with open(effects, "a") as f:
            f.write(f"paid {amount}\\n")
        return {"paid": amount}
    tools.register(pay, name="pay", effect="write")
    with Gate(tools, url) as gate:
        done = gate.run(SSEDecoder().feed(raw), task_id="t", provider="openai-chat")
    print(json.dumps([[o.call_id, o.state.value] for o in done.outcomes]))
""")
"""A second worker process replaying the same bytes into its own Gate."""


def gate_tools(effects: Path) -> ToolRegistry:
    tools = ToolRegistry()

    def pay(amount: int) -> dict[str, Any]:
        with effects.open("a") as f:
            f.write(f"paid {amount}\n")
        return {"paid": amount}

    tools.register(pay, name="pay", effect="write")
    return tools


def replay(url: str, effects: Path) -> list[tuple[str, CallState]]:
    with Gate(gate_tools(effects), url) as gate:
        done = gate.run(SSEDecoder().feed(RAW_SSE), task_id="t", provider="openai-chat")
    return [(o.call_id, o.state) for o in done.outcomes]


def cli(*args: str | Path) -> Any:
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def archive_all(url: str, tmp_path: Path) -> dict[str, Any]:
    key = tmp_path / "ledger.key"
    if not key.exists():
        cli("audit", "keygen", "ledger.example/agent-gate", "--out", key)
    out = tmp_path / f"archive{len(list(tmp_path.glob('archive*')))}"
    done = cli("audit", "archive", "--before", FUTURE, "--out", out, "--signing-key", key,
               "--db", url, "--json")
    report: dict[str, Any] = json.loads(done.output)
    return report


def rows(url: str, table: Any, *where: Any) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table).where(*where))
                       .scalar() or 0)
    finally:
        engine.dispose()


def paid(effects: Path) -> list[str]:
    return effects.read_text().splitlines() if effects.exists() else []


@pytest.fixture
def archived(db_url: str, tmp_path: Path) -> Path:
    """``call_pay`` run once through a Gate from raw SSE bytes, then archived."""
    effects = tmp_path / "effects.log"
    assert replay(db_url, effects) == [("call_pay", CallState.SUCCEEDED)]
    assert paid(effects) == ["paid 5"]
    report = archive_all(db_url, tmp_path)
    assert report["calls"] == 1 and rows(db_url, TOOL_CALLS) == 0
    return effects


def test_the_same_raw_stream_replayed_through_the_gate_never_runs_the_call_again(
    db_url: str, archived: Path
) -> None:
    for _ in range(2):
        assert replay(db_url, archived) == [("call_pay", CallState.SUCCEEDED)]
    assert paid(archived) == ["paid 5"]
    assert rows(db_url, TOOL_CALLS) == 0  # refused: nothing recorded anew


def test_a_second_worker_process_replaying_it_never_runs_it_either(
    db_url: str, archived: Path
) -> None:
    worker = subprocess.run([sys.executable, "-c", WORKER, db_url, str(archived)],
                            input=RAW_SSE, capture_output=True, timeout=120, check=False)
    assert worker.returncode == 0, worker.stderr.decode()[-2000:]
    assert json.loads(worker.stdout) == [["call_pay", "succeeded"]]
    assert paid(archived) == ["paid 5"]
    assert rows(db_url, TOOL_CALLS) == 0


def test_a_gate_that_remembers_recording_the_call_still_finds_it_archived(
    db_url: str, tmp_path: Path
) -> None:
    """A ledger reads a call it recorded before instead of inserting it again (a
    replay's fast path): archived since by another process, the row is gone, and the
    insert it then tries is refused as any other; the call is answered from its
    tombstone, not run."""
    effects = tmp_path / "effects.log"
    with Gate(gate_tools(effects), db_url) as gate:
        first = gate.run(SSEDecoder().feed(RAW_SSE), task_id="t", provider="openai-chat")
        assert [o.state for o in first.outcomes] == [CallState.SUCCEEDED]
        archive_all(db_url, tmp_path)  # the CLI: another engine, another ledger
        assert rows(db_url, TOOL_CALLS) == 0
        again = gate.run(SSEDecoder().feed(RAW_SSE), task_id="t", provider="openai-chat")
    assert [(o.call_id, o.state, o.replayed) for o in again.outcomes] == [
        ("call_pay", CallState.SUCCEEDED, True)]
    assert paid(effects) == ["paid 5"]
    assert rows(db_url, TOOL_CALLS) == 0


def test_the_ledger_answers_by_call_id_or_key_from_the_tombstone(
    db_url: str, tmp_path: Path
) -> None:
    def new(call_id: str, key: str) -> NewCall:
        return NewCall(task_id="t", call_id=call_id, idem_key=key, tool="tool",
                       effect="write", idempotency="none", args_hash="0" * 64, arguments={})

    with Ledger(db_url) as ledger:
        rec, _ = ledger.record(new("c1", "key:1"))
        ledger.transition(rec, Event.REJECT, actor="test")
    archive_all(db_url, tmp_path)
    with Ledger(db_url) as ledger:
        for call in (new("c1", "key:other"), new("other", "key:1"), new("c1", "key:1")):
            rec, inserted = ledger.record(call)
            assert (inserted, rec.call_id, rec.state, rec.row_id) == (
                False, "c1", CallState.REJECTED, ARCHIVED_ROW)
        fresh, inserted = ledger.record(new("c2", "key:2"))  # a new identity goes in
        assert inserted and fresh.state is CallState.RECEIVED
    assert rows(db_url, TOOL_CALLS) == 1


def test_the_database_refuses_a_tombstoned_identity_from_any_writer(
    db_url: str, archived: Path
) -> None:
    """Not agent-gate's intake: a plain ``INSERT`` (an old worker, a script) is refused
    too, by call id and by dedupe key; a new identity is not."""
    engine = create_engine(db_url)
    row = {"task_id": "t", "tool": "pay", "effect": "write", "idempotency": "none",
           "args_hash": "0" * 64, "state": "received", "version": 0, "attempt": 0,
           "created_at": datetime.now(UTC), "updated_at": datetime.now(UTC)}
    key = engine_key(db_url)
    try:
        for call_id, idem_key in (("call_pay", "fresh-key"), ("fresh-id", key)):
            with pytest.raises(IntegrityError, match="agent_gate_archived"), \
                    engine.begin() as conn:
                conn.execute(insert(TOOL_CALLS).values(call_id=call_id, idem_key=idem_key,
                                                       **row))
        with engine.begin() as conn:
            conn.execute(insert(TOOL_CALLS).values(call_id="fresh-id", idem_key="fresh-key",
                                                   **row))
    finally:
        engine.dispose()
    assert rows(db_url, TOOL_CALLS) == 1


def engine_key(url: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.execute(select(ARCHIVED_CALLS.c.idem_key)).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.backends("postgresql")
def test_an_insert_racing_the_archive_batch_that_deleted_it_is_refused(
    db_url: str, tmp_path: Path
) -> None:
    """The batch deleted the row and wrote its tombstone, not committed yet; the call
    comes again meanwhile. Its insert waits on the unique index for the batch; once
    the batch commits, the row it conflicted with is gone and the insert goes through.
    A ``BEFORE`` trigger had looked already, before that commit, and recorded the call
    anew; the ``AFTER`` row trigger looks once the insert is in, and refuses it."""
    call = NewCall(task_id="t", call_id="c1", idem_key="key:1", tool="tool", effect="write",
                   idempotency="none", args_hash="0" * 64, arguments={})
    with Ledger(db_url) as ledger:
        rec, _ = ledger.record(call)
        ledger.transition(rec, Event.REJECT, actor="test")
    engine = create_engine(db_url)
    got: list[Any] = []
    try:
        with engine.connect() as batch:
            trans = batch.begin()
            found = batch.execute(select(TOOL_CALLS).where(TOOL_CALLS.c.call_id == "c1")
                                  ).mappings().one()
            batch.execute(insert(ARCHIVED_CALLS).values(
                task_id="t", call_id="c1", idem_key="key:1", record=tombstone_text(found),
                archive="batch-under-test"))
            batch.execute(AUDIT_EVENTS.delete().where(AUDIT_EVENTS.c.call_row_id == found["id"]))
            batch.execute(TOOL_CALLS.delete().where(TOOL_CALLS.c.id == found["id"]))
            holder = batch.execute(text("SELECT pg_backend_pid()")).scalar_one()

            def again() -> None:
                with Ledger(db_url) as ledger:
                    got.append(ledger.record(call))

            racer = threading.Thread(target=again)
            racer.start()
            with engine.connect() as watch:
                deadline = time.monotonic() + 60
                while not watch.execute(text(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE :holder = ANY(pg_blocking_pids(pid))"),
                        {"holder": holder}).scalar_one():
                    assert time.monotonic() < deadline, "the insert never waited for the batch"
                    watch.rollback()
                    time.sleep(0.01)
            trans.commit()
            racer.join(timeout=60)
    finally:
        engine.dispose()
    assert len(got) == 1
    rec, inserted = got[0]
    assert (inserted, rec.state, rec.row_id) == (False, CallState.REJECTED, ARCHIVED_ROW)
    assert rows(db_url, TOOL_CALLS) == 0
