"""The gate talks to the ledger only through the ledger's methods (issue 15): no SQL,
no table models, no reaching into the approval or quota modules; decisions inside a
transaction read through ``LedgerTxn``."""

from __future__ import annotations

import ast
from pathlib import Path

import agent_gate.gate

GATE = Path(agent_gate.gate.__file__).resolve().parent
FORBIDDEN_MODULES = ("sqlalchemy.", "agent_gate.ledger.models", "agent_gate.ledger.quota",
                     "agent_gate.ledger.backend.dialect", "agent_gate.ledger.flows",
                     "agent_gate.ledger.reads", "agent_gate.ledger.backend.prepared")
ALLOWED_FROM_APPROVALS = {"ApprovalRecord"}  # the value Ledger.approve returns
ALLOWED = {
    ("agent_gate.ledger.models", "ID_LEN"),  # column sizes an identifier must fit
    ("agent_gate.ledger.models", "TOOL_NAME_LEN"),
    ("sqlalchemy.exc", "SQLAlchemyError"),  # a database error is re-raised, never swallowed
    ("agent_gate.ledger.reads", "LedgerTxn"),  # the one view a decision reads through
}


def _imports() -> list[tuple[str, str, str]]:
    found = []
    for path in sorted(GATE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(path.name, alias.name, "") for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found += [(path.name, node.module, alias.name) for alias in node.names]
    return found


def test_the_gate_reaches_the_ledger_only_through_its_methods() -> None:
    bad = []
    for where, module, name in _imports():
        if (module, name) in ALLOWED:
            continue
        if module.startswith(FORBIDDEN_MODULES) or module == "sqlalchemy":
            bad.append(f"{where}: {module}")
        if module == "agent_gate.ledger" and name in {"approvals", "quota", "models", "flows"}:
            bad.append(f"{where}: agent_gate.ledger.{name}")
        if module == "agent_gate.ledger.approvals" and name not in ALLOWED_FROM_APPROVALS:
            bad.append(f"{where}: agent_gate.ledger.approvals.{name}")
    assert not bad, "use a Ledger / LedgerTxn method instead:\n" + "\n".join(bad)
