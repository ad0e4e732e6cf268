"""keygen, signed checkpoints, proofs and bundles through the `agent-gate` command, and
every tamper the issue names, caught offline (no ledger is opened by the checks)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agent_gate.cli import main
from agent_gate.evidence.checkpoint import open_checkpoint
from agent_gate.evidence.note import VerifierKey
from agent_gate.ledger import Event, Ledger, NewCall


def cli(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def new_call(call_id: str, task: str) -> NewCall:
    return NewCall(task_id=task, call_id=call_id, idem_key=f"call:{call_id}", tool="tool",
                   effect="write", idempotency="none", args_hash="0" * 64, arguments={})


def run_calls(url: str, start: int, count: int, tasks: int = 3) -> None:
    with Ledger(url) as ledger:
        for i in range(start, start + count):
            rec, _ = ledger.record(new_call(f"c{i}", task=f"t{i % tasks}"))
            rec = ledger.transition(rec, Event.ALLOW, actor="test")


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, str]:
    """A key made by the command itself: (private key file, verifier key text)."""
    path = tmp_path / "ledger.key"
    done = subprocess.run([sys.executable, "-m", "agent_gate", "audit", "keygen",
                           "ledger.example/agent-gate", "--out", str(path)],
                          capture_output=True, text=True, timeout=60, check=True)
    return path, done.stdout.strip()


def test_keygen_writes_a_private_file_and_prints_the_verifier_key(
    keys: tuple[Path, str], tmp_path: Path
) -> None:
    path, vkey = keys
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert VerifierKey.parse(vkey).name == "ledger.example/agent-gate"
    assert path.read_text().startswith("PRIVATE+KEY+ledger.example/agent-gate+")
    again = cli("audit", "keygen", "x.example/y", "--out", path)
    assert again.exit_code != 0 and "never overwritten" in again.output
    os.chmod(path, 0o644)
    refused = cli("audit", "checkpoint", "--signing-key", path, "--db", "sqlite:///nowhere.db")
    assert refused.exit_code != 0 and "chmod 600" in refused.output


def test_a_signed_checkpoint_proves_a_call_and_a_consistency_with_no_database(
    db_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key, vkey = keys
    run_calls(db_url, 0, 4)
    first = cli("audit", "checkpoint", "--signing-key", key, "--db", db_url, "--json")
    assert first.exit_code == 0, first.output
    first_note = json.loads(first.output)["note"]
    head, _ = open_checkpoint(first_note, VerifierKey.parse(vkey))
    assert head.origin == "ledger.example/agent-gate" and head.size > 0
    run_calls(db_url, 4, 3)
    proof = tmp_path / "c5.json"
    made = cli("audit", "prove", "c5", "--signing-key", key, "--db", db_url, "--out", proof)
    assert made.exit_code == 0, made.output
    document = json.loads(proof.read_text())
    assert {e["call"] for e in document["entries"]} == {"c5"}
    note = tmp_path / "checkpoint.note"
    note.write_text(document["checkpoint"])
    if db_url.startswith("sqlite"):
        os.remove(db_url.removeprefix("sqlite:///"))  # nothing below may read the ledger
    ok = cli("audit", "verify", "--proof", proof, "--checkpoint", note, "--key", vkey)
    assert ok.exit_code == 0, ok.output
    assert f"ok: {len(document['entries'])} checked" in ok.output
    # An edited entry, a moved index, another checkpoint: each refused.
    for change in ({"actor": "mallory"}, {"index": document["entries"][0]["index"] + 1}):
        bad = json.loads(proof.read_text())
        bad["entries"][0].update(change)
        proof.write_text(json.dumps(bad))
        refused = cli("audit", "verify", "--proof", proof, "--checkpoint", note, "--key", vkey)
        assert refused.exit_code == 1 and "BROKEN" in refused.output
    older = tmp_path / "older.note"
    older.write_text(first_note)
    proof.write_text(json.dumps(document))
    stale = cli("audit", "verify", "--proof", proof, "--checkpoint", older, "--key", vkey)
    assert stale.exit_code == 1


def test_consistency_between_two_signed_checkpoints(
    sqlite_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    key, vkey = keys
    run_calls(sqlite_url, 0, 3)
    assert cli("audit", "checkpoint", "--signing-key", key, "--db", sqlite_url).exit_code == 0
    run_calls(sqlite_url, 3, 5)
    done = cli("audit", "prove", "--consistency", "1", "2", "--signing-key", key,
               "--db", sqlite_url)
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    note = tmp_path / "new.note"
    note.write_text(document["checkpoint"])
    (tmp_path / "p.json").write_text(done.output)
    ok = cli("audit", "verify", "--proof", tmp_path / "p.json", "--checkpoint", note,
             "--key", vkey)
    assert ok.exit_code == 0, ok.output
    document["proof"] = document["proof"][1:]
    (tmp_path / "p.json").write_text(json.dumps(document))
    assert cli("audit", "verify", "--proof", tmp_path / "p.json", "--checkpoint", note,
               "--key", vkey).exit_code == 1


@pytest.fixture
def exported(db_url: str, keys: tuple[Path, str], tmp_path: Path) -> dict[str, Path]:
    """Two bundles of one ledger (on each backend): every entry, and task t1's."""
    key, _ = keys
    run_calls(db_url, 0, 4)
    assert cli("audit", "checkpoint", "--signing-key", key, "--db", db_url).exit_code == 0
    (tmp_path / "trusted-old.note").write_text(
        json.loads(cli("audit", "checkpoint", "--db", db_url, "--json").output)["note"])
    run_calls(db_url, 4, 5)
    out = {"all": tmp_path / "all", "task": tmp_path / "task"}
    for name, extra in (("all", ()), ("task", ("--task", "t1"))):
        done = cli("audit", "export", *extra, "--out", out[name], "--signing-key", key,
                   "--db", db_url)
        assert done.exit_code == 0, done.output
    return out


