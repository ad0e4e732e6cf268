"""A call's state rewritten in ``tool_calls`` is caught by ``audit verify`` and never run.

The rows of ``tool_calls`` are not hashed; their states are backed by the audit trail
instead (each state was written by a transition entry). A raw ``UPDATE`` that puts a
finished call back to ``authorized`` must not verify clean, and a resume must not run
the tool a second time.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from support.calls import Counting, call

from agent_gate import CallState, Gate
from agent_gate.cli import main as cli


def raw_sql(url: str, sql: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    finally:
        engine.dispose()


def verify(url: str, *extra: str) -> Any:
    return CliRunner().invoke(cli, ["audit", "verify", "--db", url, *extra])


@pytest.mark.parametrize("flipped_to", ["authorized", "awaiting_approval"])
def test_a_finished_call_put_back_by_sql_fails_verify_and_does_not_run_again(
    db_url: str, flipped_to: str
) -> None:
    tool = Counting()
    with Gate(tool.tools, db_url) as gate:
        for call_id in ("c1", "c2"):
            assert gate.execute("t", call(call_id, n=call_id)).state is CallState.SUCCEEDED
    assert tool.runs == 2
    clean = verify(db_url)
    assert clean.exit_code == 0, clean.output

    raw_sql(db_url, f"UPDATE tool_calls SET state = '{flipped_to}' WHERE call_id = 'c1'")

    broken = verify(db_url)
    assert broken.exit_code == 1
    assert "call 'c1' of task 't'" in broken.output
    assert f"is '{flipped_to}' but its audit trail last recorded 'succeeded'" in broken.output
    as_json = verify(db_url, "--json")
    assert as_json.exit_code == 1
    assert json.loads(as_json.output)["problem"]["kind"] == "state_rewritten"

    with Gate(tool.tools, db_url) as gate:
        outcomes = gate.resume("t")
        again = gate.execute("t", call("c1", n="c1"))
        rec = gate.ledger.get("t", "c1")
        refusals = [e for e in gate.ledger.audit("t", call_id="c1")
                    if e.event == "state_not_in_audit"]
    assert tool.runs == 2  # not a second time
    assert [o.call_id for o in outcomes] == ["c1"]
    assert outcomes[0].state.value == flipped_to and not outcomes[0].ran
    assert again.state.value == flipped_to and not again.ran
    if flipped_to == "authorized":
        assert rec is not None and rec.reason_code == "state_not_in_audit"
        assert "its audit trail last recorded 'succeeded'" in (rec.reason or "")
        assert refusals and refusals[0].detail == {"audited_state": "succeeded",
                                                   "version": rec.version}
    # Still reported until someone looks: refusing wrote no transition.
    assert verify(db_url).exit_code == 1


def test_a_call_row_with_no_trail_at_all_fails_verify_and_does_not_run(db_url: str) -> None:
    tool = Counting()
    with Gate(tool.tools, db_url) as gate:
        assert gate.execute("t", call("c1", n="c1")).state is CallState.SUCCEEDED
    # A second row, inserted behind the ledger's back, ready to run.
    raw_sql(db_url, """
        INSERT INTO tool_calls (task_id, call_id, idem_key, tool, effect, idempotency,
            args_hash, arguments, state, version, attempt, created_at, updated_at)
        SELECT task_id, 'forged', 'call:forged', tool, effect, idempotency, args_hash,
            arguments, 'authorized', 1, 0, created_at, updated_at
        FROM tool_calls WHERE call_id = 'c1'
    """)
    broken = verify(db_url)
    assert broken.exit_code == 1
    assert "call 'forged' of task 't'" in broken.output
    assert "its audit trail has no transition for it" in broken.output
    with Gate(tool.tools, db_url) as gate:
        assert [o.state for o in gate.resume("t")] == [CallState.AUTHORIZED]
    assert tool.runs == 1


def test_resume_through_the_cli_does_not_run_a_rewritten_call(
    db_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "counting_tools.py"
    runs = tmp_path / "runs.log"
    module.write_text(
        "import os\n"
        "from agent_gate import ToolRegistry\n"
        "tools = ToolRegistry()\n"
        "@tools.tool(schema={'type': 'object'}, effect='write')\n"
        "def send(**kw):\n"
        "    with open(os.environ['AG_TEST_RUNS'], 'a') as f:\n"
        "        f.write('ran\\n')\n"
        "    return 'sent'\n"
    )
    monkeypatch.setenv("AG_TEST_RUNS", str(runs))
    monkeypatch.syspath_prepend(str(tmp_path))
    first = CliRunner().invoke(cli, ["resume", "t", "--tools", "counting_tools", "--db", db_url])
    assert first.exit_code == 1 and "no task 't'" in first.output
    import counting_tools

    with Gate(counting_tools.tools, db_url) as gate:
        assert gate.execute("t", call("c1", n="c1")).state is CallState.SUCCEEDED
    raw_sql(db_url, "UPDATE tool_calls SET state = 'authorized' WHERE call_id = 'c1'")
    out = CliRunner().invoke(cli, ["resume", "t", "--tools", "counting_tools", "--db", db_url,
                                   "--json"])
    assert out.exit_code == 7, out.output  # left authorized, not run: exit status says so
    assert runs.read_text().splitlines() == ["ran"]
    (outcome,) = json.loads(out.output)["outcomes"]
    assert outcome["state"] == "authorized" and outcome["code"] == "state_not_in_audit"
    assert "its audit trail last recorded 'succeeded'" in outcome["reason"]
