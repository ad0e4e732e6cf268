"""``agent-gate audit keygen``, ``audit prove``, ``audit export`` and the keys and files
``audit checkpoint`` and ``audit verify`` take: evidence that leaves the box."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from agent_gate.cli._listing import parse_since
from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import emit_json

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from agent_gate.evidence.note import SignerKey, VerifierKey

KEY_ENV = "AGENT_GATE_AUDIT_KEY"

SUBCOMMANDS = click.Group(name="audit")
"""The commands this module adds under `agent-gate audit` (``audit.py`` adds them)."""


def signing_key_option(fn: Any) -> Any:
    fn = click.option("--origin", default=None, metavar="ORIGIN",
                      help="The checkpoint's origin line (default: the key's name).")(fn)
    return click.option(
        "--signing-key", "signing_key", envvar=KEY_ENV, default=None, metavar="FILE",
        type=click.Path(dir_okay=False, path_type=Path),
        help=f"Private key file from `agent-gate audit keygen` (or ${KEY_ENV}): checkpoints "
             "are signed as C2SP tlog-checkpoints. Never stored in the ledger.")(fn)


def load_signer(path: Path | None) -> SignerKey | None:
    """``--signing-key``: the key in the file, refused when others may read it."""
    if path is None:
        return None
    from agent_gate.errors import EvidenceError
    from agent_gate.evidence.note import read_signer

    try:
        return read_signer(path)
    except EvidenceError as error:
        raise click.BadParameter(str(error), param_hint="--signing-key") from None


def load_verifier(text: str) -> VerifierKey:
    """``--key``: a verifier key's text (``NAME+KEYID+KEY``) or a file holding it."""
    from agent_gate.errors import EvidenceError
    from agent_gate.evidence.note import VerifierKey

    if "+" not in text and Path(text).is_file():
        text = Path(text).read_text(encoding="utf-8")
    try:
        return VerifierKey.parse(text)
    except EvidenceError as error:
        raise click.BadParameter(str(error), param_hint="--key") from None


