"""Arrows point down: the tools sit below the policy, and neither reaches up.

Read from the source (every ``import``, at any depth, ``TYPE_CHECKING`` ones
included), so a lazy import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "agent_gate"

TOOLS_MAY_IMPORT = ("agent_gate.errors", "agent_gate._speedups", "agent_gate.plainjson")
POLICY_MAY_NOT_IMPORT = (
    "agent_gate.gate",
    "agent_gate.authorize",
    "agent_gate.gate.live",
    "agent_gate.cli",
    "agent_gate.transport",
    "agent_gate.providers",
    "agent_gate.sse",
    "agent_gate.accumulate",
    "agent_gate.demo",
    "agent_gate.schema",
)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "agent_gate" or name.startswith("agent_gate.")}


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", sorted((PACKAGE / "tools").glob("*.py")), ids=lambda p: p.name)
def test_tools_import_only_what_sits_below_them(path: Path) -> None:
    allowed = (*TOOLS_MAY_IMPORT, "agent_gate.tools")
    # ``from agent_gate import x`` is also recorded as ``agent_gate.x``, so it is judged.
    modules = {name for name in _imports(path) if name != "agent_gate"}
    assert {m for m in modules if not _within(m, allowed)} == set()


@pytest.mark.parametrize("path", sorted((PACKAGE / "policy").glob("*.py")), ids=lambda p: p.name)
def test_policy_never_reaches_up(path: Path) -> None:
    assert {m for m in _imports(path) if _within(m, POLICY_MAY_NOT_IMPORT)} == set()


def test_the_layer_check_sees_a_reach_up(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from agent_gate.gate import Gate\n", encoding="utf-8")
    assert _within("agent_gate.gate.Gate", POLICY_MAY_NOT_IMPORT)
    assert "agent_gate.gate" in _imports(module)
