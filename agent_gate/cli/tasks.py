"""``agent-gate tasks``: every task in the ledger, with its calls counted by state."""

from __future__ import annotations

import click

from agent_gate.cli._operator import (
    cell,
    console,
    db_option,
    emit_json,
    failures,
    json_option,
    open_ledger,
    state_style,
    when,
)

# Column order: what needs a person first, then what is finished.
_ORDER = ("awaiting_approval", "in_doubt", "executing", "received", "authorized",
          "incomplete", "failed", "rejected", "succeeded")


@click.command(name="tasks")
@db_option
@json_option
def tasks_command(url: str | None, as_json: bool) -> None:
    """List tasks with the number of their calls in each state (newest first).

    A task with calls awaiting approval, in doubt or incomplete needs a person:
    see `agent-gate resume TASK`.
    """
    from rich.table import Table

    with failures(), open_ledger(url) as ledger:
        summaries = ledger.tasks()
    if as_json:
        for s in summaries:
            emit_json({
                "task": s.task.id,
                "total": s.total,
                "counts": {state.value: n for state, n in sorted(s.counts.items())},
                "terminal": s.task.terminal,
                "provider": s.task.provider,
                "updated_at": s.task.updated_at.isoformat(),
            })
        return
    out = console()
    if not summaries:
        out.print("no tasks in this ledger")
        return
    present = [st for st in _ORDER if any(n for s in summaries
                                           for state, n in s.counts.items() if state == st)]
    table = Table(box=None, header_style="bold", pad_edge=False)
    table.add_column("task")
    table.add_column("calls", justify="right")
    for st in present:
        table.add_column(st, justify="right")
    table.add_column("response")
    table.add_column("updated (UTC)")
    for s in summaries:
        counts = {state.value: n for state, n in s.counts.items()}
        table.add_row(
            cell(s.task.id), cell(s.total),
            *[cell(counts.get(st, ""), state_style(st)) for st in present],
            cell(s.task.terminal or "-"), cell(when(s.task.updated_at)),
        )
    out.print(table)


def register(group: click.Group) -> None:
    group.add_command(tasks_command)
