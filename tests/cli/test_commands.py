"""The command table and what each command imports.

``agent_gate.cli.COMMANDS`` names every command and the module it lives in, so that
a command's module is imported only when it runs. These tests hold the table to the
modules (no command missing, none misnamed) and check the point of it: what
``--help`` and ``tasks`` load, counted as modules in a fresh interpreter rather than
timed (a shared machine makes times noise; an import that comes back is exact).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from agent_gate import Gate, ToolRegistry
from agent_gate.cli import COMMANDS, main

CLI_DIR = Path(__file__).resolve().parents[2] / "agent_gate" / "cli"

HEAVY = ("alembic", "pydantic", "jsonschema", "yaml", "httpx", "agent_gate.gate",
         "agent_gate.policy", "agent_gate.providers", "agent_gate.tools")
"""What a ledger reader has no use for: migrations, policy and schema machinery, HTTP,
stream parsing."""

WRITE_PATH = ("agent_gate.ledger.flows", "agent_gate.ledger.intake",
              "agent_gate.ledger.audit", "agent_gate.ledger.approvals",
              "agent_gate.ledger.quota", "agent_gate.ledger.txn", "agent_gate.ledger.chain",
              "agent_gate.privacy.scrub", "agent_gate.ledger.lease",
              "agent_gate.ledger.views.notify")
"""The ledger's writers: what ``tasks``, a read, has no use for."""

UNUSED_BY_ANSWERS = ("agent_gate.ledger.intake", "agent_gate.ledger.trail_verify",
                     "agent_gate.ledger.checkpoints", "agent_gate.ledger.views.details",
                     "agent_gate.ledger.views.pages", "rich")
"""What answering a waiting call has no use for: a new call's insert, the trail's
verifier and checkpoints, a call's details, listings, tables."""

NOT_A_READ = ("agent_gate.ledger.trail_verify", "agent_gate.ledger.checkpoints",
              "agent_gate.ledger.views.details", "agent_gate.telemetry.base", "msgspec", "orjson")
"""Neither a listing nor an answer uses the trail's verifier, a call's details, the
observer's classes or the compiled JSON libraries (``_speedups`` loads those when a
stream is decoded)."""


def _declared_commands() -> dict[str, tuple[str, str]]:
    """Every top-level ``@click.command``/``@click.group`` in the cli modules, found in
    the source: name -> (module, attribute)."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(CLI_DIR.glob("*.py")):
        if path.name == "__init__.py":
            continue  # the root group itself
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                if (
                    isinstance(deco, ast.Call)
                    and isinstance(deco.func, ast.Attribute)
                    and isinstance(deco.func.value, ast.Name)
                    and deco.func.value.id == "click"
                    and deco.func.attr in ("command", "group")
                ):
                    name = next(k.value for k in deco.keywords if k.arg == "name")
                    assert isinstance(name, ast.Constant)
                    found[name.value] = (path.stem, node.name)
    return found


def test_the_table_names_every_command_where_it_lives() -> None:
    declared = _declared_commands()
    assert {name: (c.module, c.attr) for name, c in COMMANDS.items()} == declared
    for name in COMMANDS:
        command = main.get_command(click.Context(main), name)
        assert isinstance(command, click.Command) and command.name == name


def test_help_lists_every_command_with_its_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agent_gate", "--help"], capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout
    for name, command in COMMANDS.items():
        assert f"  {name} " in out and command.summary in " ".join(out.split())


def _modules_after(*argv: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running ``agent-gate ARGV``."""
    probe = (
        "import json, sys\n"
        "from agent_gate.cli import main\n"
        "try:\n"
        f"    main({list(argv)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def _loaded(modules: set[str], prefix: str) -> bool:
    return any(m == prefix or m.startswith(prefix + ".") for m in modules)


def test_help_imports_click_alone() -> None:
    modules = _modules_after("--help")
    assert not _loaded(modules, "sqlalchemy") and not _loaded(modules, "rich")
    assert [m for m in HEAVY if _loaded(modules, m)] == []
    # of agent-gate itself: the package root (its lazy table; AgentGateError too is
    # resolved on first use since issue 31) and the group
    assert {m for m in modules if _loaded({m}, "agent_gate")} == {
        "agent_gate", "agent_gate._lazy", "agent_gate.cli", "agent_gate.cli._exit"}


@pytest.mark.parametrize("argv", [("tasks",), ("tasks", "--json")])
def test_tasks_imports_the_ledger_alone(argv: tuple[str, ...], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Gate(ToolRegistry(), url, create=True) as gate:
        gate.execute("t1", {"call_id": "c1", "name": "missing", "arguments": {}})
    modules = _modules_after(*argv, "--db", url)
    assert _loaded(modules, "agent_gate.ledger")
    assert [m for m in HEAVY if _loaded(modules, m)] == []
    # nor another database's dialect or driver, nor the ORM (the ledger's tables are
    # Core tables)
    assert not _loaded(modules, "sqlalchemy.dialects.postgresql")
    assert not _loaded(modules, "psycopg")
    assert not _loaded(modules, "sqlalchemy.orm")
    # nor the ledger's write path: opening a ledger to list it reads rows and no more
    assert [m for m in (*WRITE_PATH, *NOT_A_READ) if _loaded(modules, m)] == []
    # the table is rich's; JSON lines need none of it
    assert _loaded(modules, "rich") == ("--json" not in argv)


def _waiting_call(tmp_path: Path) -> tuple[str, str]:
    """A ledger with the demo's calls, one of them waiting for approval: (url, call id)."""
    from agent_gate.ledger import Ledger

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with pytest.raises(SystemExit) as done:
        main(["demo", "--db", url])
    assert done.value.code in (0, None)
    with Ledger(url) as ledger:
        waiting = [c for c in ledger.calls("demo") if c.state.value == "awaiting_approval"]
    assert len(waiting) == 1
    return url, waiting[0].call_id


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_an_answer_without_a_policy_imports_the_ledger_alone(verb: str, tmp_path: Path) -> None:
    """``approve``/``deny`` without ``--policy`` answer through ``gate.desk``: neither
    the ``Gate`` nor the policy, schema or provider code it brings is imported."""
    from agent_gate.ledger import Ledger

    url, call_id = _waiting_call(tmp_path)
    modules = _modules_after(verb, call_id, "--by", "alice", "--db", url)
    assert "agent_gate.gate.desk" in modules
    heavy = [m for m in HEAVY if m != "agent_gate.gate"] + ["agent_gate.gate.facade"]
    assert [m for m in heavy if _loaded(modules, m)] == []
    # an answer writes the row and its audit entry, and imports no more of the ledger
    unused = [*UNUSED_BY_ANSWERS, *NOT_A_READ]
    if verb == "deny":  # a denial is reported to the observer
        unused.remove("agent_gate.telemetry.base")
    assert [m for m in unused if _loaded(modules, m)] == []
    with Ledger(url) as ledger:
        (rec,) = ledger.find(call_id, "demo")
        answered = ledger.approval(rec) if verb == "approve" else None
    assert rec.state.value == ("awaiting_approval" if verb == "approve" else "rejected")
    if verb == "approve":
        assert answered is not None and answered.decided_by == "alice"
