"""Rules that can never match a call the tool's JSON Schema accepts.

A call reaches the policy only after its arguments passed the tool's schema, so a
condition on an argument the schema forbids (``additionalProperties: false`` and no
such property), or a predicate that cannot apply to the types the schema allows
(``number`` on a string, ``matches`` on an integer, ``equals: "5"`` on an
``integer``), is never true for any call the gate will judge. A rule whose ``when``
needs such a condition is dead text: the allow it promises never happens, the deny
it promises never protects anything (agentgateway#3092 and mcpso#3487 shipped such
rules). ``policy check`` warns about them and ``policy test`` lists them.

The analysis is conservative: it only calls a rule dead when every schema-valid
call makes it false (or cannot-tell, which never grants either). Conditions under
``not`` and anything the schema leaves open (no schema, ``additionalProperties``
unset, ``$ref`` to another document) are assumed satisfiable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from agent_gate.policy.condition_model import Condition
from agent_gate.policy.model import PolicyDocument, Rule
from agent_gate.policy.paths import ArgPath, display, parse_path

__all__ = ["DeadRule", "dead_rules"]

ALL_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "null", "array", "object"})

_WANTS: Final[dict[str, frozenset[str]]] = {
    "number": frozenset({"number", "integer"}),
    "length": frozenset({"string", "array", "object"}),
    "matches": frozenset({"string"}),
    "path_under": frozenset({"string"}),
    "url": frozenset({"string"}),
    "ip_in": frozenset({"string"}),
    "email_domain": frozenset({"string"}),
    "contains": frozenset({"array"}),
    "contains_any": frozenset({"array"}),
    "contains_all": frozenset({"array"}),
    "each": frozenset({"array"}),
    "some": frozenset({"array"}),
}
"""The JSON types each predicate can be true for (others are false or cannot-tell)."""


@dataclass(frozen=True, slots=True)
class DeadRule:
    """A rule no schema-valid call of ``tool`` can make hold, and why."""

    rule_id: str
    tool: str
    loc: tuple[str | int, ...]
    why: str
    fails_closed: bool = False
    """The rule asks for deny or approve and its condition cannot be evaluated for a
    valid call (a predicate on the wrong type): it never matches, and its error
    denies every such call instead (fail closed)."""


class _Absent:
    """The schema says this field is never present."""


ABSENT: Final = _Absent()


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _deref(schema: Any, root: Mapping[str, Any], depth: int = 0) -> Any:
    """A local ``#/$defs/X`` (or ``#/definitions/X``) followed; anything else as is."""
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and depth < 32:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return True  # another document: assume anything
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                return True
            target = target[part]
        schema, depth = target, depth + 1
    return schema


def _types(schema: Any, root: Mapping[str, Any], depth: int = 0) -> frozenset[str]:
    """The JSON types a value valid under ``schema`` may have (``integer`` implies a
    whole ``number``)."""
    schema = _deref(schema, root)
    if schema is True or depth > 32:
        return ALL_TYPES
    if schema is False or not isinstance(schema, Mapping):
        return frozenset() if schema is False else ALL_TYPES
    found = ALL_TYPES
    kind = schema.get("type")
    if isinstance(kind, str):
        found = frozenset({kind})
    elif isinstance(kind, list):
        found = frozenset(k for k in kind if isinstance(k, str))
    if "number" in found:
        found |= {"integer"}
    if "const" in schema:
        found &= {_json_type(schema["const"])}
    if isinstance(schema.get("enum"), list):
        found &= {_json_type(v) for v in schema["enum"]} | (
            {"number"} if any(_json_type(v) == "integer" for v in schema["enum"]) else set()
        )
    for branch_key in ("anyOf", "oneOf"):
        branches = schema.get(branch_key)
        if isinstance(branches, list) and branches:
            found &= frozenset().union(*(_types(b, root, depth + 1) for b in branches))
    branches = schema.get("allOf")
    if isinstance(branches, list):
        for branch in branches:
            found &= _types(branch, root, depth + 1)
    return found


def _child(schema: Any, root: Mapping[str, Any], segment: str, depth: int = 0) -> Any:
    """The schema of ``segment`` inside a value valid under ``schema``; ``ABSENT`` when
    the schema rules the field out; ``True`` when it says nothing."""
    schema = _deref(schema, root)
    if not isinstance(schema, Mapping) or depth > 32:
        return True
    for branch_key in ("anyOf", "oneOf"):
        branches = schema.get(branch_key)
        if isinstance(branches, list) and branches:
            found = [_child(b, root, segment, depth + 1) for b in branches]
            present = [f for f in found if f is not ABSENT]
            if not present:
                return ABSENT
    types = _types(schema, root)
    if "array" in types and segment.isdigit():
        items = schema.get("items", True)
        return items if not isinstance(items, list) else True
    if "object" not in types:
        return ABSENT if types and "array" not in types else True
    properties = schema.get("properties")
    if isinstance(properties, Mapping) and segment in properties:
        return properties[segment]
    if schema.get("patternProperties"):
        return True
    additional = schema.get("additionalProperties", True)
    if additional is False or schema.get("unevaluatedProperties") is False:
        return ABSENT
    return additional


