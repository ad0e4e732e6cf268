"""``agent-gate resolve``: an operator settles a call whose outcome is unknown."""

from __future__ import annotations

import json

import click

from agent_gate.cli._operator import failures, find_call, open_gate, person
from agent_gate.cli._options import call_options, decided_by_options
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
@call_options
def resolve_command(
    call_id: str, as_: str, result_json: str | None, by: str | None, reason: str | None,
    task_id: str | None, url: str | None, as_json: bool,
) -> None:
    """Settle CALL_ID, which is in doubt (or whose worker is gone).

    `succeeded` and `failed` make it final; `not-applied` (the write did not
    happen) makes it eligible to run again: `agent-gate resume TASK` runs it once.
    """
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
        task_id = find_call(gate.ledger, call_id, task_id).task_id
        outcome = gate.resolve(call_id, as_=as_, task_id=task_id, result=result, note=reason,
                               by=who)
    if as_json:
        emit_json({"task_id": outcome.task_id, **outcome.to_dict()})
        return
    click.echo(f"resolved: call {outcome.call_id} ({outcome.tool}) of task {outcome.task_id} "
               f"is now {outcome.state.value}")
    if outcome.state.value == "authorized":
        click.echo(f"next: agent-gate resume {outcome.task_id} --tools MODULE[:ATTR] "
                   "(runs it once)")
