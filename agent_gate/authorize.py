"""Binding a policy file to the gate: decisions, quotas, overrides, redaction.

``Gate(tools, db, policy=...)`` accepts a ``Policy``, a path to a policy file, or a
``PolicyAuthorizer``; the first two are wrapped in the third. The gate then asks it,
for each call:

- which *effect* and *idempotency* class to record (the registered ones, made only
  more careful by the policy's ``tool_overrides``);
- which argument fields to redact before anything is written (``redact``);
- for the decision itself, ``evaluate`` with the task's principal and scope and the
  task's quota usage, read in the ledger transaction that commits the decision
  (``Ledger.authorize``), and what the call adds to each counter (``charges``).

Who the agent acts for and what the task may touch are passed by the application:
``gate.execute(task, call, principal=..., scope=...)``, ``gate.run(..., principal=,
scope=)`` or once as defaults on the ``Gate``. They are bound to the task in the
ledger the first time they are given, and every later decision for the task (also a
resume by an operator, who has no application to ask) uses the bound ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from agent_gate.ledger.quota import ScopedCounter
from agent_gate.plainjson import canonical_json
from agent_gate.policy import (
    EffectiveClass,
    LimitRule,
    Policy,
    PolicyDecision,
    Principal,
    TaskHistory,
    TaskScope,
)
from agent_gate.privacy.redaction import redact_arguments
from agent_gate.tools import ToolSpec

__all__ = [
    "PolicyAuthorizer",
    "principal_from_json",
    "principal_json",
    "scope_from_json",
    "scope_json",
]


def principal_json(principal: Principal | None) -> str | None:
    """Canonical JSON of a principal, as the ledger binds it to a task."""
    if principal is None:
        return None
    return canonical_json(principal.as_subject())


def principal_from_json(text: str | Mapping[str, Any] | None) -> Principal:
    data = json.loads(text) if isinstance(text, str) else (text or {})
    return Principal(
        id=data.get("id"),
        roles=frozenset(data.get("roles") or ()),
        attributes=data.get("attributes") or {},
    )


def scope_json(scope: TaskScope | None) -> str | None:
    """Canonical JSON of a task scope (its task id is the task's own, not stored)."""
    if scope is None:
        return None
    subject = scope.as_subject()
    subject.pop("id", None)
    return canonical_json(subject)


def scope_from_json(task_id: str, text: str | Mapping[str, Any] | None) -> TaskScope:
    data = json.loads(text) if isinstance(text, str) else (text or {})
    tools = data.get("tools")
    return TaskScope(
        task_id=task_id,
        name=data.get("name"),
        tools=frozenset(tools) if tools is not None else None,
        attributes=data.get("attributes") or {},
    )


class PolicyAuthorizer:
    """A ``Policy`` as the gate uses it. Immutable, like the policy it wraps."""

    def __init__(
        self,
        policy: Policy | str | os.PathLike[str],
        *,
        shadow_policy: Policy | str | os.PathLike[str] | None = None,
    ) -> None:
        """``shadow_policy``: a policy evaluated beside ``policy`` on every call, its
        would-be decision recorded in the call's audit entry, never enforced."""
        loaded = policy if isinstance(policy, Policy) else Policy.load(policy)
        self.policy = loaded.with_shadow(shadow_policy) if shadow_policy is not None else loaded

    def __repr__(self) -> str:
        return f"PolicyAuthorizer({self.policy!r})"

    @property
    def hash(self) -> str:
        return self.policy.hash

    @property
    def source(self) -> str:
        return self.policy.source

    def effective(self, spec: ToolSpec) -> EffectiveClass:
        """The registered classes, made more careful where the policy says so."""
        overrides = self.policy.tool_overrides(spec.name)
        return overrides.apply(spec.effect, spec.idempotency)

    def redacts(self, tool: str) -> bool:
        return bool(self.policy.redaction_rules(tool))

    @property
    def redacts_anything(self) -> bool:
        """Whether any tool's arguments are redacted (and so sealed): the file's own
        ``redact`` lists or a Cedar policy's ``@redact``."""
        doc = self.policy.document
        return bool(doc.redact) or any(self.policy.redaction_rules(t) for t in doc.tools)

    def redact(
        self, tool: str, arguments: Mapping[str, Any], *, key: bytes | None
    ) -> dict[str, Any] | None:
        """The redacted form of ``arguments``, or None when no field was redacted."""
        rules = self.policy.redaction_rules(tool)
        if not rules:
            return None
        redacted = redact_arguments(arguments, rules, key=key)
        return None if redacted == dict(arguments) else redacted

    def limits(self, tool: str) -> tuple[LimitRule, ...]:
        return self.policy.limits(tool)

    def counters(self, tool: str) -> list[str]:
        """The task's own counters of ``tool``'s limits (``usage`` reads them)."""
        return sorted({limit.key for limit in self.policy.limits(tool) if not limit.scoped})

    def scoped_counters(self, tool: str) -> list[ScopedCounter]:
        """Counters summed beyond the task or in a window (``per``, ``window``)."""
        found = {limit.key: ScopedCounter(limit.key, limit.per, limit.window)
                 for limit in self.policy.limits(tool) if limit.scoped}
        return [found[key] for key in sorted(found)]

    def charges(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Decimal]:
        """What an authorized call adds to each of its tool's counters."""
        out: dict[str, Decimal] = {}
        for limit in self.policy.limits(tool):
            amount = limit.amount(arguments)
            if amount is not None:
                out[limit.key] = amount
        return out

    def evaluate(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        principal: Principal,
        scope: TaskScope | None,
        usage: Mapping[str, Decimal],
        history: TaskHistory | None = None,
    ) -> PolicyDecision:
        return self.policy.evaluate(
            tool, arguments, principal=principal, task_scope=scope, usage=usage,
            history=history,
        )

    def history_tools(self, tool: str) -> frozenset[str]:
        """The tools whose earlier calls in the task the decision on ``tool`` reads."""
        return self.policy.history_tools(tool)
