"""``agent-gate tasks``: every task in the ledger, with its calls counted by state."""

from __future__ import annotations

import click

from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import cell, console, emit_json, state_style, table, when

# Column order: what needs a person first, then what is finished.
_ORDER = ("awaiting_approval", "in_doubt", "executing", "received", "authorized",
          "incomplete", "failed", "rejected", "succeeded")


@click.command(name="tasks")
@ledger_options
def tasks_command(url: str | None, as_json: bool) -> None:
    """List tasks with the number of their calls in each state (newest first).

    A task with calls awaiting approval, in doubt or incomplete needs a person:
    see `agent-gate resume TASK`.
    """
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
    shown = table()
    shown.add_column("task")
    shown.add_column("calls", justify="right")
    for st in present:
        shown.add_column(st, justify="right")
    shown.add_column("response")
    shown.add_column("updated (UTC)")
    for s in summaries:
        counts = {state.value: n for state, n in s.counts.items()}
        shown.add_row(
            cell(s.task.id), cell(s.total),
            *[cell(counts.get(st, ""), state_style(st)) for st in present],
            cell(s.task.terminal or "-"), cell(when(s.task.updated_at)),
        )
    out.print(shown)
