"""The options the operator commands share, declared once so their names, help and
defaults cannot drift apart between commands (click decorators)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from agent_gate.authorize import PolicyAuthorizer

F = TypeVar("F", bound=Callable[..., Any])

DB_HELP = "Ledger database URL (default: $AGENT_GATE_DB, else sqlite:///agent_gate.db)."


def db_option_as(dest: str) -> Callable[[F], F]:
    """``--db`` stored under ``dest``: ``run`` needs another name, its ``--url`` is the stream."""
    return click.option("--db", dest, envvar="AGENT_GATE_DB", default=None, help=DB_HELP)


def db_option(fn: F) -> F:
    """``--db`` (or ``$AGENT_GATE_DB``) as the ``url`` argument: every command on a ledger."""
    return db_option_as("url")(fn)


def json_option(fn: F) -> F:
    """``--json``: the same switch everywhere, so scripts can rely on it."""
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON.")(fn)


def next_input_option(fn: F) -> F:
    """``--next-input FILE``: where a command that ran a stream writes the turn to send
    back (``RunResult.next_input``), the same for ``replay`` and ``run``."""
    return click.option(
        "--next-input",
        "next_input",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the assistant turn and the tool results to append for the next "
        "request (a JSON list in the stream's protocol) to this file.",
    )(fn)


def task_option(fn: F) -> F:
    """``--task`` (optional): call ids are unique per task, so needed only when they repeat."""
    return click.option(
        "--task", "task_id", default=None, help="The task of the call (when ids repeat)."
    )(fn)


def role_option(fn: F) -> F:
    """``--role`` (repeatable) as ``roles``: the principal's roles, named the same way by
    every command that builds a principal from flags (``policy check``, ``mcp proxy``)."""
    return click.option(
        "--role", "roles", multiple=True, help="A role of the principal (repeatable)."
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
    return task_option(ledger_options(fn))


def decided_by_options(
    by_help: str, *, required: bool = True, reason_help: str = "Why (recorded, bounded)."
) -> Callable[[F], F]:
    """``--by`` and ``--reason``: who answered a call and why, both kept in the audit trail."""

    def apply(fn: F) -> F:
        fn = click.option("--reason", default=None, help=reason_help)(fn)
        return click.option("--by", required=required, help=by_help)(fn)

    return apply


def expect_hash_option(fn: F) -> F:
    """``--expect-hash``: the arguments' hash the operator was shown (``call show``, the
    inbox); the ledger answers only while the call's arguments still hash to it."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value.strip().lower()):
            raise click.BadParameter("expected the 64 hex digits of the arguments' sha256, "
                                     "as `agent-gate call show` prints them")
        return value.strip().lower() if value is not None else None

    return click.option(
        "--expect-hash", "expect_hash", default=None, metavar="SHA256", callback=check,
        help="Answer only if the call's arguments still hash to this (as `call show` or "
        "the inbox showed them). Default: the hash printed here, read just before.",
    )(fn)


def ledger_options(fn: F) -> F:
    """``--db`` and ``--json``: every command that reads or answers a ledger."""
    return db_option(json_option(fn))


def parse_listen(text: str, *, any_port: bool, param_hint: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a pair. ``any_port``: port 0 asks
    the system for a free one (the caller prints which)."""
    host, sep, port = text.rpartition(":")
    lowest = 0 if any_port else 1
    if not sep or not host or not port.isdigit() or not lowest <= int(port) < 65536:
        raise click.BadParameter(f"expected HOST:PORT, e.g. 127.0.0.1:8765, not {text!r}",
                                 param_hint=param_hint)
    return host.strip("[]"), int(port)


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


def shadow_option(fn: F) -> F:
    """``--shadow FILE`` as ``shadow_file``: every command that runs a gate with a policy
    (``run``, ``resume``, ``mcp proxy``, ``serve``) takes a shadow policy the same way
    (``gate_policy`` builds what the gate is given)."""
    return click.option(
        "--shadow", "shadow_file", default=None, metavar="FILE", type=click.Path(dir_okay=False),
        help="A policy evaluated beside --policy on every call: its would-be decision is "
        "recorded in the call's audit entry and counted in metrics, never enforced.",
    )(fn)


def gate_policy(policy_file: str | None, shadow_file: str | None) -> PolicyAuthorizer | None:
    """The policy a command's gate runs: ``--policy`` with ``--shadow`` beside it. Call it
    inside ``failures()``: a file that does not load is reported as ``policy check`` would."""
    if shadow_file is not None and policy_file is None:
        raise click.UsageError("--shadow needs --policy: a shadow policy's would-be "
                               "decision is recorded beside the enforced one's")
    if policy_file is None:
        return None
    from agent_gate.authorize import PolicyAuthorizer

    return PolicyAuthorizer(policy_file, shadow_policy=shadow_file)
