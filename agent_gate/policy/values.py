"""Values that cross the boundary between the policy layer and its callers.

The gate hands the evaluator a call (tool name, arguments), who asks (a
``Principal``), what the task may touch (a ``TaskScope``) and how much of each
per-task limit is already used (a usage mapping the ledger counts). It gets back
a ``PolicyDecision``. Everything here is a frozen dataclass or an enum, so a decision
can be stored, compared and hashed without dragging the policy model along.

A tool's effect and idempotency classes are the tools layer's own enums
(``agent_gate.tools.spec``, below this one): a policy only ever makes them more
careful (``ToolOverrides``), it never defines classes of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from agent_gate.tools.spec import Effect, Idempotency

__all__ = [
    "DecisionEffect",
    "Effect",
    "EffectiveClass",
    "Idempotency",
    "LimitCheck",
    "PolicyDecision",
    "Principal",
    "RuleTrace",
    "ShadowDecision",
    "TaskHistory",
    "TaskScope",
    "ToolEffect",
    "ToolOverrides",
    "Truth",
    "Verdict",
    "safer_effect",
    "safer_idempotency",
]


class Verdict(StrEnum):
    """What a decision says, whoever decides (a policy file, a custom ``Authorizer``),
    and what a rule asks for (its ``effect:``).

    Precedence is ``deny`` > ``approve`` > ``allow`` (Cedar's "forbid beats
    permit", with human approval in between): the strongest effect among the
    rules that apply wins, so adding a rule can only make a policy stricter
    unless that rule is an ``allow``.
    """

    ALLOW = "allow"
    APPROVE = "approve"
    DENY = "deny"


DecisionEffect = Verdict
"""The old name of ``Verdict`` in the policy layer: the same class."""

ToolEffect = Effect
"""The old name of ``agent_gate.tools.Effect`` in the policy layer: the same class."""

C = TypeVar("C", Effect, Idempotency)

_EFFECT_ORDER = (Effect.READ, Effect.WRITE, Effect.DESTRUCTIVE)
_IDEMPOTENCY_ORDER = (Idempotency.NATURAL, Idempotency.KEY, Idempotency.NONE)


def safer_effect(a: Effect | str, b: Effect | str) -> Effect:
    """The more careful of two effect classes (accepts the registry's strings)."""
    return max(Effect(a), Effect(b), key=_EFFECT_ORDER.index)


def safer_idempotency(a: Idempotency | str, b: Idempotency | str) -> Idempotency:
    """The more careful of two idempotency classes (accepts the registry's strings)."""
    return max(Idempotency(a), Idempotency(b), key=_IDEMPOTENCY_ORDER.index)


@dataclass(frozen=True, slots=True)
class EffectiveClass:
    """A tool's classes after the policy's overrides; ``notes`` say what was ignored."""

    effect: Effect
    idempotency: Idempotency
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolOverrides:
    """What a policy says about a tool's effect and idempotency class.

    ``None`` means the policy says nothing. ``apply`` combines these with what the
    code registered and only ever moves toward the safer side, so a policy that
    claims a destructive tool is a ``read`` cannot weaken the gate; the ignored
    claim is reported in ``notes`` for the operator.
    """

    tool: str
    effect: Effect | None = None
    idempotency: Idempotency | None = None

    def apply(
        self, registered_effect: Effect | str, registered_idempotency: Idempotency | str
    ) -> EffectiveClass:
        notes: list[str] = []
        eff = self._safer("effect", Effect(registered_effect), self.effect, _EFFECT_ORDER, notes)
        idem = self._safer(
            "idempotency",
            Idempotency(registered_idempotency),
            self.idempotency,
            _IDEMPOTENCY_ORDER,
            notes,
        )
        return EffectiveClass(effect=eff, idempotency=idem, notes=tuple(notes))

    def _safer(
        self, what: str, registered: C, claimed: C | None, order: tuple[C, ...], notes: list[str]
    ) -> C:
        """The safer of the two; a claim less careful than the registration is noted."""
        if claimed is None:
            return registered
        kept = max(registered, claimed, key=order.index)
        if kept is not claimed:
            notes.append(
                f"policy {what} {claimed.value!r} for {self.tool!r} is less careful "
                f"than the registered {registered.value!r}; kept {registered.value!r}"
            )
        return kept


class Truth(StrEnum):
    """Three-valued result of a condition (Kleene logic).

    ``error`` means the condition could not be decided for this call (wrong type,
    unparseable URL, ambiguous IP form, input over a cap). It never grants: an
    ``allow`` rule that errors does not apply, and a ``deny`` or ``approve`` rule
    that errors denies the call, because nobody can tell whether its guard would
    have fired.
    """

    TRUE = "true"
    FALSE = "false"
    ERROR = "error"


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True, slots=True)
class Principal:
    """Who the agent acts for, as the wrapper that calls the gate knows it.

    The policy layer trusts these values: they come from the application's
    authentication, never from the model. Conditions reach them as
    ``principal: id``, ``principal: roles`` and ``principal: attributes.<key>``.
    """

    id: str | None = None
    roles: frozenset[str] = frozenset()
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "roles", frozenset(self.roles))
        object.__setattr__(self, "attributes", _frozen_mapping(self.attributes))

    def as_subject(self) -> dict[str, Any]:
        subject: dict[str, Any] = {"roles": sorted(self.roles), "attributes": dict(self.attributes)}
        if self.id is not None:
            subject["id"] = self.id
        return subject