def _at(schema: Any, root: Mapping[str, Any], path: ArgPath) -> Any:
    current = schema
    for segment in path:
        current = _child(current, root, segment)
        if current is ABSENT:
            return ABSENT
    return current


def _required(schema: Any, root: Mapping[str, Any], path: ArgPath) -> bool:
    """Whether every valid value has ``path`` (only direct ``required`` chains count)."""
    current = _deref(schema, root)
    for segment in path:
        if not isinstance(current, Mapping) or segment not in (current.get("required") or ()):
            return False
        current = _deref(_child(current, root, segment), root)
    return True


Never = tuple[str, bool] | None
"""Why a condition is never true, and whether it is an error (cannot tell) rather
than false for every valid call; None when it may hold."""


def _never(condition: Condition, schema: Any, root: Mapping[str, Any], where: str) -> Never:
    combinator = condition.combinator
    if combinator in ("all", "any"):
        found = [_never(part, schema, root, where) for part in condition.operand(combinator)]
        dead = [f for f in found if f is not None]
        if combinator == "any" and len(dead) < len(found):
            return None
        if not dead:
            return None
        falses = [f for f in dead if not f[1]]
        if combinator == "all":
            return falses[0] if falses else dead[0]
        return "; ".join(w for w, _ in dead), not falses or len(falses) < len(dead)
    if combinator == "not":
        return None
    predicate = condition.predicate
    subjects = condition.subjects
    if subjects and subjects[0] in ("principal", "task"):
        return None
    text = condition.arg if "arg" in subjects else condition.field_
    path = parse_path(text) if text else ()
    name = f"{where}{display(path)}" if path else where.rstrip(".") or "the element"
    sub = _at(schema, root, path) if path else schema
    if predicate == "absent":
        if condition.absent and path and _required(schema, root, path):
            return f"'{name}' is required by the schema, so it is never absent", False
        if not condition.absent and sub is ABSENT:
            return f"the schema has no argument '{name}'", False
        return None
    if sub is ABSENT:
        return f"the schema has no argument '{name}'", False
    types = _types(sub, root)
    wants = _WANTS.get(predicate or "")
    if wants is not None and not types & wants:
        return (
            f"'{name}' is {'/'.join(sorted(types)) or 'never valid'} in the schema and "
            f"'{predicate}' needs {'/'.join(sorted(wants))}",
            True,
        )
    if predicate in ("equals", "in"):
        operands = [condition.equals] if predicate == "equals" else list(condition.in_ or [])
        if operands and not any(_json_type(v) in types for v in operands):
            return f"'{name}' is {'/'.join(sorted(types))} in the schema; no listed value is", False
    if predicate in ("each", "some"):
        items = _child(sub, root, "0")
        inner = condition.operand(predicate)
        if items is ABSENT:
            return f"'{name}' has no items in the schema", False
        return _never(inner, items, root, f"{name}[].")
    return None


def _rule_never(rule: Rule, schema: Mapping[str, Any]) -> Never:
    found = [_never(condition, schema, schema, "") for condition in rule.when]
    dead = [f for f in found if f is not None]
    if not dead:
        return None
    falses = [f for f in dead if not f[1]]
    return falses[0] if falses else dead[0]


def _rules(document: PolicyDocument) -> Iterator[tuple[str, Rule, tuple[str | int, ...]]]:
    for index, rule in enumerate(document.rules):
        for applies_to in rule.tools or document.tools:
            yield applies_to, rule, ("rules", index)
    for name, policy in document.tools.items():
        for index, own in enumerate(policy.rules):
            yield name, own, ("tools", name, "rules", index)


def dead_rules(
    document: PolicyDocument, schemas: Mapping[str, Mapping[str, Any]]
) -> list[DeadRule]:
    """Every rule that no call valid under its tool's schema in ``schemas`` can make
    hold. A policy-wide rule is dead only if it is dead for every tool it applies to
    that has a schema; tools without a schema are not judged."""
    per_rule: dict[str, list[DeadRule | None]] = {}
    order: list[str] = []
    for tool, rule, loc in _rules(document):
        schema = schemas.get(tool)
        if schema is None:
            continue
        never = _rule_never(rule, schema)
        if rule.id not in per_rule:
            order.append(rule.id)
        dead = None
        if never is not None:
            why, errors = never
            fails_closed = errors and rule.effect.value != "allow"
            if fails_closed:
                why += (
                    f"; the condition cannot be evaluated, so this {rule.effect.value} rule "
                    "denies every call that has the argument (fail closed)"
                )
            dead = DeadRule(rule.id, tool, loc, why, fails_closed)
        per_rule.setdefault(rule.id, []).append(dead)
    out: list[DeadRule] = []
    for rule_id in order:
        verdicts = per_rule[rule_id]
        if verdicts and all(v is not None for v in verdicts):
            first = verdicts[0]
            assert first is not None
            out.append(first)
    return out
