"""Signed checkpoints published to witnesses (files, directories), and the ledger checked
against one of them from it on (`audit verify --checkpoint NOTE --key KEY`), on every
backend."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sqlalchemy import text

from agent_gate.cli import main
from agent_gate.evidence.note import SignerKey
from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.backend import begin_write


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def run_calls(url: str, start: int, count: int) -> None:
    with Ledger(url) as ledger:
        for i in range(start, start + count):
            rec, _ = ledger.record(NewCall(
                task_id=f"t{i % 2}", call_id=f"c{i}", idem_key=f"call:c{i}", tool="tool",
                effect="write", idempotency="none", args_hash="0" * 64, arguments={}))
            ledger.transition(rec, Event.ALLOW, actor="test")


@pytest.fixture
def key(tmp_path: Path) -> tuple[Path, str]:
    signer = SignerKey.generate("ledger.example/witnessed")
    path = tmp_path / "signing.key"
    path.write_text(signer.text)
    os.chmod(path, 0o600)
    return path, signer.verifier.text


def publish(url: str, key: Path, sink: Path) -> dict[str, object]:
    done = cli("audit", "checkpoint", "--signing-key", key, "--publish", sink, "--db", url,
               "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


def verify_from(url: str, note: Path, vkey: str) -> Result:
    return cli("audit", "verify", "--checkpoint", note, "--key", vkey, "--db", url, "--json")


def test_the_ledger_is_checked_from_a_published_checkpoint_on(
    db_url: str, key: tuple[Path, str], tmp_path: Path
) -> None:
    path, vkey = key
    witness = tmp_path / "witness"
    witness.mkdir()
    run_calls(db_url, 0, 4)
    first = publish(db_url, path, witness)
    assert (witness / "latest.note").read_text() == first["note"]
    run_calls(db_url, 4, 3)
    done = verify_from(db_url, witness / "latest.note", vkey)
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    # Only the entries after the published checkpoint were read.
    with Ledger(db_url) as ledger:
        total = ledger.verify_audit().entries
    assert 0 < report["entries"] < total
    assert report["entries"] == total - first["tree"]["size"]  # type: ignore[index]
    second = publish(db_url, path, witness)
    assert sorted(p.name for p in witness.iterdir()) == sorted(
        [f"{first['tree']['size']:020d}.note", f"{second['tree']['size']:020d}.note",  # type: ignore[index]
         "latest.note"])


def test_a_ledger_rewritten_wholesale_after_publishing_is_caught(
    db_url: str, key: tuple[Path, str], tmp_path: Path
) -> None:
    path, vkey = key
    sink = tmp_path / "published.note"
    run_calls(db_url, 0, 3)
    publish(db_url, path, sink)
    with Ledger(db_url) as ledger, begin_write(ledger.engine) as conn:
        # Everything an attacker with the database (not the key) can redo: edit an
        # entry, rehash every chain, and take the checkpoints again.
        conn.execute(text("UPDATE audit_events SET actor = 'mallory' WHERE id = "
                          "(SELECT MIN(id) FROM audit_events)"))
        from support.audit_tamper import reseal

        reseal(conn)
        conn.execute(text("DELETE FROM audit_checkpoint_heads"))
        conn.execute(text("DELETE FROM audit_checkpoints"))
    with Ledger(db_url) as ledger:
        from agent_gate.ledger.checkpoints import take

        take(ledger.engine)
        assert ledger.verify_audit().ok  # the database alone cannot tell
    done = verify_from(db_url, sink, vkey)
    assert done.exit_code == 1
    problem = json.loads(done.output)["problem"]
    assert problem["kind"] == "anchor" and "another root" in problem["message"]


def test_entries_after_the_published_checkpoint_are_checked(
    db_url: str, key: tuple[Path, str], tmp_path: Path
) -> None:
    path, vkey = key
    sink = tmp_path / "published.note"
    run_calls(db_url, 0, 2)
    publish(db_url, path, sink)
    run_calls(db_url, 2, 2)
    with Ledger(db_url) as ledger, begin_write(ledger.engine) as conn:
        conn.execute(text("UPDATE audit_events SET actor = 'mallory' WHERE id = "
                          "(SELECT MAX(id) FROM audit_events)"))
    done = verify_from(db_url, sink, vkey)
    assert done.exit_code == 1 and json.loads(done.output)["problem"]["kind"] == "edited"


def test_a_later_checkpoints_heads_edited_are_caught_from_the_published_one(
    db_url: str, key: tuple[Path, str], tmp_path: Path
) -> None:
    """A checkpoint after the trusted one binds the heads that moved at it; verifying
    from the trusted checkpoint rehashes them (O(their heads)), so an edit of one is
    named, where it used to be left to a full verify."""
    path, vkey = key
    sink = tmp_path / "published.note"
    run_calls(db_url, 0, 2)
    publish(db_url, path, sink)
    run_calls(db_url, 2, 2)
    later = publish(db_url, path, tmp_path / "later.note")
    assert verify_from(db_url, sink, vkey).exit_code == 0
    with Ledger(db_url) as ledger, begin_write(ledger.engine) as conn:
        conn.execute(text("UPDATE audit_checkpoint_heads SET seq = seq - 1 WHERE "
                          "checkpoint_id = :id AND task_id = 't1'"), {"id": later["id"]})
    done = verify_from(db_url, sink, vkey)
    assert done.exit_code == 1, done.output
    problem = json.loads(done.output)["problem"]
    assert (problem["kind"], problem["seq"]) == ("checkpoint", later["id"]), problem


def test_entries_cut_off_a_chain_after_the_published_checkpoint_are_caught_by_its_head(
    db_url: str, key: tuple[Path, str], tmp_path: Path
) -> None:
    """The newest entries of a task deleted after the checkpoint: what is left links
    up, and only that task's head (read for the tasks the newer entries touched, not
    every task the ledger ever had) says entries are missing."""
    path, vkey = key
    sink = tmp_path / "published.note"
    run_calls(db_url, 0, 6)  # tasks t0 and t1, and heads of tasks nobody touches again
    with Ledger(db_url) as ledger:
        for n in range(20):
            ledger.ensure_task(f"idle{n}")
    publish(db_url, path, sink)
    run_calls(db_url, 6, 4)
    with Ledger(db_url) as ledger, begin_write(ledger.engine) as conn:
        conn.execute(text("DELETE FROM audit_events WHERE id = "
                          "(SELECT MAX(id) FROM audit_events WHERE task_id = 't1')"))
    done = verify_from(db_url, sink, vkey)
    assert done.exit_code == 1, done.output
    problem = json.loads(done.output)["problem"]
    assert problem["kind"] == "deleted" and "head of task 't1'" in problem["message"]


def test_a_witness_never_goes_backwards(
    sqlite_url: str, key: tuple[Path, str], tmp_path: Path
) -> None:
    path, vkey = key
    sink = tmp_path / "published.note"
    run_calls(sqlite_url, 0, 2)
    old = publish(sqlite_url, path, sink)["note"]
    run_calls(sqlite_url, 2, 2)
    newer = publish(sqlite_url, path, sink)["note"]
    from agent_gate.errors import EvidenceError
    from agent_gate.evidence.note import VerifierKey
    from agent_gate.evidence.witness import publish as hand_over

    with pytest.raises(EvidenceError, match="went back"):
        hand_over(str(old), VerifierKey.parse(vkey), sink)
    assert sink.read_text() == newer
    # The ledger's checkpoints as a backup taken before the newer one held them: verify
    # from the witness's copy names the rollback.
    with Ledger(sqlite_url) as ledger, begin_write(ledger.engine) as conn:
        conn.execute(text("DELETE FROM audit_checkpoint_heads WHERE checkpoint_id > 1"))
        conn.execute(text("DELETE FROM audit_checkpoints WHERE id > 1"))
    done = verify_from(sqlite_url, sink, vkey)
    assert done.exit_code == 1
    assert "rolled back" in json.loads(done.output)["problem"]["message"]


def test_publishing_needs_a_signing_key(sqlite_url: str, tmp_path: Path) -> None:
    done = cli("audit", "checkpoint", "--publish", tmp_path / "x.note", "--db", sqlite_url)
    assert done.exit_code != 0 and "--publish needs --signing-key" in done.output


class _Witness:
    """A real HTTP witness on loopback. Every POST is logged as ``(event id, status)``;
    the next ``failing`` ones are answered 500, a bad signature 401, the rest 200 (the
    note kept)."""

    def __init__(self, secret: bytes, failing: int = 0) -> None:
        import hashlib
        import hmac
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.kept: list[str] = []
        self.posts: list[tuple[str, int]] = []
        self.failing = failing
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                stamp = self.headers["X-Agent-Gate-Timestamp"]
                mac = hmac.new(secret, stamp.encode() + b"." + body, hashlib.sha256)
                good = self.headers["X-Agent-Gate-Signature"] == "sha256=" + mac.hexdigest()
                status = 401 if not good else 500 if outer.failing > 0 else 200
                outer.failing -= status == 500
                if status == 200:
                    outer.kept.append(body.decode())
                assert self.headers["X-Agent-Gate-Event"] == "checkpoint"
                outer.posts.append((self.headers["X-Agent-Gate-Event-Id"], status))
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/checkpoints"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_checkpoints_reach_an_http_witness_through_the_signed_outbox_at_least_once(
    db_url: str, key: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = key
    monkeypatch.setenv("AGENT_GATE_WITNESS_SECRET", "s3cret")
    witness, forger = _Witness(b"s3cret", failing=1), _Witness(b"another secret")
    try:
        run_calls(db_url, 0, 2)
        # A failed POST is tried again, signed again, and the checkpoint lands once.
        first = publish(db_url, path, witness.url)  # type: ignore[arg-type]
        assert witness.posts == [("1", 500), ("1", 200)]
        assert witness.kept == [first["note"]] and first["published"] == [witness.url]
        # Down for longer than one publish tries: the command fails, the other sinks
        # are still served, and the checkpoint stays in the outbox.
        witness.failing = 10
        run_calls(db_url, 2, 1)
        down = cli("audit", "checkpoint", "--signing-key", path, "--publish", witness.url,
                   "--publish", tmp_path / "also.note", "--db", db_url, "--json")
        assert down.exit_code == 1 and "not published to" in down.output
        assert "checkpoint 2" in down.output and "HTTP 500" in down.output
        assert (tmp_path / "also.note").is_file()
        assert witness.posts[2:] == [("2", 500)] * 3 and len(witness.kept) == 1
        # Back: the next publish sends what it missed first, then the new one, in order.
        witness.failing = 0
        run_calls(db_url, 3, 1)
        third = publish(db_url, path, witness.url)  # type: ignore[arg-type]
        assert witness.posts[5:] == [("2", 200), ("3", 200)]
        assert witness.kept[0] == first["note"] and witness.kept[2] == third["note"]
        assert "\n" in witness.kept[1] and witness.kept[1] == (tmp_path / "also.note").read_text()
        # Nothing new: nothing sent again (the cursor moved only after each 2xx).
        publish(db_url, path, witness.url)  # type: ignore[arg-type]
        assert [p for p in witness.posts if p[0] in ("1", "2", "3")] == witness.posts[:7]
        # A receiver holding another secret refuses the signature: not delivered.
        wrong = cli("audit", "checkpoint", "--signing-key", path, "--publish", forger.url,
                    "--db", db_url)
        assert wrong.exit_code == 1 and "HTTP 401" in wrong.output and forger.kept == []
        monkeypatch.delenv("AGENT_GATE_WITNESS_SECRET")
        unset = cli("audit", "checkpoint", "--signing-key", path, "--publish", witness.url,
                    "--db", db_url)
        assert unset.exit_code == 1 and "AGENT_GATE_WITNESS_SECRET" in unset.output
    finally:
        witness.close()
        forger.close()
