"""Deciding one call: default deny, deny > approve > allow, then per-task limits.

The order of checks, each of which can only make the answer stricter:

1. the tool must be declared in the policy (else ``agent-gate:unknown-tool``),
   and the arguments must be a JSON object (``agent-gate:bad-arguments``);
2. the task's scope must include the tool (``agent-gate:task-scope``; an unknown
   scope name is ``agent-gate:unknown-scope``);
3. every rule that applies to the tool is evaluated, in no particular order
   (order never changes the outcome, as in Cedar). A ``deny`` rule that holds
   denies. A ``deny`` or ``approve`` rule that *cannot be evaluated* also denies:
   we cannot tell whether its guard would have fired. Otherwise an ``approve`` rule
   that holds asks for a human, and an ``allow`` rule that holds allows. No rule
   holding is ``agent-gate:default-deny``;
4. if the call is not denied, each per-task limit of the tool is checked against
   the usage the caller passed in: going over a limit denies (or asks for approval
   when the limit says ``effect: approve``), and a limit whose usage is missing or
   whose argument is not a usable number denies.

An argument a ``path_under`` condition of the tool tests is a path for every
rule of the tool: all its predicates judge its resolved form. A value of such an
argument that cannot be resolved (not a string, relative, NUL byte, too long, a
symlink loop) is never allowed: if no rule denied already, the call is denied
as ``agent-gate:bad-path``.

The decision names the ids that decided it, and every rule's outcome is kept in
``PolicyDecision.rules`` for ``agent-gate policy explain`` and the audit trail.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from agent_gate.policy.conditions import (
    Compiled,
    EvalContext,
    SubjectKey,
    compile_condition,
    evaluate_all,
)
from agent_gate.policy.model import GlobalRule, Limit, Rule
from agent_gate.policy.paths import ArgPath, display, parse_path, resolve
from agent_gate.policy.values import (
    LimitCheck,
    PolicyDecision,
    Principal,
    RuleTrace,
    TaskHistory,
    TaskScope,
    Truth,
    Verdict,
)

__all__ = [
    "BUILTIN_AFTER",
    "BUILTIN_BAD_ARGUMENTS",
    "BUILTIN_BAD_PATH",
    "BUILTIN_DEFAULT_DENY",
    "BUILTIN_NOT_AFTER",
    "BUILTIN_NO_HISTORY",
    "BUILTIN_TASK_SCOPE",
    "BUILTIN_UNKNOWN_SCOPE",
    "BUILTIN_UNKNOWN_TOOL",
    "CompiledRule",
    "LimitRule",
    "Sequencing",
    "decide",
]

BUILTIN_UNKNOWN_TOOL: Final = "agent-gate:unknown-tool"
BUILTIN_BAD_ARGUMENTS: Final = "agent-gate:bad-arguments"
BUILTIN_TASK_SCOPE: Final = "agent-gate:task-scope"
BUILTIN_UNKNOWN_SCOPE: Final = "agent-gate:unknown-scope"
BUILTIN_DEFAULT_DENY: Final = "agent-gate:default-deny"
BUILTIN_BAD_PATH: Final = "agent-gate:bad-path"
BUILTIN_AFTER: Final = "agent-gate:after"
BUILTIN_NOT_AFTER: Final = "agent-gate:not-after"
BUILTIN_NO_HISTORY: Final = "agent-gate:no-history"


@dataclass(frozen=True, slots=True)
class Sequencing:
    """A tool's sequence rules: ``after`` (each needs a succeeded call earlier in the
    task), ``not_after`` (an authorized one forbids the call), and the tools whose
    history its rules read (``prior:``); every one of them needs the task's history."""

    after: tuple[str, ...] = ()
    not_after: tuple[str, ...] = ()
    reads: frozenset[str] = frozenset()

    @property
    def tools(self) -> frozenset[str]:
        return frozenset(self.after) | frozenset(self.not_after) | self.reads

    def denial(self, tool: str, history: TaskHistory | None) -> tuple[str, list[str]] | None:
        """The built-in id and reasons that deny the call, or None."""
        if not self.tools:
            return None
        if history is None:
            return BUILTIN_NO_HISTORY, [
                f"{_name(tool)} has sequence rules and no task history was supplied "
                "(the ledger reads it), so the call is denied"]
        missing = [t for t in self.after if t not in history.succeeded]
        if missing:
            return BUILTIN_AFTER, [
                f"{_name(tool)} needs a succeeded call of {_name(t)} earlier in the task"
                for t in missing]
        done = [t for t in self.not_after if t in history.authorized]
        if done:
            return BUILTIN_NOT_AFTER, [
                f"{_name(tool)} is not allowed after a call of {_name(t)} in the same task"
                for t in done]
        return None

