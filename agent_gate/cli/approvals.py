"""``agent-gate approvals sweep``: act once on every approval deadline that passed.

An approve rule's ``approval: {timeout, then}`` is kept by the ledger's clock and
acted on by a sweeper (``ledger.sweep``): ``agent-gate serve`` runs one every
``--sweep-every``; this command is one pass, for a cron entry or a ledger no server
watches. Safe beside any number of other sweepers: each deadline is acted on once.
"""

from __future__ import annotations

import click

from agent_gate.cli._operator import failures, open_ledger, printable
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import emit_json

_BATCH = 100


@click.group(name="approvals")
def approvals_group() -> None:
    """Approval deadlines: `agent-gate approvals sweep` acts on the passed ones."""


@approvals_group.command(name="sweep")
@click.option("--by", "by", default=None, metavar="NAME",
              help="Who sweeps, in the audit trail as sweeper:NAME (default: HOST:PID).")
@click.option("--max", "most", type=click.IntRange(1, 1_000_000), default=10_000,
              show_default=True, help="Act on at most this many deadlines in this pass.")
@ledger_options
def sweep_command(by: str | None, most: int, url: str | None, as_json: bool) -> None:
    """Deny, or escalate to their role, the waiting calls whose deadline passed.

    Measured by the database's clock. A call a person approved in time is left to the
    gate that runs it; a call that moved on is left alone. Prints what this pass did.
    """
    from agent_gate.ledger.sweep import Fired
    from agent_gate.ledger.sweeper import sweeper_name

    who = (by or "").strip() or sweeper_name()
    fired: list[Fired] = []
    looked = 0
    with failures(), open_ledger(url) as ledger:
        while looked < most:
            want = min(_BATCH, most - looked)
            report = ledger.sweep_deadlines(by=who, limit=want)
            looked += report.looked_at
            fired.extend(report.fired)
            if report.looked_at < want:  # nothing more has passed
                break
    counts = {k: sum(1 for f in fired if f.outcome == k)
              for k in ("denied", "escalated", "answered", "moot")}
    if as_json:
        emit_json({"looked_at": looked, **counts, "by": f"sweeper:{who}",
                   "fired": [f.to_dict() for f in fired]})
        return
    for f in fired:
        if f.outcome == "denied":
            what = "denied (approval_timeout): it will not run"
        elif f.outcome == "escalated":
            what = f"escalated to role {printable(f.role or '')}: only its holders may answer"
        else:
            continue
        click.echo(f"{what}: call {printable(f.call_id)} of task {printable(f.task_id)}")
    click.echo(f"swept {looked} passed deadline(s): {counts['denied']} denied, "
               f"{counts['escalated']} escalated, {counts['answered']} answered in time, "
               f"{counts['moot']} moot (the call had moved on)")
