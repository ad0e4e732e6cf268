"""The ``approval:`` block of an approve rule: the grants an approver may give, and
how many people must agree.

Why a block of its own: an approve rule alone says "a person answers each call".
Two other answers are common and both are about *who* and *how much*, never about
the call's own decision, so they sit beside the rule, not in its ``when``:

* ``grants``: options the approver may pick when approving, each covering more
  calls of the same tool in the same task for a while or a number of calls, and
  only for arguments within the option's own ``when`` (``to`` in one domain,
  ``amount <= 500``). The policy offers them; the approver only chooses one. A
  grant is bound to the policy's hash: another policy never honours it.
* ``approvers``: a quorum (``min`` distinct approvers, optionally of ``roles``);
  ``deny: any`` (the default) ends the call at the first denial, ``deny: quorum``
  only when ``min`` distinct people denied it.

A rule that asks for a quorum may not offer grants: one person choosing a grant
would let later calls past a rule that wants two.

A file that uses neither keeps the hash it had before the block existed
(``Rule``'s serializer drops an absent block).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from agent_gate.policy.values import Truth

if TYPE_CHECKING:
    from agent_gate.policy.model import Condition, PolicyDocument

__all__ = [
    "MAX_QUORUM",
    "GrantOption",
    "Quorum",
    "Requirement",
    "RuleApproval",
    "grant_covers",
    "quorum_rule_ids",
    "requirement",
]

MAX_QUORUM = 20
"""More distinct approvers than this is a typo, not a control."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_OptionId = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
_RoleName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]


def _duration(text: str) -> str:
    if len(text) < 2 or text[-1] not in _UNITS or not text[:-1].isdigit():
        raise ValueError("a duration is a whole number of s, m, h or d: '90s', '15m', '1h'")
    if not 1 <= int(text[:-1]) * _UNITS[text[-1]] <= 366 * 86400:
        raise ValueError("a duration is between 1 second and 366 days")
    return text


def _listify(data: Any) -> Any:
    return [data] if isinstance(data, dict) else data


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class GrantOption(_Model):
    """One grant an approver may choose: ``for`` a while and/or up to ``calls`` more
    calls of this tool in this task, for arguments where every ``when`` holds."""

    id: _OptionId
    for_: Annotated[StrictStr, AfterValidator(_duration)] | None = Field(None, alias="for")
    calls: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    when: Annotated[list[Condition], BeforeValidator(_listify)] = []
    description: Annotated[StrictStr, StringConstraints(max_length=2000)] | None = None

    @model_validator(mode="after")
    def _bounded(self) -> GrantOption:
        if self.for_ is None and self.calls is None:
            raise ValueError("a grant needs 'for: DURATION' or 'calls: N' (or both): "
                             "one without either would cover the task for ever")
        return self

    @property
    def seconds(self) -> int | None:
        """How long the grant lasts from when it is given (None: no time limit)."""
        if self.for_ is None:
            return None
        return int(self.for_[:-1]) * _UNITS[self.for_[-1]]

    def summary(self) -> str:
        """The option as an approver reads it before choosing it."""
        parts = []
        if self.for_ is not None:
            parts.append(f"for {self.for_}")
        if self.calls is not None:
            parts.append(f"up to {self.calls} more call{'s' if self.calls != 1 else ''}")
        if self.when:
            parts.append(f"{len(self.when)} argument bound{'s' if len(self.when) != 1 else ''}")
        return f"{self.id}: " + ", ".join(parts) + (f" ({self.description})"
                                                     if self.description else "")


class Quorum(_Model):
    """How many distinct people must approve, of which roles, and what one denial does."""

    min: Annotated[StrictInt, Field(ge=1, le=MAX_QUORUM)] = 1
    distinct: StrictBool = True
    roles: list[_RoleName] = []
    deny: Literal["any", "quorum"] = "any"

    @model_validator(mode="after")
    def _people(self) -> Quorum:
        if not self.distinct:
            raise ValueError("distinct: false would let one person satisfy a rule that "
                             "wants several; a quorum counts distinct approvers")
        return self


class RuleApproval(_Model):
    """An approve rule's ``approval:`` block."""

    grants: list[GrantOption] = []
    approvers: Quorum | None = None

    @model_validator(mode="after")
    def _coherent(self) -> RuleApproval:
        ids = [g.id for g in self.grants]
        if len(ids) != len(set(ids)):
            raise ValueError("grant ids must be unique within a rule")
        if self.grants and self.approvers is not None and self.approvers.min > 1:
            raise ValueError("a rule that asks for a quorum may not offer grants: one "
                             "approver's grant would let later calls past it")
        return self


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
    from agent_gate.policy.conditions import EvalContext, compile_condition, evaluate_all

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


def quorum_rule_ids(document: PolicyDocument) -> tuple[str, ...]:
    """The ids of the rules that want more than one approver (for a listing that keeps
    their calls in view until the quorum is reached)."""
    rules = [*document.rules, *(r for t in document.tools.values() for r in t.rules)]
    return tuple(sorted({r.id for r in rules if r.approval is not None
                         and r.approval.approvers is not None
                         and r.approval.approvers.min > 1}))
