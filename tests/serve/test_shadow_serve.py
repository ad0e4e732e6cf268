"""``agent-gate serve --policy P --shadow DRAFT`` as an operator runs it (a real
process on a loopback port): the draft is read and checked before the server
listens, and what it would decide is recorded by no answer given here. The server
decides no call (it answers them: approve, deny, resolve), so a draft is recorded
where calls are decided (``run``, ``resume``, ``mcp proxy``, a ``Gate``), and the
approvals given here stay bound to the enforced policy's hash."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from serve_world import POLICY, World

from agent_gate.cli import main
from agent_gate.ledger import Ledger
from agent_gate.policy import Policy

# the world's policy with every mail denied instead of sent to a person
DRAFT = POLICY.replace(
    "      - id: mail-needs-a-person\n        effect: approve",
    "      - id: draft-no-mail\n        effect: deny",
).replace("        approval: {editable: [subject, body]}\n", "")  # approve rules only


def _serve(world: World, draft: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent_gate", "serve", "--db", world.url,
         "--policy", str(world.policy), "--shadow", str(draft), "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"})


@pytest.mark.slow
def test_serve_reads_the_draft_first_and_binds_answers_to_the_enforced_policy(
    world: World, tmp_path: Path
) -> None:
    assert "draft-no-mail" in DRAFT
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ntools:\n  x: {rules: [{id: a, efect: allow}]}\n")
    refused = subprocess.run(
        [sys.executable, "-m", "agent_gate", "serve", "--db", world.url, "--policy",
         str(world.policy), "--shadow", str(bad), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1, refused.stderr
    assert f"{bad}:3:23: tools.x.rules[0].efect: unknown key" in refused.stderr
    assert "Traceback" not in refused.stderr and "http://" not in refused.stderr

    draft = tmp_path / "draft.yaml"
    draft.write_text(DRAFT)
    before = len(world.audit())
    proc = _serve(world, draft)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/inbox", line)
        assert match, line
        with httpx.Client(base_url=f"http://127.0.0.1:{match.group(1)}") as http:
            path, body = world.answer("t1", "mail-1")
            approved = http.post(f"{path}/approve", json={**body, "reason": "ok"},
                                 headers={"Authorization": f"Bearer {world.tokens['bob']}"})
        assert approved.status_code == 200, approved.text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with Ledger(world.url) as ledger:
        rec = ledger.get("t1", "mail-1")
        assert rec is not None
        approval = ledger.approval(rec)
    assert approval is not None
    # bound to what is enforced: the draft (which would deny the mail) changes nothing
    assert approval.policy_hash == Policy.load(world.policy).hash
    assert approval.policy_hash != Policy.load(draft).hash
    written = world.audit()[before:]
    assert [e.event for e in written if e.call_id == "mail-1"] == ["approval_granted"]
    assert not any("shadow" in (e.detail or {}) for e in written)
    report = CliRunner().invoke(main, ["policy", "shadow-report", "--db", world.url, "--json"])
    assert report.exit_code == 0, report.output
    assert json.loads(report.stdout)["shadowed"] == 0
