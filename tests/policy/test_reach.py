"""Which rules can never match a schema-valid call (``policy.reach``)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from agent_gate.policy import Policy
from agent_gate.policy.reach import dead_rules

SCHEMA: dict[str, Any] = {
    "type": "object",
    "$defs": {"Money": {"type": "number"}},
    "properties": {
        "amount": {"$ref": "#/$defs/Money"},
        "to": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}},
                "additionalProperties": False,
            },
        },
        "mode": {"enum": ["fast", "slow"]},
        "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "open": {},
    },
    "required": ["to"],
    "additionalProperties": False,
}


def dead(condition: dict[str, Any], schema: dict[str, Any] | None = None) -> list[str]:
    doc = {"version": 1, "tools": {"t": {"rules": [
        {"id": "r", "effect": "allow", "when": [condition]}
    ]}}}
    policy = Policy.from_text(yaml.safe_dump(doc), source="p.yaml")
    return [d.why for d in dead_rules(policy.document, {"t": schema or SCHEMA})]


@pytest.mark.parametrize(
    "condition",
    [
        {"arg": "amount", "number": {"max": 5}},  # through $ref
        {"arg": "either", "length": {"max": 3}},  # anyOf string|integer
        {"arg": "either", "number": {"max": 3}},
        {"arg": "mode", "equals": "fast"},
        {"arg": "open", "matches": "x"},  # the schema says nothing: anything goes
        {"arg": "tags", "each": {"matches": "[a-z]+"}},
        {"arg": "lines", "some": {"field": "sku", "in": ["A"]}},
        {"not": {"arg": "nope", "equals": 1}},  # under not: assumed satisfiable
        {"any": [{"arg": "nope", "equals": 1}, {"arg": "to", "equals": "a"}]},
        {"principal": "roles", "contains": "x"},
    ],
)
def test_satisfiable_conditions_are_not_dead(condition: dict[str, Any]) -> None:
    assert dead(condition) == []


@pytest.mark.parametrize(
    ("condition", "why"),
    [
        ({"arg": "amont", "number": {"max": 5}}, "no argument 'amont'"),
        ({"arg": "amount", "matches": "[0-9]+"}, "'amount' is integer/number"),
        ({"arg": "mode", "equals": 3}, "no listed value is"),
        ({"arg": "to", "absent": True}, "required by the schema"),
        ({"arg": "tags", "each": {"number": {"max": 1}}}, "'tags[]' is string"),
        ({"arg": "lines", "some": {"field": "skew", "equals": "A"}}, "no argument 'lines[].skew'"),
        ({"arg": "to.domain", "equals": "x"}, "no argument 'to.domain'"),
        ({"any": [{"arg": "nope", "equals": 1}, {"arg": "to", "number": {"max": 1}}]}, "nope"),
    ],
)
def test_impossible_conditions_are_dead(condition: dict[str, Any], why: str) -> None:
    found = dead(condition)
    assert len(found) == 1 and why in found[0]


def test_a_policy_wide_rule_is_dead_only_if_dead_for_every_tool() -> None:
    doc = {
        "version": 1,
        "rules": [{"id": "g", "effect": "deny", "when": [{"arg": "amount", "number": {"gt": 9}}]}],
        "tools": {"a": {}, "b": {}},
    }
    policy = Policy.from_text(yaml.safe_dump(doc), source="p.yaml")
    with_amount = {"type": "object", "properties": {"amount": {"type": "number"}}}
    closed = {"type": "object", "properties": {}, "additionalProperties": False}
    assert dead_rules(policy.document, {"a": with_amount, "b": closed}) == []
    (only,) = dead_rules(policy.document, {"a": closed, "b": closed})
    assert only.rule_id == "g" and only.loc == ("rules", 0)
