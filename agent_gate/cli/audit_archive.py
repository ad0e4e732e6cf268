"""``agent-gate audit archive``: retention without losing the proof (``evidence.archive``)."""

from __future__ import annotations

from pathlib import Path

import click

from agent_gate.cli._listing import parse_since
from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import emit_json
from agent_gate.cli.audit_evidence import SUBCOMMANDS, load_signer, signing_key_option


@SUBCOMMANDS.command(name="archive")
@click.option("--before", required=True, metavar="WHEN",
              help="Archive tasks finished before this (e.g. 90d, or an ISO time).")
@click.option("--out", "out", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="A new (or empty) directory for the archive's bundles.")
@click.option("--batch", default=50, show_default=True, type=click.IntRange(min=1),
              help="Tasks pruned per write transaction (calls go on between batches).")
@signing_key_option
@ledger_options
def archive_command(before: str, out: Path, batch: int, signing_key: Path | None,
                    origin: str | None, url: str | None, as_json: bool) -> None:
    """Export every finished task (all its calls terminal) older than --before into
    signed bundles under --out, then prune it from the live ledger.

    The trail keeps each pruned entry's hashes and records each batch (its root), so
    `audit verify` still proves nothing else was removed; a pruned call sent again is
    answered from its tombstone and never runs. Each DIR/tasks/NNNNNN is checked with
    `agent-gate audit verify --bundle DIR/tasks/NNNNNN --key KEY`.
    """
    from agent_gate.evidence.archive import archive

    signer = load_signer(signing_key)
    if signer is None:
        raise click.UsageError("audit archive needs --signing-key (or AGENT_GATE_AUDIT_KEY): "
                               "the bundles are proven against a signed checkpoint")
    cut = parse_since(before)
    with failures(), open_ledger(url) as ledger:
        report = archive(ledger.engine, signer, origin, cut, out, batch=batch)
    if as_json:
        emit_json(report.to_dict())
    else:
        live = f"; {len(report.left_live)} changed meanwhile and stay live" \
            if report.left_live else ""
        click.echo(f"archived {report.tasks} tasks ({report.calls} calls, {report.entries} "
                   f"entries) to {out} in {len(report.batches)} batches{live}")
