"""``agent-gate mcp proxy`` end to end: a real MCP client, the proxy as a subprocess, a real
upstream MCP server behind it, and side effects counted in a file the ledger knows nothing of."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import mcp.types as mt
import pytest
from ledger_backends import PgSchema
from mcp_harness import ROOT, Setup
from sqlalchemy import text as sql
from waiting import wait_until

from agent_gate.ledger import Ledger

pytestmark = pytest.mark.slow  # each test starts the proxy and the upstream (two interpreters)


def meta(result: Any) -> dict[str, Any]:
    return dict(result.meta or {})


def text(result: Any) -> str:
    return " ".join(c.text for c in result.content if c.type == "text")


def test_a_write_runs_once_across_a_repeated_call_and_a_proxy_restart(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with setup.proxy("--task", "notes") as client:
            first = await client.call_tool("append_note", {"text": "hello"})
            again = await client.call_tool("append_note", {"text": "hello"})
            assert not first.is_error and text(first) == "appended, 1 lines"
            assert text(again) == "appended, 1 lines" and meta(again)["agent-gate/replayed"]
            assert meta(again)["agent-gate/call-id"] == meta(first)["agent-gate/call-id"]
        async with setup.proxy("--task", "notes") as client:  # a new process, same task
            after = await client.call_tool("append_note", {"text": "hello"})
            assert text(after) == "appended, 1 lines" and meta(after)["agent-gate/replayed"]
            other = await client.call_tool("append_note", {"text": "other"})
            assert text(other) == "appended, 2 lines"

    anyio.run(main)
    assert setup.lines() == ["note:hello", "note:other"]
    verify = setup.cli("audit", "verify")
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_denied_and_unnamed_tools_never_reach_the_upstream(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with setup.proxy("--task", "t") as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            # The policy names these tools; unlisted would be denied whatever its arguments
            # (and stamp is named, but the upstream offers it only once enabled).
            assert listed == {"append_note", "wipe", "count_lines", "send_payment",
                              "charge_card", "enable_stamp"}
            denied = await client.call_tool("wipe", {"target": "everything"})
            assert denied.is_error
            assert meta(denied)["agent-gate/rule-ids"] == ["never-wipe"]
            assert meta(denied)["agent-gate/code"] == "policy_denied"
            assert "Nothing is wiped through the agent." in text(denied)
            hidden = await client.call_tool("unlisted", {"text": "x"})
            assert hidden.is_error and meta(hidden)["agent-gate/state"] == "rejected"
            bad = await client.call_tool("append_note", {"text": 5})
            assert bad.is_error and meta(bad)["agent-gate/code"] == "schema_invalid"
            read = await client.call_tool("count_lines", {})
            assert text(read) == "0"

    anyio.run(main)
    assert setup.lines() == []


def listening(pg: PgSchema) -> bool:
    """Whether a session of ``pg``'s ledger sits in ``LISTEN`` (a held call's waiter)."""
    with pg.admin.connect() as conn:
        return bool(conn.execute(sql(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name "
            "AND query LIKE 'LISTEN %'"), {"name": pg.name}).scalar())


def test_an_approval_releases_the_held_request_and_the_call_runs_once(
    tmp_path: Path, db_url: str, pg: PgSchema | None
) -> None:
    setup = Setup(tmp_path, url=db_url)
    progress: list[tuple[float, float | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total))

    async def main() -> None:
        async with setup.proxy("--task", "pay", "--approval-wait", "never") as client:
            results: list[Any] = []

            async def pay() -> None:
                results.append(await client.call_tool(
                    "send_payment", {"to": "bob", "cents": 5000}, progress_callback=on_progress
                ))

            async with anyio.create_task_group() as tg:
                tg.start_soon(pay)
                # The request is held: the proxy reports progress while the call waits.
                await anyio.to_thread.run_sync(
                    lambda: wait_until(lambda: progress, what="a progress notification")
                )
                with Ledger(setup.db) as ledger:
                    (waiting,) = ledger.calls("pay")
                assert waiting.state.value == "awaiting_approval" and setup.lines() == []
                if pg is not None:  # the held request waits on LISTEN/NOTIFY, not polling
                    await anyio.to_thread.run_sync(
                        lambda: wait_until(lambda: listening(pg), what="a LISTEN session")
                    )
                approved = await setup.acli("approve", waiting.call_id, "--task", "pay",
                                            "--by", "ana")
                assert approved.returncode == 0, approved.stderr
            (result,) = results
            assert progress[0][1] is None  # held without a limit: no total to report
            assert not result.is_error and text(result) == "paid, 1 lines"
            assert meta(result)["agent-gate/call-id"] == waiting.call_id
            again = await client.call_tool("send_payment", {"to": "bob", "cents": 5000})
            assert text(again) == "paid, 1 lines" and meta(again)["agent-gate/replayed"]

    anyio.run(main)
    assert setup.lines() == ["pay:bob:5000"]


def test_when_the_wait_ends_the_same_call_attaches_to_the_waiting_one(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with setup.proxy("--task", "pay", "--approval-wait", "0.2s") as client:
            first = await client.call_tool("send_payment", {"to": "eve", "cents": 2000})
            call_id = meta(first)["agent-gate/call-id"]
            assert first.is_error and meta(first)["agent-gate/state"] == "awaiting_approval"
            assert call_id in text(first) and "agent-gate approve" in text(first)
            retry = await client.call_tool("send_payment", {"to": "eve", "cents": 2000})
            assert meta(retry)["agent-gate/call-id"] == call_id  # attached, not a second call
            assert (await setup.acli("approve", call_id, "--task", "pay", "--by", "ana")
                    ).returncode == 0
            ran = await client.call_tool("send_payment", {"to": "eve", "cents": 2000})
            assert not ran.is_error and text(ran) == "paid, 1 lines"
            assert meta(ran)["agent-gate/call-id"] == call_id

    anyio.run(main)
    assert setup.lines() == ["pay:eve:2000"]
    with Ledger(setup.db) as ledger:
        assert len(ledger.calls("pay")) == 1


def test_a_client_call_id_in_meta_names_the_call(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with setup.proxy() as client:  # no --task: one task for this client session
            one = await client.call_tool("append_note", {"text": "tick"},
                                         meta={"agent-gate/call-id": "tick-1"})
            two = await client.call_tool("append_note", {"text": "tick"},
                                         meta={"agent-gate/call-id": "tick-2"})
            retry = await client.call_tool("append_note", {"text": "tick"},
                                           meta={"agent-gate/call-id": "tick-1"})
            clash = await client.call_tool("append_note", {"text": "tock"},
                                           meta={"agent-gate/call-id": "tick-1"})
            assert (text(one), text(two), text(retry)) == (
                "appended, 1 lines", "appended, 2 lines", "appended, 1 lines")
            assert meta(retry)["agent-gate/replayed"]
            assert clash.is_error and meta(clash)["agent-gate/code"] == "conflict"
            assert meta(one)["agent-gate/task"].startswith("mcp-")

    anyio.run(main)
    assert setup.lines() == ["note:tick", "note:tick"]


def test_a_tool_that_reports_an_error_failed_and_is_never_run_again(tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    card = "4111-1111-1111-1111"
    said = (f"Error executing tool charge_card: card {card} declined: "
            "insufficient funds for 700 cents")

    async def main() -> None:
        async with setup.proxy("--task", "shop") as client:
            first = await client.call_tool("charge_card", {"card": card, "cents": 700})
            assert first.is_error and text(first) == said  # the upstream's own result
            assert meta(first)["agent-gate/state"] == "failed"
            assert not meta(first)["agent-gate/replayed"]
            again = await client.call_tool("charge_card", {"card": card, "cents": 700})
            assert again.is_error and meta(again)["agent-gate/replayed"]
            assert meta(again)["agent-gate/state"] == "failed"
            # The ledger kept the error's text with the argument values taken out.
            assert "declined: insufficient funds for" in text(again)
            assert card not in text(again) and meta(again)["agent-gate/call-id"] in text(again)
        async with setup.proxy("--task", "shop") as client:  # after a restart: still failed
            later = await client.call_tool("charge_card", {"card": card, "cents": 700})
            assert later.is_error and meta(later)["agent-gate/state"] == "failed"

    anyio.run(main)
    assert setup.lines() == [f"charge:{card}:700"]  # it ran once, and only once
    with Ledger(setup.db) as ledger:
        (rec,) = ledger.calls("shop")
        assert rec.state.value == "failed" and rec.error is not None
        assert rec.error["type"] == "MCPError" and card not in rec.error["message"]
        assert ledger.verify_audit().ok


def test_a_dedupe_key_makes_calls_that_agree_on_it_one_call(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with setup.proxy("--task", "pay", "--dedupe", "send_payment=to") as client:
            first = await client.call_tool("send_payment", {"to": "fay", "cents": 500})
            assert text(first) == "paid, 1 lines"
            # Named as another call by the client: still the same payment to fay.
            retry = await client.call_tool("send_payment", {"to": "fay", "cents": 500},
                                           meta={"agent-gate/call-id": "retry-7"})
            assert text(retry) == "paid, 1 lines" and meta(retry)["agent-gate/replayed"]
            # The same key with other arguments: a conflict that never runs.
            other = await client.call_tool("send_payment", {"to": "fay", "cents": 600})
            assert other.is_error and meta(other)["agent-gate/code"] == "conflict"
            gus = await client.call_tool("send_payment", {"to": "gus", "cents": 500})
            assert text(gus) == "paid, 2 lines"

    anyio.run(main)
    assert setup.lines() == ["pay:fay:500", "pay:gus:500"]


@pytest.mark.parametrize("option, status, said", [
    ("send_payment=nope", 1, "does not declare: nope"),
    ("ghost=a", 1, "the upstream offers no tool 'ghost'"),
    ("unlisted=text", 1, "only reads"),
    ("send_payment", 2, "is not TOOL=FIELD"),
])
def test_a_dedupe_key_the_proxy_cannot_honour_stops_it(
    tmp_path: Path, option: str, status: int, said: str
) -> None:
    setup = Setup(tmp_path)
    done = subprocess.run([sys.executable, *setup.proxy_args("--dedupe", option)],
                          env=setup.env, cwd=str(ROOT), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == status, done.stderr
    assert said in done.stderr
    assert setup.lines() == []


def test_tools_the_upstream_adds_are_offered_and_changed_schemas_are_not_taken(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path)
    told: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            told.append(message.method)

    async def main() -> None:
        async with setup.proxy("--task", "t", message_handler=on_message) as client:
            before = {t.name: t for t in (await client.list_tools()).tools}
            assert "stamp" not in before
            assert text(await client.call_tool("enable_stamp", {})) == "enabled, 1 lines"
            # The upstream said its tools changed: the proxy re-read them and says so too.
            await anyio.to_thread.run_sync(
                lambda: wait_until(lambda: told, what="tools/list_changed from the proxy"))
            after = {t.name: t for t in (await client.list_tools()).tools}
            assert "stamp" in after
            # count_lines now wants an argument upstream; the gate keeps the schema it
            # registered, and offers that one.
            assert after["count_lines"].input_schema == before["count_lines"].input_schema
            assert text(await client.call_tool("stamp", {"text": "ok"})) == "stamped, 2 lines"

    anyio.run(main)
    assert setup.lines() == ["enable_stamp", "stamp:ok"]
    with Ledger(setup.db) as ledger:
        assert {c.tool for c in ledger.calls("t")} == {"enable_stamp", "stamp"}


def test_a_duplicate_by_dedupe_key_waits_on_the_call_it_duplicates(tmp_path: Path) -> None:
    setup = Setup(tmp_path)

    async def main() -> None:
        async with setup.proxy("--task", "pay", "--dedupe", "send_payment=to",
                               "--approval-wait", "0.3s") as client:
            first = await client.call_tool("send_payment", {"to": "hal", "cents": 9000})
            held_by = meta(first)["agent-gate/call-id"]
            assert meta(first)["agent-gate/state"] == "awaiting_approval"
            twin = await client.call_tool("send_payment", {"to": "hal", "cents": 9000},
                                          meta={"agent-gate/call-id": "twin"})
            assert meta(twin)["agent-gate/state"] == "awaiting_approval", text(twin)
            assert held_by in text(twin)  # it names the call to approve
            assert (await setup.acli("approve", held_by, "--task", "pay", "--by", "ana")
                    ).returncode == 0
            paid = await client.call_tool("send_payment", {"to": "hal", "cents": 9000},
                                          meta={"agent-gate/call-id": "twin"})
            assert text(paid) == "paid, 1 lines"

    anyio.run(main)
    assert setup.lines() == ["pay:hal:9000"]


def test_a_shadow_policy_is_recorded_never_enforced(tmp_path: Path) -> None:
    """``mcp proxy --shadow FILE``: the draft's would-be decision lands in the call's
    audit entry; the enforced policy alone decides what reaches the upstream."""
    setup = Setup(tmp_path)
    draft = tmp_path / "draft.yaml"
    draft.write_text("version: 1\ntools:\n  count_lines:\n"
                     "    rules: [{id: draft-no-reads, effect: deny}]\n", encoding="utf-8")

    async def main() -> None:
        async with setup.proxy("--task", "t", "--shadow", str(draft)) as client:
            read = await client.call_tool("count_lines", {})
            assert not read.is_error and text(read) == "0"
            call_id = meta(read)["agent-gate/call-id"]
        with Ledger(setup.db) as ledger:
            decided = [e for e in ledger.audit("t", call_id=call_id)
                       if e.to_state == "authorized"]
        assert len(decided) == 1
        shadow = decided[0].detail["shadow"]
        assert shadow == {"verdict": "deny", "rule_ids": ["draft-no-reads"],
                          "policy_hash": shadow["policy_hash"], "differs": True}

    anyio.run(main)
