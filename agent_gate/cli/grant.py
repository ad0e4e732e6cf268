"""``agent-gate grant list`` / ``grant revoke``: the grants approvers gave.

A grant (``approve --grant OPTION``) lets later calls of one tool in one task run
without asking, within the policy option's time, count and argument bounds. An
operator needs to see what is still open and to end one at once: revoking commits
before the next call is decided, so no call decided after it is covered.
"""

from __future__ import annotations

import click

from agent_gate.cli._operator import failures, open_ledger, person, printable
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import emit_json, when


@click.group(name="grant")
def grant_group() -> None:
    """List or revoke grants (approvals that cover more calls of a tool in a task)."""


@grant_group.command(name="list")
@click.option("--task", "task_id", default=None, help="Only this task's grants.")
@click.option("--active", is_flag=True, help="Only grants that still cover calls.")
@ledger_options
def list_command(task_id: str | None, active: bool, url: str | None, as_json: bool) -> None:
    """Grants, newest first: tool, task, calls used of the limit, expiry, status."""
    with failures(), open_ledger(url) as ledger:
        found = ledger.grants(task_id=task_id, active=active)
    if as_json:
        emit_json([g.to_dict() for g in found])
        return
    if not found:
        click.echo("no grants")
        return
    for g in found:
        used = f"{g.used_calls}/{g.max_calls}" if g.max_calls is not None else f"{g.used_calls}"
        expires = when(g.expires_at) + " UTC" if g.expires_at is not None else "never"
        click.echo(f"{g.id:>6}  {g.status:<8} {printable(g.tool)}  task {printable(g.task_id)}"
                   f"  {printable(g.option)}  calls {used}  expires {expires}"
                   f"  by {printable(g.granted_by)}")


@grant_group.command(name="revoke")
@click.argument("grant_id", type=click.IntRange(min=1))
@click.option("--by", "by", required=True, help="Who revokes it (recorded in the audit trail).")
@click.option("--reason", default=None, help="Why (recorded, bounded).")
@ledger_options
def revoke_command(grant_id: int, by: str, reason: str | None, url: str | None,
                   as_json: bool) -> None:
    """End GRANT_ID now: no call decided after this is covered by it."""
    who = person(by)
    assert who is not None
    with failures(), open_ledger(url) as ledger:
        g = ledger.revoke_grant(grant_id, by=who, reason=reason)
    if as_json:
        emit_json(g.to_dict())
        return
    click.echo(f"revoked: grant {g.id} ({printable(g.option)}) for {printable(g.tool)} in task "
               f"{printable(g.task_id)}, after {g.used_calls} call(s); revoked by "
               f"{printable(g.revoked_by or who)}")
