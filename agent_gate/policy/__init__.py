"""Authorization policies for tool calls: a YAML format and a default-deny evaluator.

This package is pure: no database, no network, no clock. The gate loads a
``Policy`` once, asks it for a ``PolicyDecision`` per call (passing the per-task usage
its ledger counted), applies ``tool_overrides`` to the registry's classes, and
hands ``redaction_rules(tool)`` to ``agent_gate.privacy.redaction``, which makes the
form the audit trail stores. See ``policies/README.md`` for
the file format.

    policy = Policy.load("policies/example.yaml")
    decision = policy.evaluate(
        "send_email",
        {"to": "ana@example.com", "subject": "hi", "body": "..."},
        principal=Principal(id="u1", roles={"support"}),
        task_scope=TaskScope(task_id="t1", name="support"),
        usage={limit.key: 0 for limit in policy.limits("send_email")},
    )
    decision.effect        # Verdict.ALLOW / APPROVE / DENY
    decision.rule_ids      # ids that decided
    decision.policy_hash   # bind approvals to this
"""

from __future__ import annotations

from agent_gate.errors import PolicyError, PolicyLoadError, Problem
from agent_gate.policy.beneath import (
    PathEscapes,
    open_beneath,
    open_file_beneath,
    relative_beneath,
)
from agent_gate.policy.evaluator import (
    BUILTIN_BAD_ARGUMENTS,
    BUILTIN_BAD_PATH,
    BUILTIN_DEFAULT_DENY,
    BUILTIN_TASK_SCOPE,
    BUILTIN_UNKNOWN_SCOPE,
    BUILTIN_UNKNOWN_TOOL,
    LimitRule,
)
from agent_gate.policy.policy import Policy
from agent_gate.policy.redaction import RedactionRule
from agent_gate.policy.values import (
    DecisionEffect,
    Effect,
    EffectiveClass,
    Idempotency,
    LimitCheck,
    PolicyDecision,
    Principal,
    RuleTrace,
    ShadowDecision,
    TaskHistory,
    TaskScope,
    ToolEffect,
    ToolOverrides,
    Truth,
    Verdict,
    safer_effect,
    safer_idempotency,
)

__all__ = [
    "BUILTIN_BAD_ARGUMENTS",
    "BUILTIN_BAD_PATH",
    "BUILTIN_DEFAULT_DENY",
    "BUILTIN_TASK_SCOPE",
    "BUILTIN_UNKNOWN_SCOPE",
    "BUILTIN_UNKNOWN_TOOL",
    "DecisionEffect",
    "Effect",
    "EffectiveClass",
    "Idempotency",
    "LimitCheck",
    "LimitRule",
    "PathEscapes",
    "Policy",
    "PolicyDecision",
    "PolicyError",
    "PolicyLoadError",
    "Principal",
    "Problem",
    "RedactionRule",
    "RuleTrace",
    "ShadowDecision",
    "TaskHistory",
    "TaskScope",
    "ToolEffect",
    "ToolOverrides",
    "Truth",
    "Verdict",
    "open_beneath",
    "open_file_beneath",
    "relative_beneath",
    "safer_effect",
    "safer_idempotency",
]
