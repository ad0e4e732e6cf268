"""``agent-gate approve`` / ``agent-gate deny``: a person answers a call that waits.

An approval is bound to the call's argument hash, to a policy hash and to an
expiry, and is used once, by the resume (or replay) that runs the call under that
same policy. A denial rejects the call for good.

Each command first prints what it acts on (tool, call, task, the arguments' hash and
a short view of them as stored, redacted fields as their stand-ins) and answers for
exactly that hash, or for ``--expect-hash`` (what ``call show`` or the inbox showed):
if the call's arguments no longer hash to it, the ledger refuses the answer
(``AnswerMismatch``, audited) and nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agent_gate.cli._operator import (
    acting_on,
    failures,
    find_call,
    open_gate,
    open_ledger,
    person,
    printable,
)
from agent_gate.cli._options import (
    call_options,
    decided_by_options,
    expect_hash_option,
    parse_duration,
)
from agent_gate.cli._output import emit_json, when

if TYPE_CHECKING:
    from agent_gate.ledger.records import CallRecord


@click.command(name="approve")
@click.argument("call_id")
@decided_by_options("Who approves (recorded in the audit trail).")
@click.option("--expires-in", "expires_in", default="24h", show_default=True,
              help="How long the approval stays usable: 30m, 2h, 1d, or never.")
@click.option("--policy", "policy_file", default=None, type=click.Path(dir_okay=False),
              help="Approve under this policy (re-evaluated for the call; must not deny). "
                   "Default: the policy that asked for the approval.")
@click.option("--grant", "grant", default=None, metavar="OPTION",
              help="Also give this grant, one the call's approve rule offers "
                   "(approval: grants:): later calls of the tool in the task within its "
                   "bounds run without asking. Needs --policy.")
@expect_hash_option
@call_options
def approve_command(
    call_id: str, by: str, reason: str | None, expires_in: str, policy_file: str | None,
    grant: str | None, expect_hash: str | None, task_id: str | None, url: str | None,
    as_json: bool,
) -> None:
    """Approve CALL_ID, which waits for approval; `agent-gate resume TASK` then runs it once
    (a call the MCP proxy holds runs in the proxy)."""
    from agent_gate.gate.desk import runs_next

    ttl = parse_duration(expires_in)
    who = person(by)
    assert who is not None
    if grant is not None and policy_file is None:
        raise click.UsageError("--grant needs --policy FILE: a grant's terms are the "
                               "policy's, and it is bound to that policy's hash")
    with failures():
        if policy_file is None:
            # The ledger alone: the approval binds to the policy that asked for it.
            from agent_gate.gate import desk

            with open_ledger(url) as ledger:
                rec = find_call(ledger, call_id, task_id)
                if not as_json:
                    acting_on("approving", rec, rec.args_hash)
                approval, new = desk.approve(ledger, call_id, by=who, task_id=rec.task_id,
                                             reason=reason, ttl=ttl,
                                             args_hash=expect_hash or rec.args_hash)
                task = ledger.task(rec.task_id)
        else:
            with open_gate(url, policy=policy_file) as gate:
                rec = find_call(gate.ledger, call_id, task_id)
                if not as_json:
                    acting_on("approving", rec, rec.args_hash)
                approval, new = gate.approve(call_id, by=who, reason=reason,
                                             task_id=rec.task_id, ttl=ttl,
                                             args_hash=expect_hash or rec.args_hash,
                                             grant=grant)
                task = gate.ledger.task(rec.task_id)
                given = [g for g in gate.ledger.grants(task_id=rec.task_id)
                         if g.approval_id == approval.id]
    granted = given if policy_file is not None else []
    if as_json:
        emit_json({**approval.to_dict(), "new": new, "tool": rec.tool,
                   "grants": [g.to_dict() for g in granted]})
        return
    verb = "approved" if new else "already approved"
    expires = when(approval.expires_at) + " UTC" if approval.expires_at else "never"
    click.echo(f"{verb}: call {printable(approval.call_id)} ({printable(rec.tool)}) of task "
               f"{printable(approval.task_id)} by {approval.decided_by}")
    click.echo(f"  bound to arguments {approval.args_hash[:16]}…, policy "
               f"{approval.policy_hash or '-'}")
    click.echo(f"  expires {expires}")
    for g in granted:
        click.echo(f"  grant {g.id} ({printable(g.option)}): later {printable(g.tool)} calls "
                   f"of this task within its bounds run without asking; "
                   f"agent-gate grant revoke {g.id} ends it")
    click.echo(f"next: {printable(runs_next(task.provider if task else None, rec.task_id))}")


@click.command(name="deny")
@click.argument("call_id")
@decided_by_options("Who denies (recorded in the audit trail).")
@click.option("--policy", "policy_file", default=None, type=click.Path(dir_okay=False),
              help="Deny under this policy: a rule's 'deny: quorum' then ends the call only "
                   "once enough distinct people denied it.")
@expect_hash_option
@call_options
def deny_command(
    call_id: str, by: str, reason: str | None, policy_file: str | None,
    expect_hash: str | None, task_id: str | None, url: str | None, as_json: bool,
) -> None:
    """Deny CALL_ID, which waits for approval: it is rejected and never runs."""
    who = person(by)
    assert who is not None
    if policy_file is not None:
        with failures(), open_gate(url, policy=policy_file) as gate:
            found = find_call(gate.ledger, call_id, task_id)
            if not as_json:
                acting_on("denying", found, found.args_hash)
            gate.deny(call_id, by=who, task_id=found.task_id, reason=reason,
                      args_hash=expect_hash or found.args_hash)
            rec = gate.ledger.get_row(found.row_id) or found
        _denied(rec, as_json)
        return
    from agent_gate.gate import desk
    from agent_gate.telemetry import observer

    with failures(), open_ledger(url) as ledger:
        found = find_call(ledger, call_id, task_id)
        if not as_json:
            acting_on("denying", found, found.args_hash)
        rec = desk.deny(ledger, call_id, by=who, task_id=found.task_id, reason=reason,
                        observer=observer(), args_hash=expect_hash or found.args_hash).record
    _denied(rec, as_json)


def _denied(rec: CallRecord, as_json: bool) -> None:
    """What a denial left: the call rejected, or (a quorum) still waiting for more."""
    if as_json:
        from agent_gate.gate.outcome import outcome_of

        emit_json({"task_id": rec.task_id, "args_hash": rec.args_hash,
                   **outcome_of(rec, replayed=False).to_dict()})
        return
    if rec.state.value == "awaiting_approval":
        click.echo(f"denial recorded: call {printable(rec.call_id)} ({printable(rec.tool)}) "
                   f"of task {printable(rec.task_id)} still waits: its rule ends it only when "
                   "enough distinct people denied it (deny: quorum)")
        return
    click.echo(f"denied: call {printable(rec.call_id)} ({printable(rec.tool)}) of task "
               f"{printable(rec.task_id)} is {rec.state.value}; it will not run")
