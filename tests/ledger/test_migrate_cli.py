"""`agent-gate db upgrade` / `db current`: explicit schema management from the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from agent_gate.cli import main as cli
from agent_gate.ledger import Ledger
from agent_gate.ledger.migrate import head_revision


def test_cli_db_upgrade_from_any_directory(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    cwd = os.getcwd()
    os.chdir(elsewhere)
    try:
        first = runner.invoke(cli, ["db", "upgrade", "--db", url])
        second = runner.invoke(cli, ["db", "upgrade", "--db", url])
        current = runner.invoke(cli, ["db", "current", "--db", url])
    finally:
        os.chdir(cwd)
    assert first.exit_code == 0, first.output
    assert f"upgraded (empty) -> {head_revision()}" in first.output
    assert second.exit_code == 0 and f"already at {head_revision()}" in second.output
    assert current.exit_code == 0 and "up to date" in current.output
    assert not (elsewhere / "agent_gate.db").exists()
    # A ledger opened without auto-upgrade now accepts the database.
    Ledger(url, auto_upgrade=False).close()


def test_cli_db_upgrade_installed_entry_point(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'entry.db'}"
    exe = Path(sys.executable).with_name("agent-gate")
    proc = subprocess.run(
        [str(exe), "db", "upgrade", "--db", url], cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "upgraded" in proc.stdout


def test_cli_db_upgrade_reports_unusable_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}"
    result = CliRunner().invoke(cli, ["db", "upgrade", "--db", url])
    assert result.exit_code == 3  # the ledger cannot be used
    assert "cannot use the ledger database: unable to open database file" in result.output
