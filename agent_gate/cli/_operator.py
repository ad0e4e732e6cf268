"""What the operator commands share beyond options and output: the ledger or gate they
open, and turning failures into messages.

Errors are one line naming the call or task, never an argument value. Options live in
``_options``, printing in ``_output``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from agent_gate.cli._exit import CliError, ExitCode
from agent_gate.errors import (
    AgentGateError,
    AnswerMismatch,
    LedgerConfigError,
    LedgerReplaced,
    LedgerSchemaError,
    NotAwaitingApproval,
    NotInDoubt,
)

if TYPE_CHECKING:
    from agent_gate.authorize import PolicyAuthorizer
    from agent_gate.gate import Gate
    from agent_gate.ledger import CallRecord, Ledger
    from agent_gate.tools import ToolRegistry


def _describe(exc: BaseException) -> str:
    from sqlalchemy.exc import SQLAlchemyError

    if isinstance(exc, SQLAlchemyError):
        orig = getattr(exc, "orig", None)
        return f"cannot use the ledger database: {orig or type(exc).__name__}"
    return str(exc)


_LEDGER_ERRORS = (LedgerConfigError, LedgerReplaced, LedgerSchemaError)


@contextmanager
def failures() -> Iterator[None]:
    """Turn agent-gate and database errors into a one-line error: exit status 3 for a
    ledger that cannot be opened or used, 1 for anything else refused."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (*_LEDGER_ERRORS, SQLAlchemyError) as exc:
        raise CliError(_describe(exc), ExitCode.LEDGER) from None
    except AgentGateError as exc:
        hint = next((h for kind, h in _HINTS if isinstance(exc, kind)), "")
        raise CliError(_describe(exc) + hint) from None


_HINTS: tuple[tuple[type[AgentGateError], str], ...] = (
    (NotAwaitingApproval, "; `agent-gate call show CALL --task TASK` shows what happened to it"),
    (NotInDoubt, "; only a call in doubt is resolved (`agent-gate tasks --state in_doubt`)"),
    (AnswerMismatch, "; `agent-gate call show CALL --task TASK` shows what it holds now"),
)
"""What to do next, after the message of an answer the ledger refused."""


def find_call(ledger: Ledger, call_id: str, task_id: str | None) -> CallRecord:
    """The one call ``CALL_ID`` (of ``--task``) names, or an error that says how to name it."""
    recs = ledger.find(call_id, task_id)
    if not recs:
        where = f" in task {task_id!r}" if task_id is not None else ""
        raise CliError(f"no call {call_id!r}{where} in the ledger; expected a call id as "
                       "`agent-gate audit` or `agent-gate tasks --state STATE` lists them")
    if len(recs) > 1:
        tasks = ", ".join(repr(r.task_id) for r in recs[:5]) + (", ..." if len(recs) > 5 else "")
        raise click.UsageError(
            f"call id {call_id!r} is in {len(recs)} tasks ({tasks}); name one with "
            f"--task TASK, e.g. --task {recs[0].task_id}"
        )
    return recs[0]


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (controls, bidi overrides)
    written as an escape: a model-chosen id can neither rewrite the screen nor reorder
    what the operator reads."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def acting_on(verb: str, rec: CallRecord, args_hash: str) -> None:
    """Say what an answer is about to act on: tool, call, task, the hash it is bound to
    and a short view of the arguments as stored (redacted fields as their stand-ins)."""
    import json

    shown = json.dumps(rec.arguments, ensure_ascii=False, sort_keys=True)
    view = printable(shown if len(shown) <= 300 else shown[:299] + "…")
    click.echo(f"{verb}: {printable(rec.tool)} call {printable(rec.call_id)} of task "
               f"{printable(rec.task_id)}")
    click.echo(f"  arguments sha256 {args_hash}: {view}")


def person(by: str | None, flag: str = "--by") -> str | None:
    """``--by``, stripped; a blank one is refused naming the flag (None stays None)."""
    if by is None:
        return None
    if not by.strip():
        raise click.BadParameter("expected who answers, e.g. --by alice (not blank)",
                                 param_hint=flag)
    return by.strip()


def open_ledger(url: str | None) -> Ledger:
    """The ledger at ``url``; never creates one (``LedgerMissing``, which ``failures``
    turns into a one-line error): an operator looks at and answers calls recorded
    before, and a fresh ledger has none."""
    from agent_gate.ledger import Ledger
    from agent_gate.ledger.backend.dialect import resolve_url

    return Ledger(resolve_url(url))


def open_gate(
    url: str | None, tools: ToolRegistry | None = None,
    policy: str | PolicyAuthorizer | None = None,
) -> Gate:
    """A gate on the existing ledger at ``url`` (never creates one, as ``open_ledger``)."""
    from agent_gate.gate import Gate
    from agent_gate.ledger.backend.dialect import resolve_url
    from agent_gate.tools import ToolRegistry

    return Gate(tools if tools is not None else ToolRegistry(), resolve_url(url), policy=policy)
