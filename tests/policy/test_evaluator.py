"""Default deny, deny > approve > allow, fail-closed errors, task scope, limits."""

from __future__ import annotations

import itertools
import json
import textwrap
from decimal import Decimal
from typing import Any

import pytest
import yaml

from agent_gate.policy import (
    BUILTIN_BAD_ARGUMENTS,
    BUILTIN_DEFAULT_DENY,
    BUILTIN_TASK_SCOPE,
    BUILTIN_UNKNOWN_SCOPE,
    BUILTIN_UNKNOWN_TOOL,
    Policy,
    Principal,
    TaskScope,
    Truth,
    Verdict,
)

ALLOW = Verdict.ALLOW
APPROVE = Verdict.APPROVE
DENY = Verdict.DENY


def policy_with_rules(rules: list[dict[str, Any]], **tool: Any) -> Policy:
    doc = {"version": 1, "tools": {"t": {"rules": rules, **tool}, "other": {}}}
    return Policy.from_text(yaml.safe_dump(doc, sort_keys=False))


RULES = {
    "allow": {"id": "a", "effect": "allow"},
    "approve": {"id": "p", "effect": "approve", "when": [{"arg": "n", "number": {"gt": 10}}]},
    "deny": {"id": "d", "effect": "deny", "when": [{"arg": "n", "number": {"gt": 100}}]},
}


@pytest.mark.parametrize("order", list(itertools.permutations(RULES)))
def test_precedence_deny_over_approve_over_allow_in_any_order(order: tuple[str, ...]) -> None:
    policy = policy_with_rules([RULES[name] for name in order])
    small, medium, large = (policy.evaluate("t", {"n": n}) for n in (5, 50, 500))
    assert (small.effect, small.rule_ids) == (ALLOW, ("a",))
    assert (medium.effect, medium.rule_ids) == (APPROVE, ("p",))
    assert (large.effect, large.rule_ids) == (DENY, ("d",))
    # The losing rules were still evaluated and are visible in the trace.
    assert {t.id: t.truth for t in large.rules} == {
        "a": Truth.TRUE,
        "p": Truth.TRUE,
        "d": Truth.TRUE,
    }


def test_all_applying_rules_of_the_winning_effect_are_named() -> None:
    policy = policy_with_rules(
        [
            {"id": "d1", "effect": "deny", "when": [{"arg": "n", "number": {"gt": 1}}]},
            {"id": "d2", "effect": "deny", "when": [{"arg": "n", "number": {"gt": 2}}]},
            {"id": "a", "effect": "allow"},
        ]
    )
    assert policy.evaluate("t", {"n": 3}).rule_ids == ("d1", "d2")
    assert policy.evaluate("t", {"n": 2}).rule_ids == ("d1",)


def test_default_deny_when_no_rule_allows() -> None:
    policy = policy_with_rules(
        [{"id": "a", "effect": "allow", "when": [{"arg": "n", "number": {"max": 5}}]}]
    )
    decision = policy.evaluate("t", {"n": 6})
    assert decision.effect is DENY
    assert decision.rule_ids == (BUILTIN_DEFAULT_DENY,)
    assert "default deny" in decision.reasons[0]
    assert any("a (allow) does not apply" in r for r in decision.reasons)
    # A tool declared without rules denies everything.
    assert policy.evaluate("other", {}).rule_ids == (BUILTIN_DEFAULT_DENY,)


def test_unknown_tool_and_non_object_arguments_are_denied() -> None:
    policy = policy_with_rules([{"id": "a", "effect": "allow"}])
    unknown = policy.evaluate("rm_rf", {})
    assert (unknown.effect, unknown.rule_ids) == (DENY, (BUILTIN_UNKNOWN_TOOL,))
    for arguments in ([1, 2], "text", None):
        decision = policy.evaluate("t", arguments)  # type: ignore[arg-type]
        assert (decision.effect, decision.rule_ids) == (DENY, (BUILTIN_BAD_ARGUMENTS,))


