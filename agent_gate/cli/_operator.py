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

from agent_gate.errors import AgentGateError

if TYPE_CHECKING:
    from agent_gate.gate import Gate
    from agent_gate.ledger import Ledger
    from agent_gate.tools import ToolRegistry


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
