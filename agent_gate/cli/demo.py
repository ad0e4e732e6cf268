"""``agent-gate demo``: the whole pipeline in one command, no API key, no network.

Starts agent-gate's own SSE server on a free loopback port and streams a recorded
OpenAI Responses answer with four parallel tool calls through a real httpx
connection into a gate with the example policy and the embedded SQLite ledger:

* one call the policy allows (a read, run as soon as its arguments complete),
  one allowed write (run only once the response completed), one that waits for
  a person's approval, one the policy denies;
* the server cuts the connection once in the middle of an event; the transport
  resumes with ``Last-Event-ID``, the server replays events the client already
  had, and the accumulator recognises them, so nothing runs twice;
* the demo's tools are harmless: each appends one line to an outbox file saying
  what it would have done, which makes "ran once" checkable outside the ledger.

Running it again answers every call from the ledger. It ends by printing the
commands that continue the story with the real ids (audit, approve, resume).
The run is bounded: the stream is about fifty events, paced so the progress is
visible, and every wait has a timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agent_gate.cli._operator import failures
from agent_gate.cli._options import db_option
from agent_gate.cli._output import cell, console, state_cell

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from agent_gate.gate import Gate, Outcome
    from agent_gate.gate.live import LiveProgress, LiveResult, ReconnectInfo

DEFAULT_TASK = "demo"
DEFAULT_DRIP = 0.04
"""Seconds between events: about two seconds for the whole stream, enough to watch."""


@dataclass(frozen=True, slots=True)
class _Row:
    call_id: str
    tool: str
    decision: str
    state: str
    replayed: str
    runs: int


_DECISIONS = {"allow": "allow", "require_approval": "approve", "reject": "deny"}


def _decisions(gate: Gate, task_id: str) -> dict[str, str]:
    """Each call's authorization as the audit trail recorded it: verdict and rule ids."""
    out: dict[str, str] = {}
    for record in gate.ledger.audit(task_id):
        if record.call_id is None or record.from_state != "received":
            continue
        detail = record.detail or {}
        verdict = detail.get("verdict") or _DECISIONS.get(record.event, record.event)
        if record.event == "reject" and "verdict" not in detail:
            verdict = f"reject ({detail.get('code', 'invalid')})"
        elif record.event == "mark_incomplete":
            verdict = "-"
        rules = detail.get("rule_ids") or []
        out[record.call_id] = f"{verdict} · {', '.join(rules)}" if rules else str(verdict)
    return out


def _tag(gate: Gate) -> str:
    from agent_gate.demo.tools import ledger_tag

    return ledger_tag(str(gate.ledger.engine.url))


def _rows(gate: Gate, task_id: str, outcomes: dict[str, Outcome] | None) -> list[_Row]:
    from agent_gate.demo.tools import outbox_counts

    decisions = _decisions(gate, task_id)
    runs = outbox_counts(task_id, _tag(gate))
    rows: list[_Row] = []
    for rec in gate.ledger.calls(task_id):
        outcome = (outcomes or {}).get(rec.call_id)
        if outcome is None:
            replayed = "…" if outcomes is None else "-"
        else:
            replayed = "yes (ledger)" if outcome.replayed else "no"
        rows.append(
            _Row(
                rec.call_id,
                rec.tool,
                decisions.get(rec.call_id, "…"),
                rec.state.value,
                replayed,
                runs.get(rec.call_id, 0),
            )
        )
    return rows


def _table(rows: list[_Row], *, final: bool) -> Table:
    from rich.table import Table

    table = Table(title=None if final else "calls in the ledger", title_justify="left")
    table.add_column("call")
    table.add_column("tool")
    table.add_column("policy decision")
    table.add_column("state")
    table.add_column("replayed")
    table.add_column("runs", justify="right")
    for row in rows:
        table.add_row(
            cell(row.call_id),
            cell(row.tool),
            cell(row.decision),
            state_cell(row.state),
            cell(row.replayed),
            cell(row.runs),
        )
    return table


