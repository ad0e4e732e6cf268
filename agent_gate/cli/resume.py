"""``agent-gate resume TASK``: show what stands between a task and completion, then
carry it as far as the ledger allows, each call at most once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from agent_gate.cli._operator import failures, open_gate
from agent_gate.cli._options import ledger_options, tools_option
from agent_gate.cli._output import (
    cell,
    console,
    emit_json,
    print_traces,
    state_cell,
    table,
)
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
    shown = table(title)
    for name in ("call", "tool", "state", "needs", "why"):
        shown.add_column(name, overflow="fold" if name == "why" else "ellipsis")
    for b in blockers:
        shown.add_row(cell(b.call_id), cell(b.tool), state_cell(b.state.value),
                      cell(_NEEDS.get(b.needs, b.needs)), cell(b.reason))
    out.print(shown)


def _outcomes(out: Console, outcomes: list[Outcome]) -> None:
    shown = table("resumed")
    for name in ("call", "tool", "state", "ran now", "reason"):
        shown.add_column(name, overflow="fold" if name == "reason" else "ellipsis")
    for o in outcomes:
        ran_now = "yes" if not o.replayed and o.attempt and o.state.ran else "no"
        shown.add_row(cell(o.call_id), cell(o.tool), state_cell(o.state.value), cell(ran_now),
                      cell(o.reason))
    out.print(shown)


@click.command(name="resume")
@click.argument("task_id")
@tools_option
@click.option("--policy", "policy_file", default=None, type=click.Path(dir_okay=False),
              help="The policy file the task runs under (approvals are bound to its hash).")
@click.option("--dry-run", is_flag=True, help="Only show what stands in the way.")
@ledger_options
def resume_command(
    task_id: str, tools_spec: str, policy_file: str | None, dry_run: bool, url: str | None,
    as_json: bool,
) -> None:
    """Show what stands between TASK and completion, then run what is approved and safe.

    Awaiting-approval calls run only with a valid approval under the same --policy;
    in-doubt calls are re-run only when their tool is retry-safe or its reconcile hook
    says the write did not happen; everything else is reported, never run twice.
    """
    registry = load_registry(tools_spec)
    out = console()
    if policy_file is None and not as_json:
        out.print("[yellow]note:[/] no --policy: every registered tool with valid arguments "
                  "is allowed, and approved calls wait for a resume under their policy")
    with failures(), open_gate(url, registry, policy_file) as gate:
        if gate.ledger.task(task_id) is None:
            raise click.ClickException(f"no task {task_id!r} in the ledger")
        notes = gate.override_notes
        before = gate.blockers(task_id)
        outcomes = [] if dry_run else gate.resume(task_id)
        after = gate.blockers(task_id) if not dry_run else before
        traces = {rec.call_id: rec.trace_id for rec in gate.ledger.calls(task_id)}
    if as_json:
        emit_json({
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
    if dry_run:
        return
    if outcomes:
        _outcomes(out, outcomes)
    _blockers(out, "still in the way", after)
