"""Helpers for policy tests: build one-tool policies from a condition."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_gate.policy import Policy, PolicyDecision, Principal, TaskScope, Verdict

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "policies" / "example.yaml"


def one_rule_policy(condition: dict[str, Any], effect: str = "allow") -> Policy:
    """A policy with tool ``t``: one rule of ``effect`` guarded by ``condition``.

    For ``deny`` / ``approve`` an unconditional allow rule is added, so the
    outcome shows whether the guarded rule fired.
    """
    rules: list[dict[str, Any]] = [{"id": "r", "effect": effect, "when": [condition]}]
    if effect != "allow":
        rules.append({"id": "base", "effect": "allow"})
    doc = {"version": 1, "tools": {"t": {"rules": rules}}}
    return Policy.from_text(yaml.safe_dump(doc, sort_keys=False), source="test.yaml")


@pytest.fixture
def allows() -> Callable[..., bool]:
    """``allows(condition, arguments)``: does an allow rule with this condition allow?"""

    def run(
        condition: dict[str, Any],
        arguments: dict[str, Any],
        principal: Principal | None = None,
        task_scope: TaskScope | None = None,
    ) -> bool:
        decision = one_rule_policy(condition).evaluate(
            "t", arguments, principal=principal, task_scope=task_scope
        )
        return decision.effect is Verdict.ALLOW

    return run


@pytest.fixture
def denies() -> Callable[..., PolicyDecision]:
    """``denies(condition, arguments)``: the decision when a deny rule carries it."""

    def run(condition: dict[str, Any], arguments: dict[str, Any]) -> PolicyDecision:
        return one_rule_policy(condition, effect="deny").evaluate("t", arguments)

    return run


@pytest.fixture
def example() -> Policy:
    return Policy.load(EXAMPLE)
