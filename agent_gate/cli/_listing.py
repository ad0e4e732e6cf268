"""Listings that stream: the filters ``tasks`` and ``audit`` share, keyset pages, and a
table printed a page at a time whose ids are never cut.

A listing reads one page, prints it and reads the next, so its first rows show at
once and ``agent-gate audit | head -3`` ends after one page, whatever the ledger
holds. Ids (task and call) keep their whole width in every table; when the terminal
is narrower than they need, the other columns fold and the line is printed wider
than the terminal (which wraps it) rather than an id being cut.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agent_gate.cli._options import F

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

PAGE = 200
"""Rows read per page while streaming a listing with no --limit."""
MAX_LIMIT = 10_000

STATES = ("received", "authorized", "awaiting_approval", "executing", "succeeded", "failed",
          "rejected", "in_doubt", "incomplete")
"""The call states, as ``ledger.states.CallState`` spells them (held to it by a test;
not imported, so that building the command line loads no ledger)."""

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> datetime:
    """``30m``/``2h``/``7d`` ago, or an ISO 8601 time (UTC unless it names a zone)."""
    raw = text.strip().lower()
    match = _AGO.match(raw)
    if match:
        return datetime.now(UTC) - timedelta(seconds=float(match.group(1)) *
                                             _UNITS[match.group(2)])
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither a duration ago (30m, 2h, 7d) nor an ISO time "
            "(2026-05-01T12:00:00Z)", param_hint="--since") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def listing_options(after_metavar: str, after_help: str) -> Callable[[F], F]:
    """``--state``, ``--tool``, ``--since``, ``--limit`` and ``--after``."""

    def apply(fn: F) -> F:
        fn = click.option("--after", "after", default=None, metavar=after_metavar,
                          help=after_help)(fn)
        fn = click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=None,
                          help="Show at most this many rows (one page); default: all, "
                               "streamed page by page.")(fn)
        fn = click.option("--since", "since", default=None, metavar="WHEN",
                          help="Only since then: 30m, 2h, 7d ago, or an ISO time.")(fn)
        fn = click.option("--tool", default=None,
                          help="Only this tool's calls (tasks: tasks with one).")(fn)
        return click.option("--state", type=click.Choice(STATES), default=None,
                            help="tasks: tasks with a call in this state; audit: entries "
                                 "that moved a call to it.")(fn)

    return apply


def pages(fetch: Callable[[Any, int], Sequence[T]], cursor: Callable[[T], Any],
          after: Any, limit: int | None) -> Iterator[Sequence[T]]:
    """Keyset pages: ``fetch(after, n)`` until ``limit`` rows or the end."""
    left = limit
    while left is None or left > 0:
        size = PAGE if left is None else min(PAGE, left)
        page = fetch(after, size)
        if page:
            yield page
            after = cursor(page[-1])
        if len(page) < size:
            return
        if left is not None:
            left -= len(page)


class PagedTable:
    """One table printed a page at a time: the header once, widths that only grow."""

    def __init__(self, out: Console, columns: Sequence[str], ids: Sequence[str],
                 right: Sequence[str] = ()) -> None:
        self.out = out
        self.columns = tuple(columns)
        self.ids = frozenset(ids)
        self.right = frozenset(right)
        self.widths = {c: max(len(w) for w in c.split()) for c in self.columns}
        self.first = True

    def print(self, rows: Sequence[Sequence[Any]]) -> None:
        from rich.table import Table

        for row in rows:
            for name, value in zip(self.columns, row, strict=True):
                if name in self.ids:
                    self.widths[name] = max(self.widths[name], len(str(value)))
        shown = Table(box=None, header_style="bold", pad_edge=False, show_header=self.first)
        for name in self.columns:
            if name in self.ids:
                shown.add_column(name, no_wrap=True, min_width=self.widths[name])
            else:
                shown.add_column(name, overflow="fold", min_width=self.widths[name],
                                 justify="right" if name in self.right else "left")
        for row in rows:
            shown.add_row(*row)
        needed = sum(self.widths.values()) + 2 * (len(self.columns) - 1)
        width = self.out.width
        # Wider than the terminal only when the ids need it (the terminal wraps the line):
        # rich never renders wider than its console, so the console widens for the page.
        self.out.width = max(width, needed)
        try:
            self.out.print(shown)
        finally:
            self.out.width = width
        self.first = False
