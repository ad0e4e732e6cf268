"""``agent-gate resolve``: an operator settles a call whose outcome is unknown.

It prints what it acts on first (as ``approve`` does) and settles the call only while
its arguments hash to what was printed, or to ``--expect-hash``.
"""

from __future__ import annotations

import json

import click

from agent_gate.cli._operator import acting_on, failures, find_call, open_gate, person, printable
from agent_gate.cli._options import call_options, decided_by_options, expect_hash_option
from agent_gate.cli._output import emit_json


@click.command(name="resolve")
@click.argument("call_id")
@click.option("--as", "as_", required=True,
              type=click.Choice(["succeeded", "failed", "not-applied"]),
              help="What really happened downstream.")
@click.option("--result", "result_json", default=None, metavar="JSON",
              help="The tool's result, for --as succeeded (what the agent will read).")
@decided_by_options(
    "Who settles it (recorded in the audit trail).",
    required=False,
    reason_help="A note (recorded, bounded).",
)
@expect_hash_option
@call_options
def resolve_command(
    call_id: str, as_: str, result_json: str | None, by: str | None, reason: str | None,
    expect_hash: str | None, task_id: str | None, url: str | None, as_json: bool,
) -> None:
    """Settle CALL_ID, which is in doubt (or whose worker is gone).

    `succeeded` and `failed` make it final; `not-applied` (the write did not
    happen) makes it eligible to run again: `agent-gate resume TASK` runs it once
    (a call the MCP proxy holds runs in the proxy).
    """
    from agent_gate.gate.desk import runs_next

    result = None
    if result_json is not None:
        if as_ != "succeeded":
            raise click.BadParameter(
                f"--result goes with --as succeeded, not --as {as_}; drop --result",
                param_hint="--result")
        try:
            result = json.loads(result_json)
        except ValueError:
            raise click.BadParameter(
                'expected a JSON value, e.g. --result \'{"sent": true}\'', param_hint="--result"
            ) from None
    who = person(by)
    with failures(), open_gate(url) as gate:
        rec = find_call(gate.ledger, call_id, task_id)
        if not as_json:
            acting_on("resolving", rec, rec.args_hash)
        outcome = gate.resolve(call_id, as_=as_, task_id=rec.task_id, result=result, note=reason,
                               by=who, args_hash=expect_hash or rec.args_hash)
        task = gate.ledger.task(rec.task_id)
    if as_json:
        emit_json({"task_id": outcome.task_id, "args_hash": rec.args_hash, **outcome.to_dict()})
        return
    click.echo(f"resolved: call {printable(outcome.call_id)} ({printable(outcome.tool)}) of task "
               f"{printable(outcome.task_id)} is now {outcome.state.value}")
    if outcome.state.value == "authorized":
        click.echo(f"next: {printable(runs_next(task.provider if task else None, rec.task_id))}")