def test_an_approve_rule_that_cannot_be_evaluated_denies() -> None:
    # Otherwise a string amount would skip the approval and be allowed.
    policy = policy_with_rules([RULES["allow"], RULES["approve"]])
    decision = policy.evaluate("t", {"n": "5000"})
    assert (decision.effect, decision.rule_ids) == (DENY, ("p",))
    assert "could not be evaluated" in decision.reasons[0]
    assert "not a number" in decision.reasons[0]


def test_global_rules_apply_to_all_or_listed_tools() -> None:
    text = """
    version: 1
    rules:
      - id: no-suspended
        effect: deny
        when: [{principal: attributes.suspended, equals: true}]
      - id: writes-need-finance
        effect: approve
        tools: [t]
        when: [{not: {principal: roles, contains: finance}}]
    tools:
      t:
        rules: [{id: t-ok, effect: allow}]
      u:
        rules: [{id: u-ok, effect: allow}]
    """
    policy = Policy.from_text(textwrap.dedent(text))
    suspended = Principal(roles={"finance"}, attributes={"suspended": True})
    assert policy.evaluate("u", {}, principal=suspended).rule_ids == ("no-suspended",)
    assert policy.evaluate("t", {}, principal=suspended).rule_ids == ("no-suspended",)
    assert policy.evaluate("t", {}).effect is APPROVE
    assert policy.evaluate("u", {}).effect is ALLOW
    assert policy.evaluate("t", {}, principal=Principal(roles={"finance"})).effect is ALLOW


class TestTaskScope:
    policy = Policy.from_text(
        textwrap.dedent(
            """
            version: 1
            scopes:
              readonly: {tools: [read]}
            tools:
              read: {rules: [{id: r, effect: allow}]}
              write: {rules: [{id: w, effect: allow}]}
            """
        )
    )

    def test_caller_limited_tools(self) -> None:
        scope = TaskScope(task_id="t1", tools=frozenset({"read"}))
        assert self.policy.evaluate("read", {}, task_scope=scope).effect is ALLOW
        decision = self.policy.evaluate("write", {}, task_scope=scope)
        assert (decision.effect, decision.rule_ids) == (DENY, (BUILTIN_TASK_SCOPE,))

    def test_named_scope(self) -> None:
        scope = TaskScope(name="readonly")
        assert self.policy.evaluate("read", {}, task_scope=scope).effect is ALLOW
        assert self.policy.evaluate("write", {}, task_scope=scope).rule_ids == (BUILTIN_TASK_SCOPE,)

    def test_both_must_include_the_tool(self) -> None:
        scope = TaskScope(name="readonly", tools=frozenset({"write"}))
        assert self.policy.evaluate("read", {}, task_scope=scope).effect is DENY
        assert self.policy.evaluate("write", {}, task_scope=scope).effect is DENY

    def test_unknown_scope_denies_everything(self) -> None:
        decision = self.policy.evaluate("read", {}, task_scope=TaskScope(name="readonyl"))
        assert (decision.effect, decision.rule_ids) == (DENY, (BUILTIN_UNKNOWN_SCOPE,))


LIMITS = [
    {"id": "total", "sum": "amount", "max": 100},
    {"id": "count", "max_calls": 3, "effect": "approve"},
]