def check(bundle: Path, vkey: str, *extra: str | Path) -> Result:
    return cli("audit", "verify", "--bundle", bundle, "--key", vkey, *extra)


def test_an_exported_bundle_verifies_offline(
    exported: dict[str, Path], keys: tuple[Path, str], tmp_path: Path
) -> None:
    _, vkey = keys
    for bundle in exported.values():
        done = check(bundle, vkey, "--checkpoint", tmp_path / "trusted-old.note")
        assert done.exit_code == 0, done.output
        assert "consistent with the trusted checkpoint" in done.output
    entries = [json.loads(x) for x in (exported["task"] / "entries.jsonl").read_text().splitlines()]
    assert {e["task"] for e in entries} == {"t1"} and entries[0]["seq"] == 1
    manifest = json.loads((exported["all"] / "manifest.json").read_text())
    assert manifest["mode"] == "range" and manifest["first"] == 0
    assert manifest["entries"] == manifest["tree_size"]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _edit(lines: list[str]) -> list[str]:
    entry = json.loads(lines[2])
    entry["event"] = "succeeded"
    return [*lines[:2], json.dumps(entry) + "\n", *lines[3:]]


TAMPERS = {
    "edit": _edit,
    "drop": lambda lines: lines[:2] + lines[3:],
    "reorder": lambda lines: [lines[1], lines[0], *lines[2:]],
}


@pytest.mark.parametrize("kind", ["all", "task"])
@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_tampered_entries_are_caught_offline(
    exported: dict[str, Path], keys: tuple[Path, str], tmp_path: Path, kind: str, tamper: str
) -> None:
    _, vkey = keys
    bundle = tmp_path / "copy"
    shutil.copytree(exported[kind], bundle)
    entries = bundle / "entries.jsonl"
    entries.write_text("".join(TAMPERS[tamper](_lines(entries))))
    if tamper == "drop":  # the manifest is unsigned: an attacker fixes its count too
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["entries"] -= 1
        (bundle / "manifest.json").write_text(json.dumps(manifest))
    done = check(bundle, vkey)
    assert done.exit_code == 1 and "evidence BROKEN" in done.output, done.output


