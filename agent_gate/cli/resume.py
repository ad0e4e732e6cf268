"""``agent-gate resume TASK``: show what stands between a task and completion, then
carry it as far as the ledger allows, each call at most once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agent_gate.cli._exit import EXIT_CODES_HELP, CliError
from agent_gate.cli._listing import PagedTable
from agent_gate.cli._operator import failures, open_gate
from agent_gate.cli._options import gate_policy, ledger_options, shadow_option, tools_option
from agent_gate.cli._output import cell, console, print_traces, state_cell
from agent_gate.cli._progress import finish, watching
from agent_gate.cli.replay import load_registry

if TYPE_CHECKING:
    from rich.console import Console

    from agent_gate.gate import Blocker, Outcome

_NEEDS = {
    "approval": "a person: agent-gate approve / deny CALL --by NAME",
    "resolution": "a person: agent-gate resolve CALL --as succeeded|failed|not-applied",
    "run": "nothing: resume runs it",
    "nothing": "nothing: it is running",
    "none": "never runs (incomplete): the model must ask again",
}


def _blockers(out: Console, title: str, blockers: list[Blocker]) -> None:
    if not blockers:
        out.print(cell(f"{title}: nothing; every call of the task is finished"))
        return
    out.print(cell(title, "italic"))
    PagedTable(out, ("call", "tool", "state", "needs", "why"), ids=("call",)).print([
        [cell(b.call_id), cell(b.tool), state_cell(b.state.value),
         cell(_NEEDS.get(b.needs, b.needs)), cell(b.reason)] for b in blockers])


def _outcomes(out: Console, outcomes: list[Outcome]) -> None:
    out.print(cell("resumed", "italic"))
    PagedTable(out, ("call", "tool", "state", "ran now", "reason"), ids=("call",)).print([
        [cell(o.call_id), cell(o.tool), state_cell(o.state.value),
         cell("yes" if not o.replayed and o.attempt and o.state.ran else "no"),
         cell(o.reason)] for o in outcomes])


@click.command(name="resume", epilog=EXIT_CODES_HELP)
@click.argument("task_id")
@tools_option
@click.option("--policy", "policy_file", default=None, type=click.Path(dir_okay=False),
              help="The policy file the task runs under (approvals are bound to its hash).")
@shadow_option
@click.option("--dry-run", is_flag=True, help="Only show what stands in the way.")
@ledger_options
def resume_command(
    task_id: str, tools_spec: str, policy_file: str | None, shadow_file: str | None,
    dry_run: bool, url: str | None, as_json: bool,
) -> None:
    """Show what stands between TASK and completion, then run what is approved and safe.

    Awaiting-approval calls run only with a valid approval under the same --policy;
    in-doubt calls are re-run only when their tool is retry-safe or its reconcile hook
    says the write did not happen; everything else is reported, never run twice.
    The exit status says what the task's calls are left as (below).
    """
    registry = load_registry(tools_spec)
    out = console()
    if policy_file is None and not as_json:
        out.print("[yellow]note:[/] no --policy: every registered tool with valid arguments "
                  "is allowed, and approved calls wait for a resume under their policy")
    with failures(), open_gate(url, registry, gate_policy(policy_file, shadow_file)) as gate:
        if gate.ledger.task(task_id) is None:
            raise CliError(f"no task {task_id!r} in the ledger; expected a task id as "
                           "`agent-gate tasks` lists them")
        notes = gate.override_notes
        before = gate.blockers(task_id)
        if dry_run:
            outcomes = []
        else:
            with watching(gate.ledger, task_id, as_json=as_json):
                outcomes = gate.resume(task_id)
        after = gate.blockers(task_id) if not dry_run else before
        calls = gate.ledger.calls(task_id)
        left = [rec.state.value for rec in calls]
        traces = {rec.call_id: rec.trace_id for rec in calls}
    if as_json:
        finish(left, summary={
            "task": task_id,
            "policy": policy_file,
            "override_notes": list(notes),
            "before": [b.to_dict() for b in before],
            "outcomes": [o.to_dict() for o in outcomes],
            "after": [b.to_dict() for b in after],
            "traces": {call: trace for call, trace in traces.items() if trace},
        })
        return
    for note in notes:
        out.print(cell(f"note: {note}", "yellow"))
    _blockers(out, f"task {task_id}: in the way", before)
    print_traces(out, {b.call_id: traces.get(b.call_id) for b in before})
    if not dry_run:
        if outcomes:
            _outcomes(out, outcomes)
        _blockers(out, "still in the way", after)
    finish(left)
