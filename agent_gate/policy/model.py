"""The policy file format, as strict pydantic models: the rules, limits, tools and
the other entries of a whole file.

Every model forbids unknown keys, so a misspelled predicate (``regexp:``) or key
(``efect:``) is a load error at its line instead of a silently ignored guard.
Scalars are strict where YAML would otherwise coerce: ``max_calls: "5"`` or
``absent: yes`` written as a string are errors, not guesses (``policy.scalars``).

Below this module: the condition models (``policy.condition_model``, re-exported
here) and an approve rule's ``approval:`` block (``policy.approval_model``). Above
it: what reads a whole document (``policy.approval``, ``policy.deadline``,
``policy.edits``, the loader). So nothing here imports back up.

``docs``: see ``policies/README.md`` for the format written out for people.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_serializer,
    model_validator,
)

from agent_gate.policy.approval_model import RuleApproval
from agent_gate.policy.condition_model import (
    COMBINATORS,
    PREDICATES,
    SUBJECTS,
    Condition,
    NumberBounds,
    PathUnderSpec,
    RegexSpec,
    SizeBounds,
    UrlSpec,
)
from agent_gate.policy.mcp_rules import McpPolicy
from agent_gate.policy.scalars import (
    STRICT,
    ArgPathText,
    Duration,
    NonNegInt,
    Number,
    OperatorId,
    RedactPathText,
    RoleName,
    RuleId,
    ScopeName,
    Text,
    ToolName,
    listify,
    seconds_of,
)
from agent_gate.policy.values import Verdict
from agent_gate.tools.spec import Effect, Idempotency

__all__ = [
    "COMBINATORS",
    "PREDICATES",
    "SUBJECTS",
    "Approvers",
    "CedarSource",
    "CedarTool",
    "Condition",
    "GlobalRule",
    "Limit",
    "NumberBounds",
    "OperatorEntry",
    "PathUnderSpec",
    "PolicyDocument",
    "RedactField",
    "RegexSpec",
    "Rule",
    "Scope",
    "SizeBounds",
    "ToolPolicy",
    "UrlSpec",
]

FORMAT_VERSION: Final = 1
MAX_REDACT_PREVIEW: Final = 16


class _Model(BaseModel):
    model_config = STRICT


# --- rules, limits, tools -----------------------------------------------------------


def _format_version(value: int) -> int:
    if value != FORMAT_VERSION:
        raise ValueError(f"this agent-gate reads policy format version {FORMAT_VERSION}")
    return value


class Rule(_Model):
    """A rule of one tool: when every ``when`` condition holds, ask for ``effect``.

    ``mode: shadow`` evaluates the rule on every call and records what the decision
    would have been with it enforced, without enforcing it."""

    id: RuleId
    effect: Verdict
    when: Annotated[list[Condition], BeforeValidator(listify)] = []
    reason: Text | None = None
    mode: Literal["enforce", "shadow"] = "enforce"
    approval: RuleApproval | None = None
    """Grants an approver may give, a quorum (``policy.approval``), the wait's deadline
    (``policy.deadline``), fields the approver may edit (``policy.edits``): approve
    rules only."""

    @model_validator(mode="after")
    def _approval_on_approve(self) -> Rule:
        if self.approval is not None and self.effect is not Verdict.APPROVE:
            raise ValueError("'approval' belongs to a rule with effect: approve")
        return self

    @model_serializer(mode="wrap")
    def _hash_stable(self, handler: SerializerFunctionWrapHandler) -> Any:
        # a rule that does not say ``mode`` / ``approval`` keeps the hash it had before
        data = handler(self)
        if isinstance(data, dict):
            if data.get("mode") == "enforce":
                del data["mode"]
            if data.get("approval", 0) is None:
                del data["approval"]
        return data


class GlobalRule(Rule):
    """A rule of the whole policy; ``tools`` narrows it to some declared tools."""

    tools: Annotated[list[ToolName], Field(min_length=1)] | None = None


class Limit(_Model):
    """A per-task limit: ``max_calls: 5`` or ``sum: amount`` with ``max: 1000``.

    ``effect`` is what happens when the call would go over: ``deny`` (default) or
    ``approve`` (a human may let it through).
    """

    id: RuleId
    max_calls: NonNegInt | None = None
    sum: ArgPathText | None = None
    max: Number | None = None
    effect: Literal["deny", "approve"] = "deny"
    reason: Text | None = None
    per: Literal["task", "principal", "all"] = "task"
    """Whose calls count: the task's (default), every task of the same principal, or
    every task in the ledger."""
    window: Duration | None = None
    """Count only calls authorized within this sliding window (``90s``, ``15m``, ``1h``,
    ``1d``); none: all of them."""

    @property
    def window_seconds(self) -> int | None:
        return seconds_of(self.window) if self.window is not None else None

    @model_serializer(mode="wrap")
    def _hash_stable(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            if data.get("per") == "task":
                del data["per"]
            if data.get("window") is None:
                data.pop("window", None)
        return data

    @property
    def decision_effect(self) -> Verdict:
        return Verdict(self.effect)

    @model_validator(mode="after")
    def _one_kind(self) -> Limit:
        if self.max_calls is not None:
            if self.sum is not None or self.max is not None:
                raise ValueError("a limit is either 'max_calls' or 'sum' with 'max', not both")
        elif self.sum is None or self.max is None:
            raise ValueError("give 'max_calls: N', or 'sum: <argument>' together with 'max: N'")
        elif self.max < 0:
            raise ValueError("'max' must not be negative")
        return self


_LATER_KEYS: Final[dict[str, Any]] = {
    "redact_result": [], "approvers": None, "operators": {}, "cedar": None,
    "after": [], "not_after": [], "mcp": None,
}
"""Keys added to format version 1 after its first release, with their unused value."""


def _without_unused_later_keys(data: Any) -> Any:
    # The policy hash is taken over the dumped document: a file that does not use a
    # key added later keeps the hash it had before the key existed (approvals
    # already given stay bound to it).
    if isinstance(data, dict):
        for key, unused in _LATER_KEYS.items():
            if key in data and data[key] == unused:
                del data[key]
    return data


class RedactField(_Model):
    """An argument field kept in the audit trail (or, under ``redact_result``, a result
    field kept in the ledger and shown to the model) only as a hash and a short preview.

    ``preview`` is how many leading characters of a string may be shown (at most a
    quarter of the value is ever shown, whatever the number). ``reveal``: ``rights``
    (the default) lets an operator with rights on the tool unseal an argument field
    on the call's page, audited; ``never``: no person may, whatever their rights.
    """

    path: RedactPathText
    preview: Annotated[StrictInt, Field(ge=0, le=MAX_REDACT_PREVIEW)] = 0
    reveal: Literal["rights", "never"] = "rights"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> Any:
        # Added after format 1's release: a file that does not use it keeps its hash.
        data = handler(self)
        if isinstance(data, dict) and data.get("reveal") == "rights":
            del data["reveal"]
        return data


class OperatorEntry(_Model):
    """An operator (a person who answers approvals) as the policy file lists them: the
    roles approval rules name."""

    roles: list[RoleName] = []


class Approvers(_Model):
    """Who may approve a tool's calls: any of ``ids``, or anyone whose ``operators``
    entry holds one of ``roles``. Neither given: anyone may. The task's own principal
    never may, unless ``self_approval`` is true."""

    roles: list[RoleName] = []
    ids: list[OperatorId] = []
    self_approval: StrictBool = False


# --- Cedar (a tool's decision handed to a Cedar policy set; see policy/cedar.py) -----

CedarArgKind = Literal["path", "url", "ip", "decimal", "email"]


class CedarSource(_Model):
    """The policy set: ``file`` (relative to the policy file) or inline ``policies``."""

    file: Annotated[StrictStr, StringConstraints(min_length=1, max_length=4096)] | None = None
    policies: Annotated[StrictStr, StringConstraints(min_length=1, max_length=1 << 20)] | None = (
        None
    )

    @model_validator(mode="after")
    def _one_source(self) -> CedarSource:
        if (self.file is None) == (self.policies is None):
            raise ValueError("give either 'file' or 'policies'")
        return self


class CedarTool(_Model):
    """A tool decided by the policy set; ``args`` says how to hand arguments to Cedar
    (a resolved path, a parsed URL record, an ``ipaddr``, a ``decimal``, an e-mail record)."""

    args: dict[ArgPathText, CedarArgKind] = {}


class ToolPolicy(_Model):
    """Everything the policy says about one tool."""

    description: Text | None = None
    effect: Effect | None = None
    idempotency: Idempotency | None = None
    redact: list[RedactField] = []
    redact_result: list[RedactField] = []
    """Fields of the tool's result stored and shown only as stand-ins (paths as ``redact``)."""
    rules: list[Rule] = []
    limits: list[Limit] = []
    approvers: Approvers | None = None
    cedar: CedarTool | None = None
    """Hand this tool's decision to the file's Cedar policy set (``cedar:``)."""
    after: list[ToolName] = []
    """Tools that must have a succeeded call earlier in the task (else deny)."""
    not_after: list[ToolName] = []
    """Tools whose authorized call earlier in the task forbids this one."""

    @model_serializer(mode="wrap")
    def _hash_stable(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _without_unused_later_keys(handler(self))


class Scope(_Model):
    """A named task scope: a task started under it may call only these tools."""

    tools: Annotated[list[ToolName], Field(min_length=1)]
    description: Text | None = None


class PolicyDocument(_Model):
    """A whole policy file."""

    version: Annotated[StrictInt, AfterValidator(_format_version)]
    description: Text | None = None
    redact: list[RedactField] = []
    redact_result: list[RedactField] = []
    scopes: dict[ScopeName, Scope] = {}
    rules: list[GlobalRule] = []
    tools: dict[ToolName, ToolPolicy]
    operators: dict[OperatorId, OperatorEntry] = {}
    approvers: Approvers | None = None
    """The default for tools without an ``approvers`` entry of their own."""
    cedar: CedarSource | None = None
    """The Cedar policy set that tools with a ``cedar:`` entry are decided by."""
    mcp: McpPolicy | None = None
    """What an MCP proxy lets through besides tool calls (``policy.mcp_rules``)."""

    @model_serializer(mode="wrap")
    def _hash_stable(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _without_unused_later_keys(handler(self))
