"""``agent-gate operator add | list | remove``: who may answer calls through ``serve``.

``add`` prints the new operator's token once: the ledger keeps only its hash, so a
lost token is replaced (remove, add), never recovered.
"""

from __future__ import annotations

import click

from agent_gate.cli._exit import CliError
from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import db_option, json_option
from agent_gate.cli._output import emit_json, when

_TOOLS_HELP = "Comma-separated tool names, or * for every tool."


@click.group(name="operator")
def operator_group() -> None:
    """Manage the operators `agent-gate serve` lets in (tokens, rights)."""


@operator_group.command(name="add")
@click.argument("name")
@click.option("--approve", "approve", default=None, metavar="TOOLS",
              help="Tools whose waiting calls they may approve or deny. " + _TOOLS_HELP)
@click.option("--resolve", "resolve", default=None, metavar="TOOLS",
              help="Tools whose in-doubt calls they may resolve. " + _TOOLS_HELP)
@db_option
@json_option
def add_command(name: str, approve: str | None, resolve: str | None, url: str | None,
                as_json: bool) -> None:
    """Add operator NAME and print their token (shown this once; only its hash is kept)."""
    from agent_gate.ledger.views.operators import Operators, parse_tools

    with failures(), open_ledger(url) as ledger:
        op, token = Operators(ledger.engine).add(
            name, approve=parse_tools(approve), resolve=parse_tools(resolve))
    if as_json:
        emit_json({"token": token, **op.to_dict()})
        return
    click.echo(f"operator {op.name} added: approve {', '.join(op.approve) or '-'}; "
               f"resolve {', '.join(op.resolve) or '-'}")
    click.echo(f"token (shown once, keep it secret): {token}")


@operator_group.command(name="list")
@db_option
@json_option
def list_command(url: str | None, as_json: bool) -> None:
    """List operators and their rights (never a token)."""
    from agent_gate.ledger.views.operators import Operators

    with failures(), open_ledger(url) as ledger:
        ops = Operators(ledger.engine).list()
    if as_json:
        emit_json([op.to_dict() for op in ops])
        return
    if not ops:
        click.echo("no operators; add one with `agent-gate operator add NAME --approve TOOLS`")
    for op in ops:
        click.echo(f"{op.name}\tapprove {','.join(op.approve) or '-'}\t"
                   f"resolve {','.join(op.resolve) or '-'}\tadded {when(op.created_at)} UTC")


@operator_group.command(name="remove")
@click.argument("name")
@db_option
@json_option
def remove_command(name: str, url: str | None, as_json: bool) -> None:
    """Remove operator NAME: their token stops working at once."""
    from agent_gate.ledger.views.operators import Operators

    with failures(), open_ledger(url) as ledger:
        removed = Operators(ledger.engine).remove(name)
    if not removed:
        raise CliError(f"no operator {name!r}; `agent-gate operator list` shows them")
    if as_json:
        emit_json({"removed": name})
        return
    click.echo(f"operator {name} removed")
