"""What ``run``, ``replay`` and ``resume`` show while they work.

Each call's state is read from the ledger's audit trail as it grows (a thread pages
it by ``seq`` for the task), so every transition shows, made by this process or any
other, in order and none skipped; the stream's events, heartbeats and reconnects
come from the live run's callbacks. On a terminal (standard error) a rich ``Live``
view holds a status line and a table of the calls, redrawn on each change and
cleared at the end, where the command prints its result. Anywhere else, one plain
line per change goes to standard error, so standard output stays the command's
result (parseable with ``--json``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agent_gate.cli._exit import exit_for

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

    from agent_gate.gate.live import LiveProgress, ReconnectInfo
    from agent_gate.ledger import AuditRecord, Ledger

T = TypeVar("T")

_POLL_MIN = 0.02
_POLL_MAX = 0.5
"""Seconds between reads of the trail: short after a change, backing off to this."""


@dataclass(slots=True)
class _Call:
    tool: str
    state: str
    event: str


@dataclass(slots=True)
class _Stream:
    events: int = 0
    heartbeats: int = 0
    connections: int = 0
    reconnects: int = 0
    last_event_id: str = ""
    notes: list[str] = field(default_factory=list)


class Progress:
    """Live progress of one task; ``close`` prints every change left before returning."""

    def __init__(self, ledger: Ledger, task_id: str, *, live: Console | None,
                 plain: bool) -> None:
        from agent_gate.ledger.views.pages import AuditQuery

        self.ledger = ledger
        self.task_id = task_id
        self.plain = plain
        self.calls: dict[str, _Call] = {}
        self.stream = _Stream()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        newest = ledger.audit_page(AuditQuery(newest=True, limit=1))
        self._seq = newest[-1].seq if newest else 0
        self._live: Live | None = None
        if live is not None:
            from rich.live import Live

            self._live = Live(self._view(), console=live, transient=True,
                              auto_refresh=False)
            self._live.start(refresh=True)
        self._thread = threading.Thread(target=self._watch, name="agent-gate-progress",
                                        daemon=True)
        self._thread.start()

    @classmethod
    def for_output(cls, ledger: Ledger, task_id: str, *, as_json: bool) -> Progress | None:
        """Live on a terminal's standard error; plain lines elsewhere (none with --json)."""
        from rich.console import Console

        err = Console(stderr=True, highlight=False)
        if err.is_terminal:
            return cls(ledger, task_id, live=err, plain=False)
        return None if as_json else cls(ledger, task_id, live=None, plain=True)

    # ------------------------------------------------------------ inputs

    def event(self, p: LiveProgress) -> None:
        """A live stream's event was handled (``LiveOptions.on_event``)."""
        s = p.stream
        with self._lock:
            beat = s.heartbeats > self.stream.heartbeats
            self.stream.events, self.stream.heartbeats = s.events, s.heartbeats
            self.stream.connections, self.stream.last_event_id = s.connections, s.last_event_id
            if beat:
                self._drain_locked()  # calls first: the lines keep the order things happened
                self._say(f"stream: heartbeat ({s.heartbeats} so far, {s.events} events)")
            self._redraw()

    def replayed_event(self) -> None:
        """One event of a recorded stream was read (``replay``)."""
        with self._lock:
            self.stream.events += 1
            self._redraw()

    def reconnect(self, info: ReconnectInfo) -> None:
        """The stream was cut and is re-subscribed (``LiveOptions.on_reconnect``)."""
        with self._lock:
            self.stream.reconnects += 1
            self._drain_locked()
            self._say(f"stream: reconnect #{info.attempt} after {info.cause}, resuming "
                      f"after event id {info.last_event_id or '(none)'} in {info.delay:.2f}s")
            self._redraw()

    # ------------------------------------------------------------ the trail

    def _watch(self) -> None:
        pause = _POLL_MIN
        while not self._stop.wait(pause):
            pause = _POLL_MIN if self._drain() else min(pause * 2, _POLL_MAX)

    def _drain(self) -> bool:
        with self._lock:
            return self._drain_locked()

    def _drain_locked(self) -> bool:
        """Show the task's entries appended since the last read (the lock held)."""
        from agent_gate.ledger.views.pages import AuditQuery

        page = self.ledger.audit_page(
            AuditQuery(task_id=self.task_id, after=self._seq, limit=500))
        for entry in page:
            self._seq = entry.seq
            self._entry(entry)
        if page:
            self._redraw()
        return bool(page)

    def _entry(self, e: AuditRecord) -> None:
        if e.call_id is None or e.to_state is None:
            return
        known = self.calls.get(e.call_id)
        tool = e.tool or (known.tool if known else "?")
        self.calls[e.call_id] = _Call(tool, e.to_state, e.event)
        change = (f"{e.from_state} → {e.to_state}" if e.from_state and e.from_state != e.to_state
                  else e.to_state)
        self._say(f"call {e.call_id} ({tool}): {change} [{e.event}]")

    # ------------------------------------------------------------ output

    def _say(self, line: str) -> None:
        if self.plain:
            click.echo(line, err=True)

    def _status(self) -> str:
        s = self.stream
        return (f"task {self.task_id} · {s.events} events · {s.heartbeats} heartbeats · "
                f"connection {max(s.connections, 1)} · {s.reconnects} reconnects"
                + (f" · last id {s.last_event_id}" if s.last_event_id else ""))

    def _view(self) -> Any:
        from rich.console import Group

        from agent_gate.cli._output import cell, state_cell, table

        shown = table()
        for name in ("call", "tool", "state", "last event"):
            shown.add_column(name, no_wrap=name == "call")
        for call_id, c in self.calls.items():
            shown.add_row(cell(call_id), cell(c.tool), state_cell(c.state), cell(c.event))
        return Group(cell(self._status(), "bold"), shown)

    def _redraw(self) -> None:
        if self._live is not None:
            self._live.update(self._view(), refresh=True)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        while self._drain():
            pass
        if self._live is not None:
            self._live.stop()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def watching(ledger: Ledger, task_id: str, *, as_json: bool) -> Iterator[Progress | None]:
    """``Progress.for_output`` for the block, closed (every change printed) after it."""
    progress = Progress.for_output(ledger, task_id, as_json=as_json)
    try:
        yield progress
    finally:
        if progress is not None:
            progress.close()


def counted(events: Iterable[T], progress: Progress | None) -> Iterator[T]:
    """``events`` as they are, each one counted by ``progress`` (``replay``)."""
    for event in events:
        yield event
        if progress is not None:
            progress.replayed_event()


def finish(codes: Iterable[str], *, summary: dict[str, Any] | None = None) -> None:
    """End the command with the exit status the calls' states call for (``_exit``);
    ``summary``, the ``--json`` summary object, gets it as ``exit_code`` first."""
    code = exit_for(codes)
    if summary is not None:
        summary["exit_code"] = int(code)
        click.echo(json.dumps(summary, ensure_ascii=False, default=str))
    if code:
        click.get_current_context().exit(int(code))