def read_text(path: Path, hint: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise click.BadParameter(f"cannot read {path}: {error}", param_hint=hint) from None


@SUBCOMMANDS.command(name="keygen")
@click.argument("name")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the private key (mode 0600; never overwritten).")
def keygen_command(name: str, out: Path) -> None:
    """Make an Ed25519 key pair NAME (e.g. example.com/agent-gate) for signed checkpoints.

    Writes the private key to --out, readable by you alone, and prints the verifier key
    (NAME+KEYID+KEY) that `--key` takes wherever a public key is asked for. Keep the
    private key out of the database and its backups.
    """
    from agent_gate.errors import EvidenceError
    from agent_gate.evidence.note import SignerKey

    try:
        key = SignerKey.generate(name)
    except EvidenceError as error:
        raise click.BadParameter(str(error), param_hint="NAME") from None
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise click.BadParameter(f"{out} exists: a key is never overwritten",
                                 param_hint="--out") from None
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(key.text + "\n")
    click.echo(key.verifier.text)


@SUBCOMMANDS.command(name="prove")
@click.argument("call_id", required=False)
@click.option("--task", "task_id", default=None, help="The call's task, if its id is not unique.")
@click.option("--consistency", nargs=2, type=int, default=None, metavar="OLD NEW",
              help="A consistency proof between two signed checkpoints (their ids) instead.")
@click.option("--out", "out", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the proof here instead of printing it.")
@signing_key_option
@ledger_options
def prove_command(call_id: str | None, task_id: str | None,
                  consistency: tuple[int, int] | None, out: Path | None,
                  signing_key: Path | None, origin: str | None, url: str | None,
                  as_json: bool) -> None:
    """Prove CALL's entries are in the signed trail (an inclusion proof of each), or with
    --consistency OLD NEW that checkpoint NEW extends OLD.

    With --signing-key a new signed checkpoint is taken first; else the newest signed one
    is used. `agent-gate audit verify --proof FILE --checkpoint NOTE --key KEY` checks
    the proof with no database.
    """
    from agent_gate.evidence.export import prove_call, prove_consistency, signed_checkpoint

    if (call_id is None) == (consistency is None):
        raise click.UsageError("name a CALL, or give --consistency OLD NEW")
    signer = load_signer(signing_key)
    with failures(), open_ledger(url) as ledger:
        signed = signed_checkpoint(ledger.engine, signer, origin)
        proof = (prove_call(ledger.engine, signed, call_id, task_id) if call_id is not None
                 else prove_consistency(signed, *consistency))  # type: ignore[misc]
    text = json.dumps(proof, indent=2) + "\n"
    if out is not None:
        out.write_text(text, encoding="utf-8")
        click.echo(f"proof written to {out} (against checkpoint #{signed.checkpoint.id}, "
                   f"{signed.tree.size} entries)", err=True)
    else:
        click.echo(text, nl=False)


@SUBCOMMANDS.command(name="export")
@click.option("--task", "task_id", default=None, help="One task's entries, each proven.")
@click.option("--since", default=None, metavar="WHEN",
              help="Entries at or after (e.g. 2026-01-01, 24h).")
@click.option("--until", default=None, metavar="WHEN", help="Entries before.")
@click.option("--out", "out", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="A new (or empty) directory for the bundle.")
@signing_key_option
@ledger_options
def export_command(task_id: str | None, since: str | None, until: str | None, out: Path,
                   signing_key: Path | None, origin: str | None, url: str | None,
                   as_json: bool) -> None:
    """Write a self-contained bundle of the trail (entries, signed checkpoint, proofs) that
    `agent-gate audit verify --bundle DIR --key KEY` checks on another machine.

    The entries are exported as stored: ids, states, codes and hashes, never a sealed or
    redacted value. The schema is in docs/guides/audit.md.
    """
    from agent_gate.evidence.export import export_bundle, signed_checkpoint

    signer = load_signer(signing_key)
    start = parse_since(since) if since is not None else None
    end = parse_since(until) if until is not None else None
    with failures(), open_ledger(url) as ledger:
        signed = signed_checkpoint(ledger.engine, signer, origin)
        manifest = export_bundle(ledger.engine, signed, out, task_id=task_id, since=start,
                                 until=end)
    if as_json:
        emit_json({k: manifest[k] for k in ("mode", "entries", "tree_size", "checkpoint_id")})
    else:
        click.echo(f"bundle written to {out}: {manifest['entries']} entries ({manifest['mode']}), "
                   f"proven against checkpoint #{manifest['checkpoint_id']} "
                   f"({manifest['tree_size']} entries)")


def verify_offline(proof: Path | None, checkpoint: Path | None, bundle: Path | None,
                   key: str | None, as_json: bool) -> None:
    """``audit verify --proof/--bundle``: no database; exit 1 when the check fails."""
    from agent_gate.errors import EvidenceError
    from agent_gate.evidence.bundle import verify_bundle, verify_proof

    if key is None:
        raise click.UsageError("--key is needed to check a proof or a bundle")
    verifier = load_verifier(key)
    with failures():
        try:
            if bundle is not None:
                trusted = read_text(checkpoint, "--checkpoint") if checkpoint else None
                finding = verify_bundle(bundle, verifier, trusted_note=trusted)
            else:
                assert proof is not None
                if checkpoint is None:
                    raise click.UsageError("--proof needs --checkpoint NOTE (the signed "
                                           "checkpoint you trust)")
                try:
                    document = json.loads(read_text(proof, "--proof"))
                except ValueError:
                    raise EvidenceError(f"{proof.name} is not JSON") from None
                finding = verify_proof(document, read_text(checkpoint, "--checkpoint"),
                                       verifier)
        except EvidenceError as error:
            raise EvidenceError(f"cannot check it: {error}") from None
    if as_json:
        emit_json(finding.to_dict())
    elif finding.ok:
        assert finding.head is not None
        click.echo(f"ok: {finding.checked} checked against {finding.head.origin}'s signed "
                   f"checkpoint of {finding.head.size} entries")
        for note in finding.notes:
            click.echo(f"  {note}")
    else:
        click.echo(f"evidence BROKEN: {finding.problem}", err=True)
    if not finding.ok:
        raise SystemExit(1)


def verify_from(checkpoint: Path, key: str | None, url: str | None, as_json: bool) -> None:
    """``audit verify --checkpoint NOTE --key KEY``: the ledger against a checkpoint kept
    outside it, checking only what came after it (``ledger.trail_since``)."""
    from agent_gate.evidence.checkpoint import open_checkpoint
    from agent_gate.ledger.backend import begin_read
    from agent_gate.ledger.trail_since import verify_since

    if key is None:
        raise click.UsageError("--checkpoint needs --key (the verifier key that signed it)")
    verifier = load_verifier(key)
    note = read_text(checkpoint, "--checkpoint")
    with failures():
        head, _ = open_checkpoint(note, verifier)
        with open_ledger(url) as ledger, begin_read(ledger.engine) as conn:
            report = verify_since(conn, head)
    if as_json:
        emit_json({**report.to_dict(), "trusted": {"size": head.size, "origin": head.origin}})
    elif report.ok:
        click.echo(f"audit trail ok after the trusted checkpoint of {head.size} entries: "
                   f"{report.entries} newer entries in {report.tasks} task chains")
    else:
        assert report.problem is not None
        click.echo(f"audit trail BROKEN: {report.problem.message}", err=True)
    if not report.ok:
        raise SystemExit(1)


def publish_to(engine: Engine, sinks: tuple[str, ...], note: str, signer: SignerKey
               ) -> list[str]:
    """``audit checkpoint --publish``: each sink in turn (``webhooks.hand_to_witnesses``:
    files directly, HTTP witnesses through the signed outbox); a sink that fails ends
    the command with an error after the others were served (the checkpoint itself is
    stored: the next run publishes the newest, and sends an HTTP witness what it missed)."""
    from agent_gate.cli._exit import CliError
    from agent_gate.serve.webhooks import hand_to_witnesses

    done, failed = hand_to_witnesses(engine, sinks, note, signer.verifier)
    if failed:
        raise CliError("not published to " + "; ".join(failed))
    return done
