"""What the exit status of an ``agent-gate`` command says, and errors that keep to it.

A script (or CI job) that runs ``agent-gate run``, ``replay`` or ``resume`` learns
from the status alone whether the calls finished or what they wait for; ``--json``
turns an error into one JSON object on standard output, so the script that parses
the output is never handed plain text. Only click is imported here: ``--help``
prints the table.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from enum import IntEnum
from typing import IO, Any

import click

__all__ = ["EXIT_CODES_HELP", "CliError", "ExitCode", "JsonError", "exit_for", "kind_of"]


class ExitCode(IntEnum):
    OK = 0
    """Every call finished: it succeeded, or the tool's failure went back to the agent."""
    FAILED = 1
    """The command could not do what was asked (the stream failed, no such call...)."""
    USAGE = 2
    """A flag or argument is wrong or missing; the message names it."""
    LEDGER = 3
    """The ledger database cannot be opened or used (missing, old schema, unreachable)."""
    REJECTED = 4
    """Some calls were rejected (schema, policy, a person) or never completed: not run."""
    AWAITING_APPROVAL = 5
    """Some calls wait for a person: agent-gate approve / deny, then resume."""
    IN_DOUBT = 6
    """Some calls are in doubt (it is unknown whether they wrote): agent-gate resolve."""
    RUNNING = 7
    """Some calls are still running in another process (or not yet run)."""


EXIT_CODES_HELP = (
    "Exit status: 0 every call finished; 1 the command failed (e.g. the stream); "
    "2 usage error; 3 ledger error; 4 calls rejected or incomplete; 5 calls awaiting "
    "approval; 6 calls in doubt; 7 calls still running elsewhere. When several hold, "
    "the highest need wins: 6, then 5, 7, 4."
)
"""One paragraph for ``--help`` (the README's table says the same)."""

_BY_STATE = {
    "in_doubt": ExitCode.IN_DOUBT,
    "awaiting_approval": ExitCode.AWAITING_APPROVAL,
    "executing": ExitCode.RUNNING,
    "received": ExitCode.RUNNING,
    "authorized": ExitCode.RUNNING,
    "rejected": ExitCode.REJECTED,
    "incomplete": ExitCode.REJECTED,
}
_PRECEDENCE = (ExitCode.IN_DOUBT, ExitCode.AWAITING_APPROVAL, ExitCode.RUNNING,
               ExitCode.REJECTED)


def exit_for(states: Iterable[str]) -> ExitCode:
    """The status for calls left in ``states`` (state values): what needs a person most."""
    found = {_BY_STATE[s] for s in states if s in _BY_STATE}
    return next((code for code in _PRECEDENCE if code in found), ExitCode.OK)


def kind_of(code: int) -> str:
    """The ``kind`` a JSON error names: ``usage``, ``ledger`` or ``error``."""
    if code == ExitCode.USAGE:
        return "usage"
    return "ledger" if code == ExitCode.LEDGER else "error"


class CliError(click.ClickException):
    """A one-line error with the exit status that says what kind of failure it was."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = int(code)


class JsonError(click.ClickException):
    """Any click error, shown as one JSON object on standard output (``--json``)."""

    def __init__(self, cause: click.ClickException) -> None:
        super().__init__(cause.format_message())
        self.cause = cause
        self.exit_code = cause.exit_code

    def to_dict(self) -> dict[str, Any]:
        cause = self.cause
        message = cause.format_message()
        if isinstance(cause, click.UsageError) and cause.ctx is not None:
            message += f" (see: {cause.ctx.command_path} --help)"
        return {"error": {"kind": kind_of(self.exit_code), "message": message,
                          "exit_code": self.exit_code}}

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(json.dumps(self.to_dict(), ensure_ascii=False), file=file)
