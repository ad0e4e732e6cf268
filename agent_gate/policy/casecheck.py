"""Running a test file's cases against a policy: results, coverage, dead rules.

Each case is decided by ``Policy.evaluate`` exactly as the gate decides a call: the
usage a case passes is what the ledger would have counted (every counter of the tool
starts at 0, each earlier call adds what it charges, ``usage:`` adds on top). A case
fails when the verdict, the deciding ids or the limits that went over differ from
what it expects, or a phrase it expects is in no reason.

The report also says which rules and limits no case exercised (never held, never
went over) and which rules can never match a call the tool's schema accepts
(``reach``): a suite that never makes a rule fire has not tested it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from agent_gate.errors import Problem
from agent_gate.policy.casefile import Case, LoadedCases
from agent_gate.policy.policy import Policy
from agent_gate.policy.reach import DeadRule, dead_rules
from agent_gate.policy.values import PolicyDecision, Principal, TaskHistory, TaskScope, Truth

__all__ = ["CaseResult", "TestReport", "run_cases"]


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case: what it expected, what the policy said, and each difference."""

    source: str
    index: int
    line: int | None
    name: str
    case: Case
    decision: PolicyDecision | None
    failures: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.failures


@dataclass(frozen=True, slots=True)
class Unexercised:
    """A rule or limit no case made hold (or go over), located in the policy."""

    id: str
    kind: str  # "rule", "limit" or "Cedar policy"
    where: Problem


@dataclass(frozen=True, slots=True)
class TestReport:
    """Everything ``agent-gate policy test`` prints; ``passed`` is its exit status."""

    __test__ = False  # not a pytest class, despite the name

    policy: Policy
    results: tuple[CaseResult, ...]
    unexercised: tuple[Unexercised, ...]
    dead: tuple[tuple[DeadRule, Problem], ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.results if not r.passed)


def _context(
    loaded: LoadedCases, case: Case
) -> tuple[Principal | None, TaskScope | None]:
    defaults = loaded.cases.defaults
    principal = case.principal or defaults.principal
    scope = case.scope or defaults.scope
    return (
        principal.build() if principal is not None else None,
        scope.build() if scope is not None else None,
    )


def case_usage(policy: Policy, case: Case) -> tuple[dict[str, Decimal], list[str]]:
    """The usage the ledger would report for ``case``, and problems with its counters."""
    usage: dict[str, Decimal] = {limit.key: Decimal(0) for limit in policy.limits(case.tool)}
    problems: list[str] = []
    for index, prior in enumerate(case.prior):
        charges: dict[str, Decimal] = {}  # two limits on one counter charge it once
        for limit in policy.limits(prior.tool):
            amount = limit.amount(prior.args)
            if amount is None:
                problems.append(f"prior[{index}] cannot be counted for limit {limit.id}")
            else:
                charges[limit.key] = amount
        for key, amount in charges.items():
            if key in usage:
                usage[key] += amount
    known = sorted(usage)
    for key, value in case.usage.items():
        if key not in usage:
            problems.append(
                f"usage names counter {key!r}; counters of {case.tool!r}: "
                f"{', '.join(known) or 'none'}"
            )
            continue
        usage[key] += Decimal(str(value))
    return usage, problems


def _compare(case: Case, decision: PolicyDecision) -> list[str]:
    expect = case.expect
    failures: list[str] = []
    if decision.effect is not expect.decision:
        failures.append(f"decision: expected {expect.decision.value}, got {decision.effect.value}")
    if expect.rule_ids is not None and sorted(expect.rule_ids) != sorted(decision.rule_ids):
        failures.append(
            f"rule_ids: expected [{', '.join(sorted(expect.rule_ids))}], "
            f"got [{', '.join(sorted(decision.rule_ids))}]"
        )
    if expect.limits_exceeded is not None:
        got = sorted(c.id for c in decision.exceeded_limits)
        if sorted(expect.limits_exceeded) != got:
            failures.append(
                f"limits_exceeded: expected [{', '.join(sorted(expect.limits_exceeded))}], "
                f"got [{', '.join(got)}]"
            )
    for phrase in expect.reasons:
        if not any(phrase in reason for reason in decision.reasons):
            failures.append(f"reasons: no reason contains {phrase!r}")
    return failures


def _all_ids(policy: Policy) -> list[tuple[str, str, tuple[str | int, ...]]]:
    document = policy.document
    found: list[tuple[str, str, tuple[str | int, ...]]] = [
        (rule.id, "rule", ("rules", index)) for index, rule in enumerate(document.rules)
    ]
    for name, tool in document.tools.items():
        found += [
            (rule.id, "rule", ("tools", name, "rules", index))
            for index, rule in enumerate(tool.rules)
        ]
        found += [
            (limit.id, "limit", ("tools", name, "limits", index))
            for index, limit in enumerate(tool.limits)
        ]
    if policy.cedar is not None:
        found += [(meta.name, "Cedar policy", ("cedar",)) for meta in policy.cedar.meta.values()]
    return found


def run_cases(
    policy: Policy,
    files: Sequence[LoadedCases],
    schemas: Mapping[str, Any] | None = None,
) -> TestReport:
    """Decide every case of ``files`` under ``policy``. ``schemas`` (tool -> JSON
    Schema) adds to the files' own ``schemas:`` for finding dead rules."""
    results: list[CaseResult] = []
    exercised: set[str] = set()
    all_schemas: dict[str, Any] = {}
    for loaded in files:
        all_schemas.update(loaded.cases.schemas)
        for index, case in enumerate(loaded.cases.cases):
            principal, scope = _context(loaded, case)
            usage, problems = case_usage(policy, case)
            decision = None
            failures = list(problems)
            if not problems:
                history = TaskHistory(
                    succeeded={prior.tool: prior.args for prior in case.prior},
                    authorized=frozenset(prior.tool for prior in case.prior),
                )
                decision = policy.evaluate(
                    case.tool, case.args, principal=principal, task_scope=scope, usage=usage,
                    history=history,
                )
                failures = _compare(case, decision)
                exercised.update(t.id for t in decision.rules if t.truth is Truth.TRUE)
                exercised.update(c.id for c in decision.exceeded_limits)
            results.append(
                CaseResult(
                    source=loaded.source,
                    index=index,
                    line=loaded.line_of(index),
                    name=case.name,
                    case=case,
                    decision=decision,
                    failures=tuple(failures),
                )
            )
    all_schemas.update(schemas or {})
    unexercised = tuple(
        Unexercised(ident, kind, policy.locate(loc, f"no case makes {kind} {ident} "
                                                  + ("go over" if kind == "limit" else "hold")))
        for ident, kind, loc in _all_ids(policy)
        if ident not in exercised
    )
    dead = tuple(
        (d, policy.locate(d.loc, f"rule {d.rule_id} can never match a valid call of "
                                 f"{d.tool!r}: {d.why}"))
        for d in dead_rules(policy.document, all_schemas)
    )
    return TestReport(policy=policy, results=tuple(results), unexercised=unexercised, dead=dead)
