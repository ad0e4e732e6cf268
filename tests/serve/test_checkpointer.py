"""``agent-gate serve`` takes audit checkpoints on a timer.

Driven through ``create_app`` under uvicorn on loopback (``serve_world.serving``), on
each ledger backend: checkpoints appear while the server runs, bind every task's head,
follow new entries, verify against an anchor; a checkpoint the ledger refuses (a forged
entry after the last one) is logged as an error and the server keeps serving.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from serve_world import World, serving
from sqlalchemy import insert, select
from waiting import wait_until

from agent_gate.ledger import Ledger
from agent_gate.ledger.checkpoints import newest_of
from agent_gate.ledger.models import AUDIT_CHECKPOINT_HEADS, AUDIT_EVENTS
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
            bound = set(conn.execute(select(AUDIT_CHECKPOINT_HEADS.c.task_id)).scalars())
        assert {"t1", "t2"} <= bound
        report = ledger.verify_audit(anchor=(made.id, made.hash))
    assert report.ok, report.problem


def test_a_refused_checkpoint_is_logged_and_the_server_keeps_serving(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    with serving(world, FAST) as running:
        wait_until(lambda: _newest_id(world.url) >= 1, what="a first checkpoint")
        caplog.set_level(logging.ERROR, logger="agent_gate.serve")
        with Ledger(world.url) as ledger, ledger.engine.begin() as conn:
            # A forged entry: its hash is not the hash of its fields.
            conn.execute(insert(AUDIT_EVENTS).values(
                at=datetime.now(UTC), task_id="t1", event="forged", actor="someone",
                seq=99, prev_hash="0" * 64, hash="f" * 64))
        wait_until(lambda: any("checkpoint refused" in r.getMessage() for r in caplog.records),
                   what="the refusal logged")
        assert httpx.get(f"{running.base}/health", timeout=10).json() == {"status": "ok"}
    refusal = next(r for r in caplog.records if "checkpoint refused" in r.getMessage())
    assert refusal.levelno == logging.ERROR and "'t1'" in refusal.getMessage()


def test_a_configured_key_signs_each_checkpoint_and_a_witness_keeps_them(
    world: World, tmp_path: Path
) -> None:
    import os

    from agent_gate.evidence.checkpoint import open_checkpoint
    from agent_gate.evidence.note import SignerKey

    signer = SignerKey.generate("serve.example/ledger")
    key = tmp_path / "ledger.key"
    key.write_text(signer.text)
    os.chmod(key, 0o600)
    witness = tmp_path / "witness"
    witness.mkdir()
    config = ServeConfig(checkpoint_every=0.05, checkpoint_signing_key=str(key),
                         checkpoint_publish=(str(witness),))
    with serving(world, config):
        wait_until(lambda: (witness / "latest.note").is_file(), what="a published checkpoint")
        first = open_checkpoint((witness / "latest.note").read_text(), signer.verifier)[0]
        world.call("t2", "mail-2", "send_email",
                   {"to": "bo@elsewhere.org", "subject": "Hi", "body": "Hello"})
        wait_until(lambda: open_checkpoint((witness / "latest.note").read_text(),
                                           signer.verifier)[0].size > first.size,
                   what="the next checkpoint published")
    with Ledger(world.url) as ledger:
        made = newest_of(ledger.engine)
    assert made is not None and made.note is not None
    assert open_checkpoint(made.note, signer.verifier)[0].size == made.tree_size
    assert len(list(witness.glob("0*.note"))) >= 2


def test_publishing_without_a_signing_key_is_refused_at_start(tmp_path: Path) -> None:
    from agent_gate.errors import GateUsageError
    from agent_gate.serve.webhooks import load_config

    path = tmp_path / "serve.yaml"
    path.write_text(f"checkpoint_publish: [{tmp_path / 'w'}]\n")
    with pytest.raises(GateUsageError, match="checkpoint_publish needs checkpoint_signing_key"):
        load_config(str(path))
