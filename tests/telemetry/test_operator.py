"""An operator goes from a call to its trace: ``call show`` and ``resume`` show the trace id."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from agent_gate import CallState
from agent_gate.cli import main as cli

from .conftest import Otel
from .test_traces import make_gate


def test_call_show_and_resume_show_the_trace_a_call_was_first_seen_in(
    tmp_path: Path, otel: Otel
) -> None:
    with make_gate(tmp_path, otel) as gate:
        waiting = gate.execute("t1", {"call_id": "c1", "name": "pay", "arguments": {"q": "1"}})
    assert waiting.state is CallState.AWAITING_APPROVAL
    (span,) = otel.call_spans()
    trace_id = format(span.context.trace_id, "032x")
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    runner = CliRunner()

    show_args = ["call", "show", "c1", "--task", "t1", "--db", db]
    shown = runner.invoke(cli, [*show_args, "--json"], catch_exceptions=False)
    assert json.loads(shown.output)["trace"]["trace_id"] == trace_id
    shown = runner.invoke(cli, show_args, catch_exceptions=False)
    assert f"trace       {trace_id}" in shown.output

    resume_args = ["resume", "t1", "--tools", "agent_gate.demo.tools", "--db", db, "--dry-run"]
    resume = runner.invoke(cli, [*resume_args, "--json"], catch_exceptions=False)
    assert json.loads(resume.output)["traces"] == {"c1": trace_id}
    shown = runner.invoke(cli, resume_args, catch_exceptions=False)
    assert f"call c1: trace {trace_id}" in shown.output