class TestLimits:
    policy = policy_with_rules([{"id": "a", "effect": "allow"}], limits=LIMITS)

    def test_the_gate_learns_which_counters_to_supply(self) -> None:
        limits = self.policy.limits("t")
        assert [(lim.id, lim.key, lim.kind) for lim in limits] == [
            ("total", "t/sum/amount", "sum"),
            ("count", "t/calls", "calls"),
        ]
        assert limits[0].amount({"amount": 12.5}) == Decimal("12.5")
        assert limits[1].amount({"amount": 12.5}) == Decimal(1)
        assert self.policy.limits("other") == ()

    def test_within_limits(self) -> None:
        decision = self.policy.evaluate(
            "t", {"amount": 40}, usage={"t/sum/amount": 60, "t/calls": 2}
        )
        assert (decision.effect, decision.rule_ids) == (ALLOW, ("a",))
        assert [c.exceeded for c in decision.limits] == [False, False]

    def test_sum_limit_exceeded_denies_and_names_the_limit(self) -> None:
        decision = self.policy.evaluate(
            "t", {"amount": 40.01}, usage={"t/sum/amount": 60, "t/calls": 0}
        )
        assert (decision.effect, decision.rule_ids) == (DENY, ("total",))
        (over,) = decision.exceeded_limits
        assert (over.used, over.amount, over.maximum) == (Decimal(60), Decimal("40.01"), 100)

    def test_float_sums_do_not_drift(self) -> None:
        # 0.1 + 0.2 > 0.3 in binary floating point; the running total uses decimals.
        policy = policy_with_rules(
            [{"id": "a", "effect": "allow"}], limits=[{"id": "s", "sum": "x", "max": 0.3}]
        )
        assert policy.evaluate("t", {"x": 0.2}, usage={"t/sum/x": 0.1}).effect is ALLOW

    def test_count_limit_with_approve_effect_asks_a_human(self) -> None:
        decision = self.policy.evaluate("t", {"amount": 1}, usage={"t/sum/amount": 0, "t/calls": 3})
        assert (decision.effect, decision.rule_ids) == (APPROVE, ("count",))

    def test_deny_limit_wins_over_approve_limit(self) -> None:
        decision = self.policy.evaluate(
            "t", {"amount": 99}, usage={"t/sum/amount": 50, "t/calls": 3}
        )
        assert (decision.effect, decision.rule_ids) == (DENY, ("total",))

    @pytest.mark.parametrize(
        "usage",
        [
            None,
            {},
            {"t/calls": 0},
            {"t/sum/amount": -1, "t/calls": 0},
            {"t/sum/amount": "0", "t/calls": 0},
            {"t/sum/amount": True, "t/calls": 0},
        ],
    )
    def test_missing_or_bad_usage_denies(self, usage: dict[str, Any] | None) -> None:
        decision = self.policy.evaluate("t", {"amount": 1}, usage=usage)
        assert decision.effect is DENY
        assert "total" in decision.rule_ids
        assert any("no usage for counter 't/sum/amount'" in r for r in decision.reasons)

    @pytest.mark.parametrize("amount", [-50, "10", None, True, float("nan")])
    def test_uncountable_amounts_deny(self, amount: Any) -> None:
        arguments = {} if amount is None else {"amount": amount}
        decision = self.policy.evaluate("t", arguments, usage={"t/sum/amount": 0, "t/calls": 0})
        assert (decision.effect, decision.rule_ids) == (DENY, ("total",))

    def test_limits_do_not_turn_a_deny_into_anything_else(self) -> None:
        policy = policy_with_rules([], limits=LIMITS)
        decision = policy.evaluate("t", {"amount": 1}, usage={"t/sum/amount": 0, "t/calls": 0})
        assert decision.rule_ids == (BUILTIN_DEFAULT_DENY,)
        assert decision.limits == ()


def test_decisions_never_echo_argument_values() -> None:
    policy = policy_with_rules(
        [
            {"id": "a", "effect": "allow", "when": [{"arg": "body", "matches": "[a-z ]+"}]},
            {"id": "d", "effect": "deny", "when": [{"arg": "to", "email_domain": ["evil.com"]}]},
            {"id": "p", "effect": "approve", "when": [{"arg": "n", "number": {"gt": 1}}]},
        ],
        redact=["body"],
    )
    secret = "the launch codes are tango foxtrot"
    for arguments in (
        {"body": secret, "to": "a@example.com", "n": 0},
        {"body": secret, "to": "x@evil.com", "n": 0},
        {"body": secret.upper(), "to": "a@b@evil.com", "n": "12345.6789"},
        {"body": secret, "to": "a@example.com", "n": 987654321},
    ):
        decision = policy.evaluate("t", arguments, usage={})
        text = json.dumps(decision.to_dict()) + decision.explain()
        for value in (
            "launch codes",
            "LAUNCH",
            'evil.com"',
            "a@b@",
            "a@example.com",
            "12345.6789",
            "987654321",
        ):
            assert value not in text, (value, text)


def test_same_inputs_same_decision() -> None:
    policy = policy_with_rules([RULES["allow"], RULES["approve"], RULES["deny"]])
    first = policy.evaluate("t", {"n": 50})
    second = policy.evaluate("t", {"n": 50})
    assert first == second
    assert first.to_dict() == second.to_dict()
