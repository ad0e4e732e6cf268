"""``agent-gate policy check`` and ``agent-gate policy explain``, as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agent_gate.cli import main

from .conftest import EXAMPLE

BROKEN = """\
version: 1
tools:
  send_email:
    rules:
      - id: internal
        effect: allow
        when:
          - arg: to
            emial_domain: [example.com]
"""


def run(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


def test_check_accepts_the_example_policy() -> None:
    result = run("policy", "check", str(EXAMPLE))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith(f"ok {EXAMPLE}: 5 tools, ")
    assert "sha256:" in result.stdout
    assert result.stderr == ""


def test_check_names_file_line_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN, encoding="utf-8")
    result = run("policy", "check", str(EXAMPLE), str(bad))
    assert result.exit_code == 1
    assert f"ok {EXAMPLE}" in result.stdout  # the good file is still reported
    line = result.stderr.strip().splitlines()[0]
    assert line.startswith(f"{bad}:9:13: tools.send_email.rules[0].when[0].emial_domain: ")
    assert "unknown key" in line


def test_check_reports_unreadable_files(tmp_path: Path) -> None:
    result = run("policy", "check", str(tmp_path / "missing.yaml"))
    assert result.exit_code == 1
    assert "missing.yaml: cannot read" in result.stderr


def test_explain_human_output() -> None:
    args = json.dumps({"to": "someone@gmail.com", "subject": "s", "body": "PRIVATE-BODY"})
    result = run("policy", "explain", str(EXAMPLE), "--tool", "send_email", "--args", args)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0] == "decision: approve"
    assert "decided by: email-external-needs-approval" in out
    assert "Mail to any other domain is read by a person first." in out
    assert "email-internal" in out  # every rule appears in the table
    assert "note: no ledger here; usage assumed 0 for: send_email/calls" in out
    assert "PRIVATE-BODY" not in out and "gmail" not in out  # arguments are not echoed


def test_explain_json_with_principal_options_and_usage() -> None:
    base = ["policy", "explain", str(EXAMPLE), "--tool", "refund", "--json"]
    args = json.dumps({"order_id": "ORD-123456", "amount": 1500})
    denied = json.loads(run(*base, "--args", args).stdout)
    assert (denied["effect"], denied["rule_ids"]) == ("deny", ["refund-finance-only-above-1000"])
    assert denied["policy_hash"].startswith("sha256:")
    assert denied["policy_source"] == str(EXAMPLE)

    finance = json.loads(run(*base, "--args", args, "--role", "finance").stdout)
    assert (finance["effect"], finance["rule_ids"]) == ("approve", ["refund-large-needs-approval"])
    assert finance["assumed_zero_usage"] == ["refund/calls", "refund/sum/amount"]

    as_json = json.dumps({"id": "u1", "roles": ["finance"], "attributes": {"suspended": True}})
    suspended = json.loads(run(*base, "--args", args, "--principal", as_json).stdout)
    assert suspended["rule_ids"] == ["suspended-principals-do-nothing"]
    attr = json.loads(run(*base, "--args", args, "--attr", "suspended=true").stdout)
    # Without the finance role the amount rule denies too: every deny that holds is named.
    assert attr["rule_ids"] == ["suspended-principals-do-nothing", "refund-finance-only-above-1000"]

    over = json.loads(
        run(*base, "--args", args, "--role", "finance", "--usage", "refund/sum/amount=600").stdout
    )
    assert (over["effect"], over["rule_ids"]) == ("deny", ["refund-total-per-task"])
    assert over["assumed_zero_usage"] == ["refund/calls"]
    (total,) = [lim for lim in over["limits"] if lim["id"] == "refund-total-per-task"]
    assert (total["used"], total["maximum"], total["exceeded"]) == (600, 2000, True)


def test_explain_scope_and_args_from_stdin() -> None:
    result = run(
        "policy",
        "explain",
        str(EXAMPLE),
        "--tool",
        "send_email",
        "--args",
        "-",
        "--scope",
        "triage",
        "--json",
        stdin='{"to": "ana@example.com", "subject": "s", "body": "b"}',
    )
    decision = json.loads(result.stdout)
    assert (decision["effect"], decision["rule_ids"]) == ("deny", ["agent-gate:task-scope"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--args", '{"to": "SECRET-VALUE'], "--args is not valid JSON"),
        (["--args", "{}", "--usage", "nope=1"], "unknown counter 'nope'"),
        (["--args", "{}", "--principal", "{}", "--role", "x"], "either --principal"),
        (["--args", "{}", "--attr", "novalue"], "expected KEY=VALUE"),
    ],
)
def test_explain_rejects_bad_options_without_echoing_them(extra: list[str], message: str) -> None:
    result = run("policy", "explain", str(EXAMPLE), "--tool", "send_email", *extra)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "SECRET-VALUE" not in result.stderr + result.stdout


def test_explain_with_an_invalid_policy_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN, encoding="utf-8")
    result = run("policy", "explain", str(bad), "--tool", "send_email", "--args", "{}")
    assert result.exit_code == 1
    assert f"{bad}:9:13:" in result.stderr


def test_console_script_runs_policy_check(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent(BROKEN), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "agent_gate", "policy", "check", str(EXAMPLE), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"ok {EXAMPLE}")
    assert f"{bad}:9:13: tools.send_email.rules[0].when[0].emial_domain: unknown key" in (
        proc.stderr
    )
