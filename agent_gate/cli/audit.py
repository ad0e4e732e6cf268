"""``agent-gate audit``: read the audit trail; ``audit verify``: check its chains and
checkpoints (or a proof or bundle offline); ``audit checkpoint``: bind every entry into
one root now, signed when a key is given (``audit_evidence``: keygen, prove, export)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agent_gate.cli import audit_archive as _archive  # noqa: F401 - adds `audit archive`
from agent_gate.cli._listing import PAGE, PagedTable, listing_options, pages, parse_since
from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import cell, console, emit_json, state_cell, when
from agent_gate.cli.audit_evidence import SUBCOMMANDS, signing_key_option

if TYPE_CHECKING:
    from agent_gate.ledger import AuditRecord, Ledger
    from agent_gate.ledger.views.pages import AuditQuery

_FOLLOW_MIN = 0.05
_FOLLOW_MAX = 1.0
"""Seconds between polls while following: short after news, backing off to this."""


def _decision(detail: dict[str, Any] | None) -> tuple[str, str]:
    if not detail:
        return "", ""
    verdict = str(detail.get("verdict") or "")
    if not verdict and detail.get("approval_id") is not None:
        verdict = "approval"
    return verdict, ", ".join(str(r) for r in detail.get("rule_ids") or ())


def _json(e: Any) -> dict[str, Any]:
    from agent_gate.ledger.views.pages import audit_json

    return audit_json(e)


def _row(e: AuditRecord) -> list[Any]:
    verdict, rules = _decision(e.detail)
    state = state_cell(e.to_state)
    if e.from_state and e.to_state and e.from_state != e.to_state:
        state = cell(f"{e.from_state} → ") + state
    return [cell(e.seq), cell(when(e.at)), cell(e.task_id), cell(e.call_id or ""),
            cell(e.tool or ""), cell(e.event), state,
            cell(verdict, "red" if verdict == "deny" else ""), cell(rules), cell(e.actor)]


_COLUMNS = ("#", "time (UTC)", "task", "call", "tool", "event", "state", "decision",
            "rule ids", "actor")


@click.group(name="audit", invoke_without_command=True)
@click.option("--task", "task_id", default=None, help="Only this task's events.")
@click.option("--call", "call_id", default=None, help="Only this call's events.")
@listing_options("SEQ", "Only entries after this position (#); the next page starts "
                        "after the last one shown.")
@click.option("--ocsf", is_flag=True,
              help="Print each entry as an OCSF API Activity event (JSON lines) for a SIEM; "
                   "with --follow, a live feed. No argument values.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing new entries as they are appended (Ctrl-C ends); starts "
                   "with the last --limit entries (default 10) unless --after is given.")
@ledger_options
@click.pass_context
def audit_group(
    ctx: click.Context, task_id: str | None, call_id: str | None, state: str | None,
    tool: str | None, since: str | None, limit: int | None, after: str | None,
    ocsf: bool, follow: bool, url: str | None, as_json: bool,
) -> None:
    """Show the audit trail: every transition and decision, oldest first, streamed.

    Each entry is linked into its task's hash chain, and checkpoints bind every
    chain into one root; `agent-gate audit verify` checks both.
    Redacted argument fields appear only as digests and short previews; `agent-gate
    call show CALL` shows one call whole. With --limit N one page is shown; the
    next starts with --after and the last # shown.
    """
    if ctx.invoked_subcommand is not None:
        return
    from agent_gate.ledger.views.pages import AuditQuery

    start: int | None = None
    if after is not None:
        if not after.isdigit():
            raise click.BadParameter(f"expected a position (#) such as 120, got {after!r}",
                                     param_hint="--after")
        start = int(after)
    query = AuditQuery(task_id=task_id, call_id=call_id, tool=tool, state=state,
                       since=parse_since(since) if since is not None else None)
    out = console()
    table = PagedTable(out, _COLUMNS, ids=("task", "call"), right=("#",))
    if ocsf:
        from importlib.metadata import version

        from agent_gate.evidence.ocsf import ocsf_event

        product_version = version("agent-gate")
        as_json = True
    shown = last = 0

    def show(page: list[AuditRecord]) -> None:
        nonlocal shown, last
        shown += len(page)
        last = page[-1].seq
        if ocsf:
            for e in page:
                emit_json(ocsf_event(e, product_version=product_version))
        elif as_json:
            for e in page:
                emit_json(_json(e))
        else:
            table.print([_row(e) for e in page])
        sys.stdout.flush()

    with failures(), open_ledger(url) as ledger:

        def fetch(cursor: int | None, n: int) -> list[AuditRecord]:
            return ledger.audit_page(replace(query, after=cursor, limit=n))

        if follow:
            _follow(ledger, query, start, limit, show)
            return
        for page in pages(fetch, lambda e: e.seq, start, limit):
            show(page)
    if shown == 0 and not as_json:
        out.print("no audit events" + (" for that filter" if query != AuditQuery() or start
                                       else ""))
    elif limit is not None and shown == limit and not as_json:
        click.echo(f"more may follow: --after {last} --limit {limit}", err=True)


def _follow(ledger: Ledger, query: AuditQuery, start: int | None, limit: int | None,
            show: Callable[[list[AuditRecord]], None]) -> None:
    """Print what is there, then poll for new entries (backing off while idle), never
    past an entry a later commit could still precede (``pages.settled``)."""
    from agent_gate.ledger.views.pages import settled

    if start is None:
        backlog = ledger.audit_page(replace(query, newest=True, limit=limit or 10))
        if backlog:
            show(backlog)
            start = backlog[-1].seq
        else:  # nothing matches yet: follow from the chain's end
            newest = ledger.audit_page(AuditQuery(newest=True, limit=1))
            start = newest[-1].seq if newest else 0
    pause = _FOLLOW_MIN
    try:
        while True:
            page = ledger.audit_page(replace(query, after=start, limit=PAGE,
                                             upto=settled(ledger.engine)))
            if page:
                show(page)
                start = page[-1].seq
                pause = _FOLLOW_MIN
                continue
            time.sleep(pause)
            pause = min(pause * 2, _FOLLOW_MAX)
    except KeyboardInterrupt:
        return


_ANCHOR = re.compile(r"^(\d+):([0-9a-f]{64})$")


@audit_group.command(name="verify")
@click.option("--anchor", default=None, metavar="ID:HASH",
              help="A checkpoint printed by an earlier verify or checkpoint and kept "
                   "elsewhere (or a SEQ:HASH head printed before the upgrade to per-task "
                   "chains); it must still be there (catches a trail rewritten wholesale).")
@click.option("--proof", "proof", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Check a proof from `audit prove` instead (no database; needs "
                   "--checkpoint and --key).")
@click.option("--bundle", "bundle", default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="Check a bundle from `audit export` instead (no database; needs --key).")
@click.option("--checkpoint", "checkpoint", default=None,
              type=click.Path(dir_okay=False, path_type=Path),
              help="A signed checkpoint you trust (kept from earlier, or a witness's copy): "
                   "alone, the ledger is checked from it on, reading only what came after.")
@click.option("--key", "key", default=None, metavar="PUBKEY",
              help="The ledger's verifier key NAME+KEYID+KEY (or a file holding it).")
@click.option("--deep", is_flag=True, default=False,
              help="Also check the hashes kept of every archived entry (audit archive), "
                   "not only the subtrees that stand for them: reads every entry ever "
                   "archived.")
@ledger_options
def verify_command(anchor: str | None, proof: Path | None, bundle: Path | None,
                   checkpoint: Path | None, key: str | None, deep: bool, url: str | None,
                   as_json: bool) -> None:
    """Check every task's hash chain and every checkpoint; name the first entry edited,
    deleted, reordered or truncated. With --proof or --bundle, check evidence offline
    against the signed checkpoint and the verifier key instead.

    Exit status 0 when the trail (or the evidence) is whole, 1 when it is not.
    """
    if deep and (proof is not None or bundle is not None or checkpoint is not None):
        raise click.UsageError("--deep checks the ledger's whole trail: not with --proof, "
                               "--bundle or --checkpoint")
    if proof is not None or bundle is not None:
        if proof is not None and bundle is not None:
            raise click.UsageError("check a --proof or a --bundle, not both")
        from agent_gate.cli.audit_evidence import verify_offline

        verify_offline(proof, checkpoint, bundle, key, as_json)
        return
    if checkpoint is not None:
        from agent_gate.cli.audit_evidence import verify_from

        verify_from(checkpoint, key, url, as_json)
        return
    pinned: tuple[int, str] | None = None
    if anchor is not None:
        match = _ANCHOR.match(anchor.strip().lower())
        if match is None:
            raise click.BadParameter("expected ID:HASH (64 hex digits)", param_hint="--anchor")
        pinned = (int(match.group(1)), match.group(2))
    with failures(), open_ledger(url) as ledger:
        report = ledger.verify_audit(anchor=pinned, deep=deep)
    if as_json:
        emit_json(report.to_dict())
    elif report.ok:
        click.echo(f"audit trail ok: {report.entries} entries in {report.tasks} task chains")
        newest = report.checkpoint
        if newest is None:
            click.echo("no checkpoint yet: `agent-gate audit checkpoint` writes one")
        else:
            click.echo(f"checkpoint: {newest.anchor}")
            click.echo(f"  taken {when(newest.at)} over {newest.heads_text}")
            click.echo("keep it elsewhere; `agent-gate audit verify --anchor ID:HASH` later "
                       "proves the trail was not rewritten up to it")
    else:
        assert report.problem is not None
        click.echo(f"audit trail BROKEN: {report.problem.message}", err=True)
    if not report.ok:
        raise SystemExit(1)


@audit_group.command(name="checkpoint")
@click.option("--publish", "publish", multiple=True, metavar="SINK",
              help="Hand the signed checkpoint to a witness: a file (the newest), a "
                   "directory (every one, and latest.note), or an http(s):// URL (through "
                   "the webhooks' signed outbox: secret in $AGENT_GATE_WITNESS_SECRET, "
                   "at least once, what it missed sent again first); repeatable. Never "
                   "backwards.")
@signing_key_option
@ledger_options
def checkpoint_command(publish: tuple[str, ...], signing_key: Path | None,
                       origin: str | None, url: str | None, as_json: bool) -> None:
    """Write a checkpoint: one root hash over every task's chain head, linked to the
    previous checkpoint (none is written when no task moved since the last one).

    Run it from cron or after a batch; keep the ID:HASH it prints elsewhere. Entries
    newer than the newest checkpoint are protected by their task's chain only. With a
    signing key the checkpoint's Merkle tree is signed as a C2SP tlog-checkpoint, which
    is printed: keep it, or hand it to a witness.
    """
    from agent_gate.cli.audit_evidence import load_signer
    from agent_gate.ledger.checkpoints import take

    signer = load_signer(signing_key)
    if publish and signer is None:
        raise click.UsageError("--publish needs --signing-key: only a signed checkpoint "
                               "means anything outside the ledger")
    published: list[str] = []
    with failures(), open_ledger(url) as ledger:
        made = take(ledger.engine, signer=signer, origin=origin)
        if publish:
            from agent_gate.cli.audit_evidence import publish_to

            assert made.note is not None and signer is not None
            published = publish_to(ledger.engine, publish, made.note, signer)
    if as_json:
        emit_json({**made.to_dict(), "note": made.note, "published": published})
    else:
        click.echo(f"checkpoint: {made.anchor}")
        click.echo(f"  taken {when(made.at)} over {made.heads_text}, "
                   f"{made.tree_size} entries")
        if made.note is not None:
            click.echo(made.note, nl=False)
        for path in published:
            click.echo(f"published to {path}")


for _command in SUBCOMMANDS.commands.values():
    audit_group.add_command(_command)
