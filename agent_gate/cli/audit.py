"""``agent-gate audit``: read the audit trail; ``agent-gate audit verify``: check its chain."""

from __future__ import annotations

import re
from typing import Any

import click

from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import (
    cell,
    console,
    emit_json,
    print_traces,
    state_cell,
    table,
    when,
)


def _decision(detail: dict[str, Any] | None) -> tuple[str, str]:
    if not detail:
        return "", ""
    verdict = str(detail.get("verdict") or "")
    if not verdict and detail.get("approval_id") is not None:
        verdict = "approval"
    return verdict, ", ".join(str(r) for r in detail.get("rule_ids") or ())


@click.group(name="audit", invoke_without_command=True)
@click.option("--task", "task_id", default=None, help="Only this task's events.")
@click.option("--call", "call_id", default=None, help="Only this call's events.")
@ledger_options
@click.pass_context
def audit_group(
    ctx: click.Context, task_id: str | None, call_id: str | None, url: str | None,
    as_json: bool,
) -> None:
    """Show the audit trail: every transition and decision, oldest first.

    Each entry is linked into one hash chain; `agent-gate audit verify` checks it.
    Redacted argument fields appear only as digests and short previews.
    """
    if ctx.invoked_subcommand is not None:
        return
    with failures(), open_ledger(url) as ledger:
        events = ledger.audit(task_id=task_id, call_id=call_id)
        calls = ledger.calls(task_id)
        tools = {rec.row_id: rec.tool for rec in calls}
        traces = {rec.row_id: rec.trace_id for rec in calls}
    if as_json:
        for e in events:
            emit_json({
                "seq": e.seq, "at": e.at.isoformat(), "task": e.task_id, "call": e.call_id,
                "tool": tools.get(e.call_row_id) if e.call_row_id else None,
                "event": e.event, "from": e.from_state, "to": e.to_state, "actor": e.actor,
                "detail": e.detail, "hash": e.hash,
                "trace_id": traces.get(e.call_row_id) if e.call_row_id else None,
            })
        return
    out = console()
    if not events:
        out.print("no audit events" + (" for that filter" if task_id or call_id else ""))
        return
    shown = table()
    for name in ("#", "time (UTC)", "task", "call", "tool", "event", "state", "decision",
                 "rule ids", "actor"):
        shown.add_column(name, justify="right" if name == "#" else "left")
    for e in events:
        verdict, rules = _decision(e.detail)
        state = state_cell(e.to_state)
        if e.from_state and e.to_state and e.from_state != e.to_state:
            state = cell(f"{e.from_state} → ") + state
        shown.add_row(
            cell(e.seq), cell(when(e.at)), cell(e.task_id), cell(e.call_id),
            cell(tools.get(e.call_row_id, "") if e.call_row_id else ""), cell(e.event), state,
            cell(verdict, "red" if verdict == "deny" else ""), cell(rules), cell(e.actor),
        )
    out.print(shown)
    print_traces(out, {e.call_id: traces.get(e.call_row_id)
                       for e in events if e.call_id and e.call_row_id})


_ANCHOR = re.compile(r"^(\d+):([0-9a-f]{64})$")


@audit_group.command(name="verify")
@click.option("--anchor", default=None, metavar="SEQ:HASH",
              help="A head printed by an earlier verify and kept elsewhere; it must still "
                   "be in the chain (catches a chain rewritten from some point on).")
@ledger_options
def verify_command(anchor: str | None, url: str | None, as_json: bool) -> None:
    """Check the audit hash chain; name the first entry edited, deleted or reordered.

    Exit status 0 when the chain is whole, 1 when it is not.
    """
    pinned: tuple[int, str] | None = None
    if anchor is not None:
        match = _ANCHOR.match(anchor.strip().lower())
        if match is None:
            raise click.BadParameter("expected SEQ:HASH (64 hex digits)", param_hint="--anchor")
        pinned = (int(match.group(1)), match.group(2))
    with failures(), open_ledger(url) as ledger:
        report = ledger.verify_audit(anchor=pinned)
    if as_json:
        emit_json(report.to_dict())
    elif report.ok:
        click.echo(f"audit chain ok: {report.entries} entries")
        click.echo(f"head: {report.head_seq}:{report.head_hash}")
        click.echo("keep the head elsewhere; `agent-gate audit verify --anchor SEQ:HASH` "
                   "later proves the chain was not rewritten up to it")
    else:
        assert report.problem is not None
        click.echo(f"audit chain BROKEN: {report.problem.message}", err=True)
    if not report.ok:
        raise SystemExit(1)
