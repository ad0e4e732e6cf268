"""What the ``approval:`` blocks of the rules that sent a call to a person ask of its
answers, read off a whole policy document: the strictest quorum, the grants every one
of them offers, whether a chosen grant covers a later call, which rules want a quorum.

The block itself (grants, quorum, deadline, editable fields) and why it exists are
``policy.approval_model``'s; this module sits above ``policy.model`` because each
answer here looks up rules by id across the whole file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_gate.policy.approval_model import MAX_QUORUM, GrantOption, Quorum, RuleApproval
from agent_gate.policy.conditions import EvalContext, compile_condition, evaluate_all
from agent_gate.policy.model import PolicyDocument
from agent_gate.policy.values import Truth

__all__ = [
    "MAX_QUORUM",
    "GrantOption",
    "Quorum",
    "Requirement",
    "RuleApproval",
    "closed_rules",
    "escalation_roles",
    "grant_covers",
    "quorum_rule_ids",
    "requirement",
    "role_refusal",
]


@dataclass(frozen=True, slots=True)
class Requirement:
    """What the rules that sent one call to a person ask of its answers."""

    min: int = 1
    roles: tuple[str, ...] = ()
    deny_quorum: bool = False
    grants: tuple[GrantOption, ...] = ()

    @property
    def quorum(self) -> bool:
        return self.min > 1

    def grant(self, option: str) -> GrantOption | None:
        return next((g for g in self.grants if g.id == option), None)


def _approvals(document: PolicyDocument, tool: str,
               rule_ids: Sequence[str]) -> list[RuleApproval | None]:
    """The ``approval`` block of each of ``rule_ids`` (None for a rule without one,
    or an id that is not a rule: a limit, a built-in)."""
    own = document.tools.get(tool)
    rules = {r.id: r for r in (own.rules if own is not None else [])}
    rules.update({r.id: r for r in document.rules
                  if r.tools is None or tool in r.tools})
    return [rules[i].approval if i in rules else None for i in rule_ids]


def requirement(document: PolicyDocument, tool: str, rule_ids: Sequence[str]) -> Requirement:
    """The answers the rules that asked for approval want: the strictest quorum among
    them, and the grant options every one of them offers (a limit that asked offers
    none: a grant never lets a call past a limit)."""
    blocks = _approvals(document, tool, rule_ids)
    quorums = [b.approvers for b in blocks if b is not None and b.approvers is not None]
    strictest = max(quorums, key=lambda q: q.min, default=None)
    offered: tuple[GrantOption, ...] = ()
    if blocks and all(b is not None and b.grants for b in blocks):
        first = blocks[0]
        assert first is not None
        common = set.intersection(*({g.id for g in b.grants} for b in blocks if b))
        offered = tuple(g for g in first.grants if g.id in common)
    if strictest is None:
        return Requirement(grants=offered)
    return Requirement(strictest.min, tuple(strictest.roles), strictest.deny == "quorum",
                       offered)


def grant_covers(document: PolicyDocument, tool: str, rule_ids: Sequence[str], option: str,
                 arguments: Mapping[str, Any]) -> bool:
    """Whether a grant of ``option`` covers a call of ``tool`` that ``rule_ids`` sent to a
    person: every one of those rules offers the option, and every ``when`` of it holds
    for ``arguments`` (a condition that cannot be judged does not hold)."""
    blocks = _approvals(document, tool, rule_ids)
    if not blocks:
        return False
    for block in blocks:
        chosen = next((g for g in block.grants if g.id == option), None) if block else None
        if chosen is None:
            return False
        ctx = EvalContext(arguments=dict(arguments), principal={}, task={}, tool=tool)
        parts = [compile_condition(c) for c in chosen.when]
        if evaluate_all(parts, ctx).truth is not Truth.TRUE:
            return False
    return True


def escalation_roles(document: PolicyDocument) -> tuple[str, ...]:
    """Every role a rule of the file may escalate a call to (``then: {escalate: ROLE}``),
    sorted: the only roles an ``escalated`` notice ever names, so the only ones a
    notification route may narrow its escalations to (``serve.webhooks.check_route_roles``;
    an approver or quorum role that no rule escalates to would leave the route deaf)."""
    rules = [*document.rules, *(r for t in document.tools.values() for r in t.rules)]
    return tuple(sorted({r.approval.escalate_to for r in rules
                         if r.approval is not None and r.approval.escalate_to is not None}))


def quorum_rule_ids(document: PolicyDocument) -> tuple[str, ...]:
    """The ids of the rules that want more than one approver (for a listing that keeps
    their calls in view until the quorum is reached)."""
    rules = [*document.rules, *(r for t in document.tools.values() for r in t.rules)]
    return tuple(sorted({r.id for r in rules if r.approval is not None
                         and r.approval.approvers is not None
                         and r.approval.approvers.min > 1}))


def role_refusal(document: PolicyDocument, tool: str, rule_ids: Sequence[str], approver: str,
                 roles: Sequence[str], *, denial: bool = False) -> str | None:
    """Why ``approver``, holding ``roles`` (the file's ``operators:``), may not approve
    a call of ``tool`` that ``rule_ids`` sent to a person (``denial``: deny it), or None.

    Every one of those rules whose ``approval: approvers:`` names ``roles`` wants one of
    them: an approval from anyone else would never count (``Decider``'s quorum), so it
    is refused when given, and not offered. A denial is refused only under
    ``deny: quorum``, where it is counted like an approval; under ``deny: any`` anyone
    who may answer the tool's calls may stop one. Every rule, not only the strictest:
    the answer is the same whatever order the rules were listed in, and a listing can
    leave such calls out in its statement (``closed_rules``)."""
    for block in _approvals(document, tool, rule_ids):
        wanted = block.approvers if block is not None else None
        if wanted is None or not wanted.roles or (denial and wanted.deny != "quorum"):
            continue
        if not set(wanted.roles) & set(roles):
            return (f"{approver!r} holds none of the roles the quorum counts "
                    f"({', '.join(wanted.roles)})")
    return None


def closed_rules(document: PolicyDocument, roles: Sequence[str], *, denial: bool = False
                 ) -> tuple[tuple[tuple[str, ...] | None, str], ...]:
    """The rules ``role_refusal`` refuses a holder of ``roles`` by, as (the tools they
    apply to, None: every tool; the rule's id): a call one of them sent is one this
    person may not approve (``denial``: deny). What a listing of "the calls I may
    answer" leaves out in its statement (``InboxQuery.closed_rules``)."""
    out: list[tuple[tuple[str, ...] | None, str]] = []
    scoped = [((name,), r) for name, t in sorted(document.tools.items()) for r in t.rules]
    scoped += [(tuple(r.tools) if r.tools is not None else None, r) for r in document.rules]
    for tools, rule in scoped:
        wanted = rule.approval.approvers if rule.approval is not None else None
        if wanted is None or not wanted.roles or (denial and wanted.deny != "quorum"):
            continue
        if not set(wanted.roles) & set(roles):
            out.append((tools, rule.id))
    return tuple(out)