def test_a_swapped_forged_or_rolled_back_checkpoint_is_caught_offline(
    exported: dict[str, Path], keys: tuple[Path, str], tmp_path: Path
) -> None:
    _, vkey = keys
    bundle = tmp_path / "copy"
    shutil.copytree(exported["all"], bundle)
    note = bundle / "checkpoint.note"
    signed = note.read_text()
    # Forged: the size changed, the signature kept.
    lines = signed.split("\n")
    lines[1] = str(int(lines[1]) - 1)
    note.write_text("\n".join(lines))
    forged = check(bundle, vkey)
    assert forged.exit_code != 0 and "does not verify" in forged.output
    # Swapped for the ledger's own older checkpoint: validly signed, another tree.
    note.write_text((tmp_path / "trusted-old.note").read_text())
    assert check(bundle, vkey).exit_code == 1
    # Rolled back whole: an honest older bundle against the newer checkpoint you kept.
    note.write_text(signed)
    newer = tmp_path / "newer.note"
    newer.write_text(signed)
    old_bundle = tmp_path / "old"
    old_bundle.mkdir()
    shutil.copy(tmp_path / "trusted-old.note", old_bundle / "checkpoint.note")
    (old_bundle / "entries.jsonl").write_text("")
    (old_bundle / "manifest.json").write_text(json.dumps({
        "format": "agent-gate/audit-bundle", "version": 1, "mode": "task", "entries": 0}))
    rolled = check(old_bundle, vkey, "--checkpoint", newer)
    assert rolled.exit_code == 1 and "rolled back" in rolled.output


def test_evidence_from_one_ledger_does_not_verify_against_another(
    exported: dict[str, Path], keys: tuple[Path, str], tmp_path: Path,
    new_sqlite_ledger: object,
) -> None:
    key, vkey = keys
    other = new_sqlite_ledger(tmp_path / "other.db")  # type: ignore[operator]
    run_calls(other, 0, 9)  # the same calls, another ledger (other times)
    done = cli("audit", "export", "--out", tmp_path / "other", "--signing-key", key,
               "--db", other)
    assert done.exit_code == 0, done.output
    mixed = tmp_path / "mixed"
    shutil.copytree(exported["all"], mixed)
    shutil.copy(tmp_path / "other" / "checkpoint.note", mixed / "checkpoint.note")
    assert check(mixed, vkey).exit_code == 1
    other_key = tmp_path / "other.key"
    theirs = cli("audit", "keygen", "ledger.example/agent-gate", "--out", other_key).output
    assert check(exported["all"], theirs.strip()).exit_code != 0


def test_a_time_window_exports_a_contiguous_run_proven_in_place(
    sqlite_url: str, keys: tuple[Path, str], tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    key, vkey = keys
    run_calls(sqlite_url, 0, 3)
    since = datetime.now(UTC)
    run_calls(sqlite_url, 3, 3)
    until = datetime.now(UTC)
    run_calls(sqlite_url, 6, 3)
    out = tmp_path / "window"
    done = cli("audit", "export", "--since", since.isoformat(), "--until", until.isoformat(),
               "--out", out, "--signing-key", key, "--db", sqlite_url)
    assert done.exit_code == 0, done.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert 0 < manifest["first"] < manifest["end"] < manifest["tree_size"]
    entries = [json.loads(x) for x in (out / "entries.jsonl").read_text().splitlines()]
    assert {e["call"] for e in entries if e["call"]} == {"c3", "c4", "c5"}
    assert check(out, vkey).exit_code == 0
    # The first entry dropped and the manifest made to match: the tree does not rebuild.
    lines = _lines(out / "entries.jsonl")
    (out / "entries.jsonl").write_text("".join(lines[1:]))
    manifest.update(first=manifest["first"] + 1, entries=manifest["entries"] - 1)
    (out / "manifest.json").write_text(json.dumps(manifest))
    refused = check(out, vkey)
    assert refused.exit_code == 1 and "evidence BROKEN" in refused.output