Usage = Mapping[str, int | float | Decimal]

Delegate = Callable[[EvalContext, Mapping[str, Any]], Sequence[RuleTrace]]
"""Another policy source's answer for one call (``cedar``), as traces ranked like rules."""

_PRECEDENCE: Final = (Verdict.DENY, Verdict.APPROVE, Verdict.ALLOW)
"""Strongest first: the first effect some rule that holds asks for decides."""


def _name(text: str) -> str:
    """A tool or scope name as it may appear in a reason: bounded and quoted."""
    return repr(text if len(text) <= 80 else text[:80] + "…")


@dataclass(frozen=True, slots=True)
class CompiledRule:
    id: str
    effect: Verdict
    when: tuple[Compiled, ...]
    reason: str | None
    tools: frozenset[str] | None = None
    path_subjects: frozenset[SubjectKey] = frozenset()
    shadow: bool = False
    """``mode: shadow``: evaluated for the would-be decision only, never enforced."""

    @classmethod
    def build(cls, rule: Rule) -> CompiledRule:
        tools = None
        if isinstance(rule, GlobalRule) and rule.tools is not None:
            tools = frozenset(rule.tools)
        when = tuple(compile_condition(c) for c in rule.when)
        return cls(
            id=rule.id,
            effect=rule.effect,
            when=when,
            reason=rule.reason,
            tools=tools,
            path_subjects=frozenset().union(*(part.path_subjects() for part in when)),
            shadow=rule.mode == "shadow",
        )

    def applies_to(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools


@dataclass(frozen=True, slots=True)
class LimitRule:
    """A per-task limit of one tool, as the gate needs it to count usage.

    ``key`` is the counter's name in the usage mapping: ``<tool>/calls`` for a
    call count, ``<tool>/sum/<argument>`` for a running total. Two limits on the
    same counter (say, approve above 500 and deny above 2000) share one key.
    ``amount(arguments)`` is what this call adds to the counter, or ``None`` when
    the argument is absent, not a finite number, or negative (a negative amount
    would lower the running total; such a call is denied).
    """

    id: str
    tool: str
    key: str
    argument: ArgPath | None
    maximum: Decimal
    effect: Verdict
    reason: str | None

    @classmethod
    def build(cls, tool: str, limit: Limit) -> LimitRule:
        if limit.max_calls is not None:
            return cls(
                id=limit.id,
                tool=tool,
                key=f"{tool}/calls",
                argument=None,
                maximum=Decimal(limit.max_calls),
                effect=limit.decision_effect,
                reason=limit.reason,
            )
        assert limit.sum is not None and limit.max is not None
        path = parse_path(limit.sum)
        return cls(
            id=limit.id,
            tool=tool,
            key=f"{tool}/sum/{display(path)}",
            argument=path,
            maximum=Decimal(str(limit.max)),
            effect=limit.decision_effect,
            reason=limit.reason,
        )

    @property
    def kind(self) -> str:
        """``calls`` (counts calls) or ``sum`` (adds up an argument)."""
        return "calls" if self.argument is None else "sum"

    def amount(self, arguments: Mapping[str, Any]) -> Decimal | None:
        if self.argument is None:
            return Decimal(1)
        value = resolve(dict(arguments), self.argument)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return None
        amount = Decimal(str(value))
        return amount if amount >= 0 else None

    def check(self, arguments: Mapping[str, Any], usage: Usage | None) -> LimitCheck:
        label = (self.reason or "").rstrip(". ") or (
            f"at most {self.maximum} calls of {_name(self.tool)} per task"
            if self.argument is None
            else f"total '{display(self.argument)}' of {_name(self.tool)} per task "
            f"at most {self.maximum}"
        )
        amount = self.amount(arguments)
        used = _usage_value(usage, self.key)
        if used is None:
            why = (
                f"no usage for counter '{self.key}' was supplied "
                "(the ledger must count it), so the call is denied"
            )
            return self._result(label, used, amount, True, Verdict.DENY, why)
        if amount is None:
            why = (
                f"argument '{display(self.argument or ())}' is "
                "absent, not a finite number, or negative, so it cannot be counted"
            )
            return self._result(label, used, amount, True, Verdict.DENY, why)
        exceeded = used + amount > self.maximum
        if exceeded:
            verdict = "is denied" if self.effect is Verdict.DENY else "needs approval"
            text = (
                f"already used {used} of {self.maximum}; this call would go over, so it {verdict}"
            )
        else:
            text = f"used {used} of {self.maximum}; this call stays within it"
        return self._result(label, used, amount, exceeded, self.effect, text)

    def _result(
        self,
        label: str,
        used: Decimal | None,
        amount: Decimal | None,
        exceeded: bool,
        effect: Verdict,
        why: str,
    ) -> LimitCheck:
        """This limit's check for one call; the reason names the limit, then why."""
        return LimitCheck(
            id=self.id,
            key=self.key,
            maximum=self.maximum,
            used=used,
            amount=amount,
            exceeded=exceeded,
            effect=effect,
            reason=f"{self.id}: {label}; {why}",
        )


def _usage_value(usage: Usage | None, key: str) -> Decimal | None:
    if usage is None or key not in usage:
        return None
    value = usage[key]
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        return None
    try:
        number = Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        return None
    if not number.is_finite() or number < 0:
        return None
    return number


def _deny(tool: str, rule_id: str, reason: str, policy_hash: str) -> PolicyDecision:
    return PolicyDecision(
        effect=Verdict.DENY,
        tool=tool,
        rule_ids=(rule_id,),
        reasons=(reason,),
        policy_hash=policy_hash,
    )


def _scope_denial(
    tool: str, scope: TaskScope, scopes: Mapping[str, frozenset[str]], policy_hash: str
) -> PolicyDecision | None:
    if scope.tools is not None and tool not in scope.tools:
        return _deny(
            tool,
            BUILTIN_TASK_SCOPE,
            f"the task is limited to {len(scope.tools)} tool(s) and {_name(tool)} is not one "
            "of them",
            policy_hash,
        )
    if scope.name is not None:
        allowed = scopes.get(scope.name)
        if allowed is None:
            return _deny(
                tool,
                BUILTIN_UNKNOWN_SCOPE,
                f"the task's scope {_name(scope.name)} is not declared in the policy; "
                "every call of such a task is denied",
                policy_hash,
            )
        if tool not in allowed:
            return _deny(
                tool,
                BUILTIN_TASK_SCOPE,
                f"scope {_name(scope.name)} does not include {_name(tool)}",
                policy_hash,
            )
    return None


def _rule_sentence(rule: CompiledRule, truth: Truth, detail: str) -> str:
    if truth is Truth.ERROR:
        return (
            f"{rule.id} ({rule.effect.value}) could not be evaluated, so the call is denied "
            f"(fail closed): {detail}"
        )
    because = f"{rule.reason} " if rule.reason else ""
    return f"{rule.id} ({rule.effect.value}): {because}[{detail}]"


def decide(
    *,
    tool: str,
    arguments: Any,
    rules: Sequence[CompiledRule] | None,
    limits: Sequence[LimitRule],
    scopes: Mapping[str, frozenset[str]],
    principal: Principal | None,
    task_scope: TaskScope | None,
    usage: Usage | None,
    policy_hash: str,
    delegate: Delegate | None = None,
    sequencing: Sequencing | None = None,
    history: TaskHistory | None = None,
) -> PolicyDecision:
    """The decision for one call; ``rules`` is ``None`` when the tool is not declared.

    ``delegate`` is the tool's other policy source (a Cedar set): its traces count
    exactly like rules of their effect, so deny > approve > allow holds across both.
    """
    if rules is None:
        return _deny(
            tool,
            BUILTIN_UNKNOWN_TOOL,
            f"tool {_name(tool)} is not declared in the policy; unknown tools are denied",
            policy_hash,
        )
    if not isinstance(arguments, Mapping):
        return _deny(
            tool, BUILTIN_BAD_ARGUMENTS, "the arguments are not a JSON object", policy_hash
        )
    if task_scope is not None:
        denial = _scope_denial(tool, task_scope, scopes, policy_hash)
        if denial is not None:
            return denial

    ctx = EvalContext(
        arguments=dict(arguments),
        principal=(principal or Principal()).as_subject(),
        task=task_scope.as_subject() if task_scope is not None else {"attributes": {}},
        path_subjects=frozenset().union(*(rule.path_subjects for rule in rules)),
        tool=tool,
        usage=usage or {},
        prior=history.succeeded if history is not None else {},
    )
    traces: list[RuleTrace] = []
    by_effect: dict[Verdict, list[str]] = {e: [] for e in Verdict}
    sentences: dict[str, str] = {}
    for rule in rules:
        result = evaluate_all(rule.when, ctx)
        traces.append(RuleTrace(rule.id, rule.effect, result.truth, result.detail))
        sentences[rule.id] = _rule_sentence(rule, result.truth, result.detail)
        if result.truth is Truth.TRUE:
            by_effect[rule.effect].append(rule.id)
        elif result.truth is Truth.ERROR and rule.effect is not Verdict.ALLOW:
            by_effect[Verdict.DENY].append(rule.id)
    for trace in delegate(ctx, arguments) if delegate is not None else ():
        traces.append(trace)
        if trace.truth is Truth.ERROR:
            sentences[trace.id] = (
                f"{trace.id} ({trace.effect.value}) could not be evaluated, so the call is "
                f"denied (fail closed): {trace.detail}"
            )
        else:
            sentences[trace.id] = f"{trace.id} ({trace.effect.value}): {trace.detail}"
        if trace.truth is Truth.TRUE:
            by_effect[trace.effect].append(trace.id)
        elif trace.truth is Truth.ERROR and trace.effect is not Verdict.ALLOW:
            by_effect[Verdict.DENY].append(trace.id)

    for effect in _PRECEDENCE:
        if by_effect[effect]:
            ids = by_effect[effect]
            reasons = [sentences[i] for i in ids]
            break
    else:
        effect = Verdict.DENY
        ids = [BUILTIN_DEFAULT_DENY]
        reasons = [f"no rule allows this call of {_name(tool)} (default deny)"]
        reasons += [
            f"{t.id} ({t.effect.value}) does not apply: {t.detail}"
            for t in traces
            if t.effect is not Verdict.DENY
        ]
    if ctx.bad_paths and effect is not Verdict.DENY:
        effect = Verdict.DENY
        ids = [BUILTIN_BAD_PATH]
        reasons = [
            f"{subject} is a path for this tool's policy (path_under) and cannot be judged "
            f"as one ({why}), so the call is denied"
            for subject, why in ctx.bad_paths.items()
        ]

    stopped = sequencing.denial(tool, history) if sequencing is not None else None
    if stopped is not None and (effect is not Verdict.DENY or ids == [BUILTIN_DEFAULT_DENY]):
        effect, ids, reasons = Verdict.DENY, [stopped[0]], stopped[1]

    checks: list[LimitCheck] = []
    if effect is not Verdict.DENY:
        checks = [limit.check(arguments, usage) for limit in limits]
        over_deny = [c for c in checks if c.exceeded and c.effect is Verdict.DENY]
        over_approve = [c for c in checks if c.exceeded and c.effect is Verdict.APPROVE]
        if over_deny:
            effect = Verdict.DENY
            ids = [c.id for c in over_deny]
            reasons = [c.reason for c in over_deny] + reasons
        elif over_approve:
            if effect is Verdict.ALLOW:
                effect = Verdict.APPROVE
                ids = [c.id for c in over_approve]
            else:
                ids = ids + [c.id for c in over_approve]
            reasons = [c.reason for c in over_approve] + reasons
        else:
            reasons += [c.reason for c in checks]

    return PolicyDecision(
        effect=effect,
        tool=tool,
        rule_ids=tuple(ids),
        reasons=tuple(reasons),
        policy_hash=policy_hash,
        rules=tuple(traces),
        limits=tuple(checks),
    )
