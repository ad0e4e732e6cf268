"""Fixtures shared by the operator, approval, quota and audit tests.

The example policy (``policies/example.yaml``) and its five tools
(``support_tools.py``) are what these tests run, as a user would. The policy
redacts fields, so the ledger needs a seal key: tests set ``$AGENT_GATE_SEAL_KEY``
(a PostgreSQL ledger has no default key file), except where a test is about the
SQLite default key file itself.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from agent_gate import ToolRegistry

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
EXAMPLE_POLICY = ROOT / "policies" / "example.yaml"
TEST_SEAL_KEY = "5e" * 32
AGENT_GATE = Path(sys.executable).with_name("agent-gate")


@pytest.fixture
def effects_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the tools record side effects; inherited by worker processes."""
    path = tmp_path / "effects.log"
    monkeypatch.setenv("AG_EFFECTS", str(path))
    return path


@pytest.fixture
def seal_key_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AGENT_GATE_SEAL_KEY", TEST_SEAL_KEY)
    return TEST_SEAL_KEY


@pytest.fixture
def support_tools() -> Iterator[ModuleType]:
    sys.path.insert(0, str(HERE))
    try:
        import support_tools

        yield support_tools
    finally:
        sys.path.remove(str(HERE))


def effect_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def order_tools(*names: str) -> ToolRegistry:
    """Write tools named ``names`` that take an ``order`` and return it: for tests where
    what matters is the policy the calls wait under, not what the tools do."""
    tools = ToolRegistry()

    def run_it(order: str) -> dict[str, str]:
        return {"ok": order}

    for name in names:
        tools.tool(name=name, effect="write", idempotency="none")(run_it)
    return tools