class _Display:
    """Progress bar and the ledger's table while the stream runs (terminal only);
    one-line notes that stay in the output everywhere."""

    def __init__(self, out: Console, gate: Gate, task_id: str, total: int) -> None:
        from rich.console import Group
        from rich.live import Live
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.out = out
        self.gate = gate
        self.task_id = task_id
        self.progress = Progress(
            TextColumn("streaming"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("events · {task.description}"),
            console=out,
        )
        self.bar = self.progress.add_task("connection 1", total=total)
        self.released = -1
        self.group = Group(self.progress, _table([], final=False))
        self.live = Live(self.group, console=out, transient=True, refresh_per_second=12)

    def __enter__(self) -> _Display:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(None, None, None)

    def event(self, p: LiveProgress) -> None:
        unique = p.calls.events - p.calls.replayed_events
        replayed = f", {p.calls.replayed_events} replayed" if p.calls.replayed_events else ""
        self.progress.update(
            self.bar,
            completed=unique,
            description=(
                f"connection {p.stream.connections}{replayed} · "
                f"{p.calls.calls} calls seen, {p.calls.released} released"
            ),
        )
        if p.calls.released != self.released:  # something reached the ledger: redraw
            self.released = p.calls.released
            from rich.console import Group

            self.group = Group(
                self.progress, _table(_rows(self.gate, self.task_id, None), final=False)
            )
            self.live.update(self.group)

    def reconnect(self, info: ReconnectInfo, last: LiveProgress | None) -> None:
        where = (
            f"connection {last.stream.connections} was cut after {last.stream.events} events"
            if last is not None
            else "the connection was cut before any event"
        )
        self.out.print(
            f"✂  {where} ({info.cause}); resuming with Last-Event-ID: "
            f"{info.last_event_id or '(none)'} in {info.delay:.2f}s"
        )


def _shown_db(url: str | None) -> str:
    from agent_gate.ledger.backend.dialect import resolve_url

    resolved = resolve_url(url)
    try:
        from sqlalchemy.engine import make_url

        return make_url(resolved).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL fails later with its own message
        return "(the given --db)"


def _relative(path: Path) -> str:
    """Relative to the current directory when below it (a checkout), else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _who() -> str:
    """A name for ``--by`` that works as printed: the login name, never ``$USER`` (unset
    in containers and cron jobs, where the printed command would then fail)."""
    import getpass
    import shlex

    try:
        name = getpass.getuser().strip()
    except (OSError, KeyError):  # no $USER/$LOGNAME and no passwd entry (a container)
        name = ""
    return shlex.quote(name) if name else "operator"


def _next_steps(task_id: str, db_arg: str, policy: str, waiting: list[str]) -> list[str]:
    lines = [f"agent-gate audit --task {task_id}{db_arg}"]
    for call_id in waiting:
        lines.append(f"agent-gate approve {call_id} --task {task_id} --by {_who()}{db_arg}")
    lines.append(f"agent-gate resume {task_id} --tools agent_gate.demo.tools --policy {policy}"
                 f"{db_arg}")
    lines.append("agent-gate demo" + db_arg)
    return lines


def _run(out: Console, gate: Gate, task_id: str, drip: float) -> LiveResult:
    import httpx

    from agent_gate.demo.transcript import CUT_INSIDE_EVENT, PROVIDER, demo_transcript
    from agent_gate.gate.live import run_live
    from agent_gate.stream_server import Fault, FaultRule, StreamServer
    from agent_gate.transport import ReconnectPolicy, StreamLimits

    transcript = demo_transcript()
    faults = [
        FaultRule(Fault(cut_inside_event=CUT_INSIDE_EVENT, drip=drip), times=1),
        FaultRule(Fault(drip=drip), times=None),
    ]
    last: list[LiveProgress] = []
    with (
        StreamServer({"demo": transcript}, faults=faults, retry_ms=250) as server,
        httpx.Client(timeout=httpx.Timeout(5.0)) as client,
        _Display(out, gate, task_id, len(transcript)) as display,
    ):
        out.print(
            f"serving a recorded OpenAI Responses stream ({len(transcript)} events, "
            f"{len(_calls())} parallel tool calls) at {server.stream_url('demo')}"
        )

        def on_event(p: LiveProgress) -> None:
            last[:] = [p]
            display.event(p)

        result = run_live(
            gate,
            server.stream_url("demo"),
            provider=PROVIDER,
            task_id=task_id,
            client=client,
            limits=StreamLimits(idle_timeout=10.0, progress_timeout=10.0),
            reconnect=ReconnectPolicy(max_attempts=3, max_reconnects=5, max_delay=1.0),
            on_event=on_event,
            on_reconnect=lambda info: display.reconnect(info, last[0] if last else None),
        )
    return result


def _calls() -> tuple[Any, ...]:
    from agent_gate.demo.transcript import CALLS

    return CALLS


@click.command(name="demo")
@db_option
@click.option("--task", "task_id", default=DEFAULT_TASK, show_default=True, help="Task id.")
@click.option(
    "--drip",
    type=click.FloatRange(min=0, max=1),
    default=DEFAULT_DRIP,
    hidden=True,
    help="Seconds between served events (0: as fast as possible).",
)
def demo_command(url: str | None, task_id: str, drip: float) -> None:
    """Stream a recorded answer with four tool calls through policy, ledger and tools.

    No API key and no network: a local server on a loopback port serves the
    stream, cuts it once mid-event, and the client resumes with Last-Event-ID.
    The tools only append to an outbox file ($AGENT_GATE_DEMO_OUTBOX, default
    .agent-gate-demo/outbox.jsonl). Run it twice: the second run answers every
    call from the ledger and runs nothing.
    """
    from agent_gate.demo import example_policy_path
    from agent_gate.demo.tools import outbox_counts, outbox_path, recording_for, tools
    from agent_gate.gate import Gate

    out = console()
    policy = example_policy_path()
    shown_policy = _relative(policy)
    db_shown = _shown_db(url)
    out.print(
        f"[bold]agent-gate demo[/]  ledger: {db_shown}  task: {task_id}  policy: {shown_policy}"
    )
    with failures(), Gate(tools, url, policy=policy, create=True) as gate:
        tag = _tag(gate)
        with recording_for(tag):
            result = _run(out, gate, task_id, drip)
        outcomes = {o.call_id: o for o in result.outcomes}
        rows = _rows(gate, task_id, outcomes)
        waiting = [r.call_id for r in rows if r.state == "awaiting_approval"]
    out.print(_table(rows, final=True))

    ran_now = sum(1 for o in result.outcomes if not o.replayed and o.state.ran)
    from_ledger = sum(1 for o in result.outcomes if o.replayed)
    twice = sum(1 for row in rows if row.runs > 1)
    stats = result.stats
    out.print(
        f"response: {result.terminal} · {stats.connections} connection(s) · "
        f"{result.calls.replayed_events} events replayed by the server after the cut, "
        "recognised and ignored"
    )
    out.print(
        f"tools run by this invocation: {ran_now} · answered from the ledger: {from_ledger} · "
        f"calls that ever ran twice: {twice}"
    )
    total = sum(outbox_counts(task_id, tag).values())
    out.print(f"outbox: {_relative(outbox_path())} ({total} line(s) for task {task_id} "
              "on this ledger)")
    if result.error:
        raise click.ClickException(f"the stream was abandoned: {result.error}")

    db_arg = f" --db {db_shown}" if url else ""
    out.print()
    out.print("[bold]Next[/]")
    for line in _next_steps(task_id, db_arg, shown_policy, waiting):
        out.print(f"  {line}", soft_wrap=True)
    if from_ledger == len(result.outcomes) and result.outcomes:
        out.print("Every call was answered from the ledger: nothing ran again.")
    else:
        out.print("Run `agent-gate demo` again: every call is answered from the ledger.")
