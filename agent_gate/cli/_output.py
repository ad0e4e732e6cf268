"""How the operator commands print: for people first, and as JSON on request.

Aligned tables via rich, with colour only when standard output is a terminal (rich
decides; ``NO_COLOR`` is honoured). With ``--json`` a command prints one JSON
document or JSON lines and nothing else.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def console() -> Console:
    from rich.console import Console

    # Not a terminal (a pipe, a file, a test): no colour, and wide enough that rows
    # are not wrapped mid-cell.
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=220, no_color=True, soft_wrap=False)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, ensure_ascii=False, default=str))


def when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def cell(text: object, style: str = "") -> Any:
    """A table cell shown as it is: ids and reasons may contain ``[``, never markup."""
    from rich.text import Text

    return Text("" if text is None else str(text), style=style)


def state_cell(state: str | None) -> Any:
    return cell(state or "", state_style(state or ""))


def state_style(state: str) -> str:
    return {
        "succeeded": "green",
        "failed": "red",
        "rejected": "red",
        "in_doubt": "bold yellow",
        "awaiting_approval": "bold cyan",
        "executing": "yellow",
        "incomplete": "magenta",
    }.get(state, "")


def table(title: str | None = None) -> Table:
    """An empty table in the house style: no box, bold headers, a title on the left."""
    from rich.table import Table

    return Table(title=title, title_justify="left", box=None, header_style="bold",
                 pad_edge=False)


def print_traces(out: Console, traces: dict[str, str | None]) -> None:
    """One line per call with the OpenTelemetry trace it was first seen in, so an
    operator goes from a call to its trace (calls recorded without one are left out)."""
    for call_id, trace_id in traces.items():
        if trace_id:
            out.print(cell(f"call {call_id}: trace {trace_id}", "dim"))
