"""``agent-gate tasks``: tasks in the ledger, newest activity first, with their calls
counted by state; filtered and paged (``--after TASK``), streamed page by page."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from agent_gate.cli._exit import CliError
from agent_gate.cli._listing import PagedTable, listing_options, pages, parse_since
from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import cell, console, emit_json, state_style, when

if TYPE_CHECKING:
    from agent_gate.ledger.records import TaskSummary

# Column order: what needs a person first, then what is finished.
_ORDER = ("awaiting_approval", "in_doubt", "executing", "received", "authorized",
          "incomplete", "failed", "rejected", "succeeded")


def _json(e: Any) -> dict[str, Any]:
    from agent_gate.ledger.views.pages import task_json

    return task_json(e)


@click.command(name="tasks")
@listing_options("TASK", "Continue after this task (the last one a page showed).")
@ledger_options
def tasks_command(
    state: str | None, tool: str | None, since: str | None, limit: int | None,
    after: str | None, url: str | None, as_json: bool,
) -> None:
    """List tasks with the number of their calls in each state (newest activity first).

    A task with calls awaiting approval, in doubt or incomplete needs a person:
    see `agent-gate resume TASK` and `agent-gate call show CALL`. With --limit N one
    page is shown; the next starts with --after and the last task shown.
    """
    from agent_gate.ledger.views.pages import TaskQuery

    from_time = parse_since(since) if since is not None else None
    # Made for the first page a person reads: with --json, rich is never imported.
    table: PagedTable | None = None
    shown = 0
    last: str | None = None
    with failures(), open_ledger(url) as ledger:
        if after is not None and ledger.task(after) is None:
            raise CliError(f"no task {after!r} to continue after; expected a task id "
                           "from the last page (--after TASK)")

        def fetch(cursor: str | None, n: int) -> list[TaskSummary]:
            return ledger.tasks_page(TaskQuery(state=state, tool=tool, since=from_time,
                                               after=cursor, limit=n))

        for page in pages(fetch, lambda s: s.task.id, after, limit):
            shown += len(page)
            last = page[-1].task.id
            if as_json:
                for s in page:
                    emit_json(_json(s))
                continue
            if table is None:
                # One "by state" cell: a streamed listing cannot know which states
                # later pages use.
                table = PagedTable(console(), ("task", "calls", "by state", "response",
                                               "updated (UTC)"),
                                   ids=("task",), right=("calls",))
            table.print([_row(s) for s in page])
    if not as_json and shown == 0:
        console().print("no tasks" + (" for that filter" if state or tool or since or after
                                else " in this ledger"))
    elif not as_json and limit is not None and shown == limit and last is not None:
        click.echo(f"more may follow: agent-gate tasks --after {last} --limit {limit}",
                   err=True)


def _row(s: TaskSummary) -> list[Any]:
    from rich.text import Text

    counts = {state.value: n for state, n in s.counts.items()}
    by_state = Text(", ").join(
        cell(f"{counts[st]} {st}", state_style(st)) for st in _ORDER if counts.get(st))
    return [cell(s.task.id), cell(s.total), by_state, cell(s.task.terminal or "-"),
            cell(when(s.task.updated_at))]
