"""``agent-gate operator`` and ``agent-gate serve`` as an operator runs them: real
processes on a real ledger file, the server on a loopback port it picked itself."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from serve_world import ESCALATING, World

from agent_gate.ledger import Ledger


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_gate", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "NO_COLOR": "1"})


def test_operator_add_prints_the_token_once_and_keeps_only_its_hash(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger(url, create=True).close()
    added = cli("operator", "add", "dora", "--approve", "send_email, refund",
                "--resolve", "*", "--db", url, "--json")
    assert added.returncode == 0, added.stderr
    shown = json.loads(added.stdout)
    token = shown["token"]
    assert (shown["name"], shown["approve"], shown["resolve"]) == \
        ("dora", ["send_email", "refund"], ["*"])
    assert re.fullmatch(r"agop_[A-Za-z0-9_-]{43}", token)  # 256 random bits
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        rows = db.execute("SELECT name, token_hash FROM operators").fetchall()
    assert rows == [("dora", hashlib.sha256(token.encode()).hexdigest())]
    assert token.encode() not in (tmp_path / "ledger.db").read_bytes()

    bad = cli("operator", "add", "no spaces", "--db", url)
    assert bad.returncode == 1 and "is not 1-100 letters" in bad.stderr
    again = cli("operator", "add", "dora", "--db", url, "--json")
    assert again.returncode == 1
    assert "exists already" in json.loads(again.stdout)["error"]["message"]
    listed = cli("operator", "list", "--db", url, "--json")
    assert [o["name"] for o in json.loads(listed.stdout)] == ["dora"]
    assert token not in listed.stdout
    assert cli("operator", "remove", "dora", "--db", url).returncode == 0
    assert json.loads(cli("operator", "list", "--db", url, "--json").stdout) == []
    gone = cli("operator", "remove", "dora", "--db", url)
    assert gone.returncode == 1 and "no operator 'dora'" in gone.stderr
    with Ledger(url) as ledger:
        events = [(e.event, e.detail["operator"]) for e in ledger.audit()]
    assert events == [("operator_added", "dora"), ("operator_removed", "dora")]


@pytest.mark.slow
def test_serve_listens_where_told_and_answers_with_a_token(world: World) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_gate", "serve", "--db", world.url,
         "--policy", str(world.policy), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/inbox", line)
        assert match, line
        base = f"http://127.0.0.1:{match.group(1)}"
        with httpx.Client(base_url=base) as http:
            assert http.get("/health").json() == {"status": "ok"}
            assert http.get("/api/approvals").status_code == 401
            waiting = http.get("/api/approvals",
                               headers={"Authorization": f"Bearer {world.tokens['bob']}"})
        assert [c["call_id"] for c in waiting.json()] == ["mail-1"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_refuses_a_listen_address_it_cannot_read(world: World) -> None:
    got = cli("serve", "--db", world.url, "--listen", "8765")
    assert got.returncode == 2 and "expected HOST:PORT" in got.stderr


def test_serve_refuses_a_checkpoint_interval_it_cannot_read(world: World) -> None:
    got = cli("serve", "--db", world.url, "--checkpoint-every", "soon",
              "--listen", "127.0.0.1:0")
    assert got.returncode == 2 and "--checkpoint-every" in got.stderr
    assert "a duration like 30m" in got.stderr


def test_serve_refuses_a_webhook_whose_secret_is_not_set(world: World, tmp_path: Path) -> None:
    conf = tmp_path / "serve.yaml"
    conf.write_text("notify:\n  - {name: ops, url: 'http://127.0.0.1:9/h', "
                    "secret_env: AG_UNSET_SECRET_FOR_TEST}\n")
    got = cli("serve", "--db", world.url, "--config", str(conf), "--listen", "127.0.0.1:0")
    assert got.returncode == 1 and "$AG_UNSET_SECRET_FOR_TEST is not set" in got.stderr


def test_serve_refuses_a_route_for_a_role_the_policy_never_names(
        world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A typo in a route's ``roles:`` would leave it deaf to every escalation: serve does
    not start, and says which route, which role, and the roles the policy knows; the
    routes' URLs and secrets are not in what it prints."""
    world.policy.write_text(ESCALATING)  # escalates a refund to finance
    secrets = {"AG_TEST_HOOK": "hook-secret-value", "AG_TEST_LINK": "link-secret-value",
               "AG_TEST_SMTP_USER": "smtp-user-value", "AG_TEST_SMTP_PW": "smtp-pw-value",
               "AG_TEST_SLACK_TOKEN": "xoxb-token-value",
               "AG_TEST_SLACK_SIGNING": "signing-secret-value"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    conf = tmp_path / "serve.yaml"
    conf.write_text(
        "notify:\n  - {name: ops, url: 'https://hooks.example/T0-path-token', "
        "secret_env: AG_TEST_HOOK, roles: [finance]}\n"
        "mail:\n  - {name: desk, host: smtp.example, sender: a@example.org, "
        "to: [b@example.org], username_env: AG_TEST_SMTP_USER, password_env: AG_TEST_SMTP_PW, "
        "link_secret_env: AG_TEST_LINK, roles: [finance]}\n"
        "slack:\n  - {name: approvals, channel: C0APPROVALS, token_env: AG_TEST_SLACK_TOKEN, "
        "signing_secret_env: AG_TEST_SLACK_SIGNING, events: [escalated], "
        "roles: [finance]}\n  - {name: legal, channel: C0LEGAL, "
        "token_env: AG_TEST_SLACK_TOKEN, signing_secret_env: AG_TEST_SLACK_SIGNING, "
        "events: [escalated], roles: [finanse]}\n")
    got = cli("serve", "--db", world.url, "--policy", str(world.policy), "--config",
              str(conf), "--listen", "127.0.0.1:0", timeout=60)  # a server that starts: fails
    assert got.returncode == 1, got.stderr
    assert "slack[1] 'legal': roles: names 'finanse'" in got.stderr
    assert "the policy's roles: 'finance'" in got.stderr
    said = got.stdout + got.stderr
    assert "T0-path-token" not in said
    assert all(value not in said for value in secrets.values())
