"""The gate's shape: the per-call walk dispatches by state through one table, and no
function is longer than a screen (issue 31: ``CallDriver.advance`` was one 116-line
if-chain over the states).

Why a test: a state added to ``ledger.states`` without a step would be reported as
if terminal, and a long function is where the next special case goes; each is easy
to add by accident.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agent_gate.gate
from agent_gate.gate.driver import _STEPS
from agent_gate.ledger.states import TERMINAL, CallState

GATE = Path(agent_gate.gate.__file__).resolve().parent
MAX_LINES = 60
KNOWN_LONG: dict[str, str] = {}
"""Functions over ``MAX_LINES`` today, each to be split; the test below fails once one
is short, so the entry is deleted with the fix (a ratchet, not a licence)."""


def long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(GATE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    found[f"{path.name}:{node.name}"] = lines
    return found


def test_every_state_with_an_arrow_has_a_step_and_no_terminal_one_does() -> None:
    assert set(_STEPS) == set(CallState) - set(TERMINAL)


def test_no_gate_function_is_over_sixty_lines() -> None:
    new = {name: n for name, n in long_functions().items() if name not in KNOWN_LONG}
    assert not new, f"gate functions over {MAX_LINES} lines (split them): {new}"


def test_known_long_functions_are_still_long() -> None:
    gone = sorted(set(KNOWN_LONG) - set(long_functions()))
    assert not gone, f"now short: delete from KNOWN_LONG in {Path(__file__).name}: {gone}"
