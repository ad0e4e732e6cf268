"""``agent-gate db``: bring a ledger database to the schema this version expects."""

from __future__ import annotations

import click

from agent_gate.cli._operator import failures
from agent_gate.cli._options import db_option

# SQLAlchemy and Alembic are imported inside the commands: assembling the CLI for
# `agent-gate sse ...` must not load them. ``failures`` turns their errors (the
# driver's message only, never the statement) into one line, as for every command.


@click.group(name="db")
def db_group() -> None:
    """Create and upgrade the ledger schema (Alembic revisions only)."""


@db_group.command(name="upgrade")
@db_option
@click.option("--revision", default="head", show_default=True, help="Target revision.")
def upgrade_command(url: str | None, revision: str) -> None:
    """Apply every pending migration (a no-op at head; concurrent runs serialize).

    Creates a SQLite ledger file that is not there: this is how a new one is started.
    """
    from agent_gate.ledger.backend import create_ledger_engine
    from agent_gate.ledger.backend.dialect import resolve_url
    from agent_gate.ledger.migrate import upgrade

    resolved = resolve_url(url)
    with failures():
        engine = create_ledger_engine(resolved)
        try:
            before, after = upgrade(engine, revision)
        finally:
            engine.dispose()
    shown = engine.url.render_as_string(hide_password=True)
    if before == after:
        click.echo(f"{shown}: already at {after}")
    else:
        click.echo(f"{shown}: upgraded {before or '(empty)'} -> {after}")


@db_group.command(name="current")
@db_option
def current_command(url: str | None) -> None:
    """Print the database's revision and the code's head revision."""
    from agent_gate.ledger.backend import create_ledger_engine
    from agent_gate.ledger.backend.dialect import resolve_url
    from agent_gate.ledger.ledger_file import require_ledger_file
    from agent_gate.ledger.migrate import current_revision, head_revision

    resolved = resolve_url(url)
    with failures():
        require_ledger_file(resolved, create=False)  # a look never creates a ledger
        engine = create_ledger_engine(resolved, create=False)
        try:
            current = current_revision(engine)
        finally:
            engine.dispose()
        head = head_revision()
    status = "up to date" if current == head else "needs `agent-gate db upgrade`"
    click.echo(f"current: {current or '(empty)'}  head: {head}  ({status})")
