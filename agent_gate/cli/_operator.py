"""What the operator commands share: options, output, and turning failures into messages.

Output is for people first: aligned tables via rich, with colour only when standard
output is a terminal (rich decides; ``NO_COLOR`` is honoured). Every command also
takes ``--json`` and then prints one JSON document or JSON lines and nothing else.
Errors are one line naming the call or task, never an argument value.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from agent_gate.errors import AgentGateError

if TYPE_CHECKING:
    from rich.console import Console

    from agent_gate.gate import Gate
    from agent_gate.ledger import Ledger
    from agent_gate.tools import ToolRegistry

F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = "Ledger database URL (default: $AGENT_GATE_DB, else sqlite:///agent_gate.db)."


def db_option_as(dest: str) -> Callable[[F], F]:
    """``--db`` stored under ``dest``: ``run`` needs another name, its ``--url`` is the stream."""
    return click.option("--db", dest, envvar="AGENT_GATE_DB", default=None, help=DB_HELP)


def db_option(fn: F) -> F:
    """``--db`` (or ``$AGENT_GATE_DB``) as the ``url`` argument: every command on a ledger."""
    return db_option_as("url")(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON.")(fn)


def task_option(fn: F) -> F:
    return click.option(
        "--task", "task_id", default=None, help="The task of the call (when ids repeat)."
    )(fn)


TOOLS_HELP = "The ToolRegistry to execute (ATTR defaults to 'tools'; cwd is importable)."


def tools_option(fn: F) -> F:
    """``--tools MODULE[:ATTR]`` as ``tools_spec``, for ``load_registry``: the commands that
    run calls (replay, run, resume) name their registry the same way."""
    return click.option(
        "--tools", "tools_spec", required=True, metavar="MODULE[:ATTR]", help=TOOLS_HELP
    )(fn)


def stream_task_options(fn: F) -> F:
    """``--task`` (required) and ``--tools``: whose calls a stream holds, and what runs them."""
    fn = tools_option(fn)
    return click.option(
        "--task", "task_id", required=True, help="Task id the calls belong to."
    )(fn)


def call_options(fn: F) -> F:
    """``--task``, ``--db`` and ``--json``: every command that answers one call by its id."""
    return task_option(db_option(json_option(fn)))


def decided_by_options(
    by_help: str, *, required: bool = True, reason_help: str = "Why (recorded, bounded)."
) -> Callable[[F], F]:
    """``--by`` and ``--reason``: who answered a call and why, both kept in the audit trail."""

    def apply(fn: F) -> F:
        fn = click.option("--reason", default=None, help=reason_help)(fn)
        return click.option("--by", required=required, help=by_help)(fn)

    return apply


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


def _describe(exc: BaseException) -> str:
    from sqlalchemy.exc import SQLAlchemyError

    if isinstance(exc, SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        return f"cannot use the ledger database: {orig or type(exc).__name__}"
    return str(exc)


@contextmanager
def failures() -> Iterator[None]:
    """Turn agent-gate and database errors into a one-line error and exit status 1."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (AgentGateError, SQLAlchemyError) as exc:
        raise click.ClickException(_describe(exc)) from None


def open_ledger(url: str | None) -> Ledger:
    """The ledger at ``url``; never creates one (``LedgerMissing``, which ``failures``
    turns into a one-line error): an operator looks at and answers calls recorded
    before, and a fresh ledger has none."""
    from agent_gate.ledger import Ledger
    from agent_gate.ledger.dialect import resolve_url

    return Ledger(resolve_url(url))


def open_gate(
    url: str | None, tools: ToolRegistry | None = None, policy: str | None = None
) -> Gate:
    """A gate on the existing ledger at ``url`` (never creates one, as ``open_ledger``)."""
    from agent_gate.gate import Gate
    from agent_gate.ledger.dialect import resolve_url
    from agent_gate.tools import ToolRegistry

    return Gate(tools if tools is not None else ToolRegistry(), resolve_url(url), policy=policy)


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


def parse_duration(text: str, *, param_hint: str = "--expires-in") -> float | None:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` as seconds; ``never`` as None.

    Judged by ``approvals.ttl_problem``, the rule ``Gate.approve(ttl=)`` applies too:
    ``0``, negative, ``inf``, ``nan`` and more than 366 days are refused.
    """
    from agent_gate.ledger.approvals import MAX_TTL_SECONDS, ttl_problem

    text = text.strip().lower()
    if text in ("never", "none"):
        return None
    expected = (f"a duration like 30m, 2h or 1d, greater than 0 and at most 366d "
                f"({MAX_TTL_SECONDS} seconds), or never")
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    factor = units.get(text[-1:])
    number = text[:-1] if factor else text
    try:
        value = float(number) * (factor or 1)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not {expected}", param_hint=param_hint) from None
    why = ttl_problem(value)
    if why is not None:
        raise click.BadParameter(f"{text!r}: {why}; give {expected}", param_hint=param_hint)
    return value
