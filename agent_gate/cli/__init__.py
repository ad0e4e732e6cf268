"""The ``agent-gate`` command.

Each command lives in a module of its own under ``agent_gate.cli``; the table below
names it and says in one line what it does. A command's module is imported only when
that command runs, so ``agent-gate --help`` imports click alone and ``agent-gate tasks``
only the ledger: an operator feels every second of start-up, on every command.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import click

from agent_gate.cli._exit import EXIT_CODES_HELP, JsonError


class Command(NamedTuple):
    """Where a command lives (module and attribute) and its line in ``--help``.

    A named tuple, not a dataclass: every command, ``--help`` included, creates this
    class, and a frozen dataclass's methods are compiled from source when it is
    created (Python 3.11: about 0.3 ms against 0.04 ms for the named tuple)."""

    module: str
    attr: str
    summary: str


COMMANDS: dict[str, Command] = {
    "approve": Command("approve", "approve_command",
                       "Approve a call that waits for approval (bound to its arguments)."),
    "audit": Command("audit", "audit_group",
                     "Show or verify the hash-chained audit trail."),
    "call": Command("call", "call_group",
                    "Show everything recorded about one call (`call show CALL`)."),
    "calls": Command("calls", "calls_command",
                     "Print the tool calls a recorded stream completed, and how it ended."),
    "db": Command("db", "db_group", "Create and upgrade the ledger schema."),
    "demo": Command("demo", "demo_command",
                    "Run the whole pipeline on a recorded answer: no API key, no server."),
    "deny": Command("approve", "deny_command",
                    "Deny a call that waits for approval: it never runs."),
    "grant": Command("grant", "grant_group",
                     "List or revoke the grants approvers gave (approvals covering more calls)."),
    "mcp": Command("mcp", "mcp_group",
                   "Put the gate in front of an MCP server (every tools/call gated)."),
    "operator": Command("operator", "operator_group",
                        "Manage the operators `agent-gate serve` lets in (tokens, rights)."),
    "pending": Command("pending", "pending_command",
                       "List the calls that wait for a person across tasks (oldest first)."),
    "policy": Command("policy", "policy_group",
                      "Validate policy files and explain their decisions."),
    "replay": Command("replay", "replay_command",
                      "Run a recorded stream through the gate (each call at most once)."),
    "resolve": Command("resolve", "resolve_command",
                       "Settle a call left in doubt, as the downstream system saw it."),
    "resume": Command("resume", "resume_command",
                      "Show what blocks a task, then run what may run now."),
    "run": Command("run", "run_command",
                   "Stream a live endpoint through the gate, resuming after cuts."),
    "serve": Command("serve", "serve_command",
                     "Serve the HTTP API and web inbox where operators answer calls."),
    "sse": Command("sse", "sse_group", "Inspect raw text/event-stream data."),
    "tasks": Command("tasks", "tasks_command",
                     "List tasks with their calls counted by state."),
}
"""Every command, by name. ``tests/cli/test_commands.py`` holds the table to the
modules: each entry's command exists under that name, and no command is left out."""


class _LazyGroup(click.Group):
    """A group that imports a command's module on first use, and lists from the table."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return super().get_command(ctx, cmd_name)
        command: click.Command = getattr(
            importlib.import_module(f"agent_gate.cli.{entry.module}"), entry.attr
        )
        return command

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; with ``--json`` among its arguments, its errors (usage
        errors too, raised while its options are parsed) print as one JSON object."""
        wants_json = "--json" in ctx.args  # read first: the group's invoke empties it
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            if wants_json and not isinstance(exc, JsonError):
                raise JsonError(exc) from None
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, COMMANDS[name].summary if name in COMMANDS
             else self.commands[name].get_short_help_str())
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_CODES_HELP)
@click.version_option(package_name="agent-gate")
def main() -> None:
    """Frame LLM streams strictly, run each complete tool call at most once."""