@dataclass(frozen=True, slots=True)
class TaskScope:
    """What the current task may touch.

    ``tools`` is a set of tool names the caller limits the task to (``None``: no
    limit from the caller); ``name`` names a scope declared in the policy's
    ``scopes:`` section. When both are given, a tool must be in both. An unknown
    scope name denies every call, so a typo never widens a task.
    """

    task_id: str | None = None
    name: str | None = None
    tools: frozenset[str] | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.tools is not None:
            object.__setattr__(self, "tools", frozenset(self.tools))
        object.__setattr__(self, "attributes", _frozen_mapping(self.attributes))

    def as_subject(self) -> dict[str, Any]:
        subject: dict[str, Any] = {"attributes": dict(self.attributes)}
        if self.task_id is not None:
            subject["id"] = self.task_id
        if self.name is not None:
            subject["name"] = self.name
        if self.tools is not None:
            subject["tools"] = sorted(self.tools)
        return subject


@dataclass(frozen=True, slots=True)
class LimitCheck:
    """One per-task limit as it stands for this call.

    ``key`` names the counter the ledger keeps (``tool/calls`` or
    ``tool/sum/<argument>``), stable across policy edits that rename the limit.
    ``used`` is what the caller reported, ``amount`` what this call would add,
    ``exceeded`` whether ``used + amount > maximum``. ``used`` is ``None`` when the
    caller supplied no usage for the counter, and ``amount`` is ``None`` when the
    call's argument is not a usable number; both deny the call.
    """

    id: str
    key: str
    maximum: Decimal
    used: Decimal | None
    amount: Decimal | None
    exceeded: bool
    effect: Verdict
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return _json_fields(self)


def _num(value: Decimal | None) -> int | float | None:
    if value is None:
        return None
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def _json_value(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Decimal):
        return _num(value)
    if isinstance(value, tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, (LimitCheck, RuleTrace, ShadowDecision)):
        return value.to_dict()
    return value


def _json_fields(
    record: LimitCheck | RuleTrace | PolicyDecision | ShadowDecision,
) -> dict[str, Any]:
    """Every field of a decision record, in field order, as JSON values: enums by
    value, amounts as numbers, tuples as lists, nested records as dicts. Why: the
    audit trail and ``--json`` print these records, and one mapping keeps their
    shapes alike and a new field from being forgotten."""
    return {f.name: _json_value(getattr(record, f.name)) for f in fields(record)}


@dataclass(frozen=True, slots=True)
class RuleTrace:
    """How one rule fared for this call, for explanations and the audit trail."""

    id: str
    effect: Verdict
    truth: Truth
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return _json_fields(self)


@dataclass(frozen=True, slots=True)
class TaskHistory:
    """What the task's earlier calls tell a tool's sequence rules (``after``,
    ``not_after``, ``prior:``): per tool, the arguments of its latest succeeded call,
    and the tools of which some call was authorized (it may have run)."""

    succeeded: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    authorized: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "succeeded", _frozen_mapping(self.succeeded))
        object.__setattr__(self, "authorized",
                           frozenset(self.authorized) | frozenset(self.succeeded))


@dataclass(frozen=True, slots=True)
class ShadowDecision:
    """What the decision would have been with the shadow rules (or the shadow policy
    file) enforced: recorded with the call, never enforced. ``differs`` says whether
    its verdict is not the enforced one."""

    effect: Verdict
    rule_ids: tuple[str, ...]
    policy_hash: str
    differs: bool

    def to_dict(self) -> dict[str, Any]:
        return _json_fields(self)


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """The answer for one call, with everything needed to explain and audit it.

    ``rule_ids`` are the ids that decided (all applying rules of the winning
    effect, or the limits that changed it, or a built-in ``agent-gate:*`` id for
    default deny, unknown tool, task scope and bad arguments). ``policy_hash`` is
    the hash of the policy's canonical content, so an approval can be bound to the
    exact policy it was given under. ``reasons`` are sentences for people; they
    name argument fields and the policy's constraints, never argument values.
    """

    effect: Verdict
    tool: str
    rule_ids: tuple[str, ...]
    reasons: tuple[str, ...]
    policy_hash: str
    rules: tuple[RuleTrace, ...] = ()
    limits: tuple[LimitCheck, ...] = ()
    shadow: ShadowDecision | None = None
    """The would-be decision of shadow rules, when the policy has any (else None)."""

    @property
    def allowed(self) -> bool:
        return self.effect is Verdict.ALLOW

    @property
    def exceeded_limits(self) -> tuple[LimitCheck, ...]:
        return tuple(limit for limit in self.limits if limit.exceeded)

    def explain(self) -> str:
        ids = ", ".join(self.rule_ids) or "-"
        lines = [f"{self.effect.value} {self.tool} (decided by: {ids})"]
        lines.extend(f"  - {reason}" for reason in self.reasons)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return _json_fields(self)
