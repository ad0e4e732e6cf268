"""``agent-gate serve`` takes audit checkpoints on a timer.

Driven through ``create_app`` under uvicorn on loopback (``serve_world.serving``), on
each ledger backend: checkpoints appear while the server runs, bind every task's head,
follow new entries, verify against an anchor; a checkpoint the ledger refuses (a bound
head deleted) is logged as an error and the server keeps serving.
"""

from __future__ import annotations

import logging

import httpx
import pytest
from serve_world import World, serving
from sqlalchemy import delete
from waiting import wait_until

from agent_gate.ledger import Ledger
from agent_gate.ledger.checkpoints import current_heads, newest_of
from agent_gate.ledger.models import AUDIT_HEADS
from agent_gate.serve.webhooks import ServeConfig

FAST = ServeConfig(checkpoint_every=0.05)


def _newest_id(url: str) -> int:
    with Ledger(url) as ledger:
        made = newest_of(ledger.engine)
    return made.id if made is not None else 0


def test_checkpoints_are_taken_and_follow_new_entries(world: World) -> None:
    with serving(world, FAST):
        wait_until(lambda: _newest_id(world.url) >= 1, what="a first checkpoint")
        first = _newest_id(world.url)
        assert world.call("t2", "mail-2", "send_email",
                          {"to": "bo@elsewhere.org", "subject": "Hi", "body": "Hello"}) \
            == "awaiting_approval"
        wait_until(lambda: _newest_id(world.url) > first, what="a checkpoint binding t2")
    with Ledger(world.url) as ledger:
        made = newest_of(ledger.engine)
        assert made is not None
        with ledger.engine.connect() as conn:
            heads = current_heads(conn)
        assert {"t1", "t2"} <= set(heads)
        report = ledger.verify_audit(anchor=(made.id, made.hash))
    assert report.ok, report.problem


def test_a_refused_checkpoint_is_logged_and_the_server_keeps_serving(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    with serving(world, FAST) as running:
        wait_until(lambda: _newest_id(world.url) >= 1, what="a first checkpoint")
        caplog.set_level(logging.ERROR, logger="agent_gate.serve")
        with Ledger(world.url) as ledger, ledger.engine.begin() as conn:
            conn.execute(delete(AUDIT_HEADS).where(AUDIT_HEADS.c.task_id == "t1"))
        wait_until(lambda: any("checkpoint refused" in r.getMessage() for r in caplog.records),
                   what="the refusal logged")
        assert httpx.get(f"{running.base}/health", timeout=10).json() == {"status": "ok"}
    refusal = next(r for r in caplog.records if "checkpoint refused" in r.getMessage())
    assert refusal.levelno == logging.ERROR and "'t1'" in refusal.getMessage()
