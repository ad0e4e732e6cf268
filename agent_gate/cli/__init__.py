"""The ``agent-gate`` command.

Each command group lives in a module of its own under ``agent_gate.cli`` and
exposes ``register(group)``; this module only assembles them, so that adding a
command never means editing another command's code.
"""

from __future__ import annotations

import importlib

import click

# Modules that add commands to the top-level group, in help order.
_COMMAND_MODULES: tuple[str, ...] = (
    "agent_gate.cli.demo",
    "agent_gate.cli.sse",
    "agent_gate.cli.calls",
    "agent_gate.cli.policy",
    "agent_gate.cli.replay",
    "agent_gate.cli.run",
    "agent_gate.cli.db",
    "agent_gate.cli.tasks",
    "agent_gate.cli.approve",
    "agent_gate.cli.resume",
    "agent_gate.cli.resolve",
    "agent_gate.cli.audit",
    "agent_gate.cli.mcp",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="agent-gate")
def main() -> None:
    """Frame LLM streams strictly, run each complete tool call at most once."""


for _name in _COMMAND_MODULES:
    importlib.import_module(_name).register(main)
