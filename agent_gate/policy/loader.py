"""From policy bytes to a validated ``PolicyDocument``, or located problems.

Three passes, each reporting with file, line and key: YAML structure
(``yamlsource``), shape and types (the pydantic models), and the checks that
need the whole document (where a condition sits decides which subjects it may
use; ids are unique; every tool a rule or scope names is declared). A policy that
passes all three can be evaluated without any further "is this valid?" branch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from agent_gate.errors import PolicyLoadError, Problem
from agent_gate.policy.condition_model import PREDICATES, Condition
from agent_gate.policy.deadline import deadline_problems
from agent_gate.policy.model import PolicyDocument, Rule
from agent_gate.policy.yamlsource import YamlDocument, parse_yaml

__all__ = ["load_document", "load_located", "prior_tools"]

Loc = tuple[str | int, ...]


def _message(error: Any, loc: Loc) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        if "when" in loc:
            return (
                "unknown key: not a predicate, subject or combinator "
                f"(predicates: {', '.join(PREDICATES)}; subjects: arg, principal, task, "
                "field, prior; "
                "combinators: all, any, not)"
            )
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    message = str(error["msg"])
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _validation_problems(doc: YamlDocument, exc: ValidationError) -> list[Problem]:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        loc: Loc = tuple(error["loc"])
        problems.append(doc.problem(loc, _message(error, loc)))
    return problems


def _condition_problems(
    condition: Condition, loc: Loc, in_element: bool
) -> Iterator[tuple[Loc, str]]:
    combinator = condition.combinator
    if combinator in ("all", "any"):
        for index, part in enumerate(condition.operand(combinator)):
            yield from _condition_problems(part, (*loc, combinator, index), in_element)
        return
    if combinator == "not":
        yield from _condition_problems(condition.operand("not"), (*loc, "not"), in_element)
        return
    subjects = condition.subjects
    if condition.predicate == "cel":
        yield from _cel_problems(condition, loc, in_element)
        return
    if in_element:
        outer = [s for s in subjects if s != "field"]
        if outer:
            yield (
                (*loc, outer[0]),
                "inside each/some a condition tests the list element: use 'field: <path>' "
                "(relative to the element) or no subject",
            )
    elif "field" in subjects:
        yield (*loc, "field"), "'field' is only meaningful inside each/some; use 'arg'"
    elif not subjects and condition.predicate is not None:
        yield loc, ("a condition needs a subject: 'arg: <path>', 'principal: ...', "
                    "'task: ...' or 'prior: <tool>.<path>'")
    predicate = condition.predicate
    if predicate in ("each", "some"):
        yield from _condition_problems(condition.operand(predicate), (*loc, predicate), True)


def _cel_problems(condition: Condition, loc: Loc, in_element: bool) -> Iterator[tuple[Loc, str]]:
    from agent_gate.policy.celexpr import cel_problem  # the optional runtime, when used

    if condition.subjects:
        yield (
            (*loc, condition.subjects[0]),
            "a cel: condition names its values itself (args, principal, task, tool, "
            "usage); remove the subject",
        )
    elif in_element:
        yield (*loc, "cel"), "cel: is not available inside each/some; use CEL's all()/exists()"
    else:
        assert condition.cel is not None
        problem = cel_problem(condition.cel)
        if problem is not None:
            yield (*loc, "cel"), problem


def prior_tools(rule: Rule, loc: Loc) -> Iterator[tuple[Loc, str]]:
    """Each ``prior:`` subject of ``rule`` (and ``prior.TOOL`` of its ``cel:``
    conditions) with the tool it names."""
    from agent_gate.policy.paths import parse_path

    def walk(condition: Condition, where: Loc) -> Iterator[tuple[Loc, str]]:
        combinator = condition.combinator
        if combinator in ("all", "any"):
            for i, part in enumerate(condition.operand(combinator)):
                yield from walk(part, (*where, combinator, i))
        elif combinator == "not":
            yield from walk(condition.operand("not"), (*where, "not"))
        elif condition.prior is not None:
            yield (*where, "prior"), parse_path(condition.prior)[0]
        elif condition.cel is not None:  # ``prior.TOOL`` in a CEL expression
            from agent_gate.policy.celexpr import prior_tools_of

            for name in sorted(prior_tools_of(condition.cel)[0]):
                yield (*where, "cel"), name

    for index, condition in enumerate(rule.when):
        yield from walk(condition, (*loc, "when", index))


def _rule_problems(rule: Rule, loc: Loc) -> Iterator[tuple[Loc, str]]:
    for index, condition in enumerate(rule.when):
        for where, message in _condition_problems(
            condition, (*loc, "when", index), in_element=False
        ):
            if where[-1] == "cel":
                message = f"rule {rule.id}: {message}"
            yield where, message


def _document_problems(document: PolicyDocument) -> Iterator[tuple[Loc, str]]:
    declared = set(document.tools)
    seen_ids: dict[str, Loc] = {}

    def claim(identifier: str, loc: Loc) -> Iterator[tuple[Loc, str]]:
        if identifier in seen_ids:
            yield (*loc, "id"), "duplicate id (rule and limit ids must be unique in a policy)"
        else:
            seen_ids[identifier] = loc

    for index, rule in enumerate(document.rules):
        loc: Loc = ("rules", index)
        yield from claim(rule.id, loc)
        yield from _rule_problems(rule, loc)
        for t_index, name in enumerate(rule.tools or ()):
            if name not in declared:
                yield (*loc, "tools", t_index), "names a tool the policy does not declare"
    for scope_name, scope in document.scopes.items():
        for t_index, name in enumerate(scope.tools):
            if name not in declared:
                yield (
                    ("scopes", scope_name, "tools", t_index),
                    "names a tool the policy does not declare",
                )
    for tool_name, tool in document.tools.items():
        for key in ("after", "not_after"):
            for t_index, name in enumerate(getattr(tool, key)):
                if name not in declared:
                    yield (("tools", tool_name, key, t_index),
                           "names a tool the policy does not declare")
        for index, rule in enumerate(tool.rules):
            for where, name in prior_tools(rule, ("tools", tool_name, "rules", index)):
                if name not in declared:
                    yield where, "'prior' names a tool the policy does not declare"
        if tool.cedar is not None and document.cedar is None:
            yield (
                ("tools", tool_name, "cedar"),
                "the tool is handed to Cedar but the file has no top-level 'cedar:' policy set",
            )
        for index, rule in enumerate(tool.rules):
            loc = ("tools", tool_name, "rules", index)
            yield from claim(rule.id, loc)
            yield from _rule_problems(rule, loc)
        for index, limit in enumerate(tool.limits):
            yield from claim(limit.id, ("tools", tool_name, "limits", index))
    yield from deadline_problems(document)


def load_document(raw: bytes | str, source: str) -> PolicyDocument:
    """Parse and validate one policy file; raises ``PolicyLoadError`` listing every problem."""
    return load_located(raw, source)[0]


def load_located(raw: bytes | str, source: str) -> tuple[PolicyDocument, YamlDocument]:
    """``load_document`` plus the YAML it came from, so later passes (dead rules, CEL
    type errors, test coverage) can name the line of a rule."""
    doc = parse_yaml(raw, source)
    try:
        document = PolicyDocument.model_validate(doc.data)
    except ValidationError as exc:
        problems = _validation_problems(doc, exc)
        problems.sort(key=lambda p: (p.line or 0, p.column or 0))
        raise PolicyLoadError(problems) from None
    located = [doc.problem(loc, message) for loc, message in _document_problems(document)]
    if located:
        located.sort(key=lambda p: (p.line or 0, p.column or 0))
        raise PolicyLoadError(located)
    return document, doc
