"""The ledger imports only what sits below it: arrows point down."""

from __future__ import annotations

import ast
from pathlib import Path

import agent_gate.ledger

LEDGER = Path(agent_gate.ledger.__file__).resolve().parent
BELOW = ("agent_gate.ledger", "agent_gate.errors", "agent_gate._lazy", "agent_gate._speedups",
         "agent_gate.plainjson", "agent_gate.policy", "agent_gate.privacy", "agent_gate.telemetry",
         # the pure evidence formats (tests/test_layers.py: "evidence formats"), which the
         # checkpoints build on; the bundles and exports above the ledger are not here
         "agent_gate.evidence.merkle", "agent_gate.evidence.note", "agent_gate.evidence.checkpoint")
"""What the ledger may import from agent-gate (the layers under it, and itself)."""


def _imports(path: Path) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return [name for name in found if name == "agent_gate" or name.startswith("agent_gate.")]


def test_no_ledger_module_imports_a_layer_above_it() -> None:
    upward = {
        f"{path.name}: {name}"
        for path in sorted(LEDGER.glob("*.py"))
        for name in _imports(path)
        if not any(name == ok or name.startswith(ok + ".") for ok in BELOW)
    }
    assert not upward, f"the ledger imports upward: {sorted(upward)}"


def test_the_migrations_are_found_without_the_package_root() -> None:
    from agent_gate.ledger.migrate import script_location

    assert (script_location() / "env.py").is_file()
