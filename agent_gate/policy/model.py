"""The policy file format, as strict pydantic models.

Every model forbids unknown keys, so a misspelled predicate (``regexp:``) or key
(``efect:``) is a load error at its line instead of a silently ignored guard.
Scalars are strict where YAML would otherwise coerce: ``max_calls: "5"`` or
``absent: yes`` written as a string are errors, not guesses. Values a condition
compares against must be plain JSON (no YAML dates, no NaN).

A condition is a mapping with either exactly one combinator (``all``, ``any``,
``not``) or exactly one predicate plus its subject (``arg``, ``principal``,
``task``; or ``field`` / nothing inside ``each`` / ``some``). The subject rules
depend on where a condition sits, so they are checked by the loader after this
model validated the shape.

``docs``: see ``policies/README.md`` for the format written out for people.
"""

from __future__ import annotations

import ipaddress
import math
import os
from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_serializer,
    model_validator,
)

from agent_gate.policy.mcp_rules import McpPolicy
from agent_gate.policy.netaddr import NAMED_NETWORKS, validate_domain_pattern
from agent_gate.policy.paths import parse_path
from agent_gate.policy.regex import (
    DEFAULT_MAX_INPUT,
    MAX_INPUT_LIMIT,
    compile_pattern,
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
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- scalar types ------------------------------------------------------------------


def _finite_number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _json_value(value: Any, depth: int = 0) -> Any:
    if depth > 32:
        raise ValueError("value nested too deeply")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
    if isinstance(value, list):
        return [_json_value(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("object keys must be strings")
        return {k: _json_value(v, depth + 1) for k, v in value.items()}
    raise ValueError(
        "must be a JSON value (string, number, boolean, null, list, mapping); "
        "quote dates and other YAML scalars"
    )


def _arg_path(text: str) -> str:
    parse_path(text)
    return text


def _redact_path(text: str) -> str:
    parse_path(text, wildcard=True)
    return text


_PRINCIPAL_ROOTS: Final = {"id": False, "roles": False, "attributes": True}
_TASK_ROOTS: Final = {"id": False, "name": False, "tools": False, "attributes": True}


def _subject_path(roots: dict[str, bool]) -> Any:
    def check(text: str) -> str:
        segments = parse_path(text)
        head = segments[0]
        if head not in roots:
            raise ValueError(f"must start with one of: {', '.join(roots)}")
        nested = roots[head]
        if nested and len(segments) < 2:
            raise ValueError(f"'{head}' needs a key, e.g. '{head}.team'")
        if not nested and len(segments) > 1:
            raise ValueError(f"'{head}' has no sub-keys")
        return text

    return check


def _absolute_root(text: str) -> str:
    if "\x00" in text:
        raise ValueError("path contains a NUL byte")
    if not os.path.isabs(text):
        raise ValueError("roots must be absolute paths")
    return text


def _ip_entry(text: str) -> str:
    if text in NAMED_NETWORKS:
        return text
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(
            f"must be a CIDR like '10.0.0.0/8' or one of {', '.join(sorted(NAMED_NETWORKS))}"
            f" ({exc})"
        ) from None
    return text


def _scheme(text: str) -> str:
    if not text.isascii() or not text.islower() or not text[:1].isalpha():
        raise ValueError("scheme must be lower-case ASCII, like 'https'")
    return text


Number = Annotated[int | float, BeforeValidator(_finite_number)]
JsonValue = Annotated[Any, BeforeValidator(_json_value)]
NonNegInt = Annotated[StrictInt, Field(ge=0)]
RuleId = Annotated[
    StrictStr,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"),
]
"""Rule and limit ids; no ``:`` so they never clash with built-in ``agent-gate:*`` ids."""
ToolName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
ScopeName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
ArgPathText = Annotated[StrictStr, AfterValidator(_arg_path)]
RedactPathText = Annotated[StrictStr, AfterValidator(_redact_path)]
PrincipalPath = Annotated[StrictStr, AfterValidator(_subject_path(_PRINCIPAL_ROOTS))]
TaskPath = Annotated[StrictStr, AfterValidator(_subject_path(_TASK_ROOTS))]


def _prior_path(text: str) -> str:
    if len(parse_path(text)) < 2:
        raise ValueError("name the tool and the argument: 'verify_identity.order_id'")
    return text


PriorPath = Annotated[StrictStr, AfterValidator(_prior_path)]
DomainPattern = Annotated[StrictStr, AfterValidator(validate_domain_pattern)]
IpEntry = Annotated[StrictStr, AfterValidator(_ip_entry)]
Scheme = Annotated[StrictStr, AfterValidator(_scheme)]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]
AbsoluteRoot = Annotated[StrictStr, AfterValidator(_absolute_root)]
Text = Annotated[StrictStr, StringConstraints(max_length=2000)]
RoleName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
OperatorId = Annotated[StrictStr, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]{1,200}$")]
"""Who approves: the ``--by`` of ``agent-gate approve`` (the ledger keeps 200 characters)."""


# --- predicate arguments ------------------------------------------------------------


class NumberBounds(_Model):
    """``number: {min: 0, max: 500}``: inclusive ``min``/``max``, exclusive ``gt``/``lt``."""

    min: Number | None = None
    max: Number | None = None
    gt: Number | None = None
    lt: Number | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> NumberBounds:
        if self.min is None and self.max is None and self.gt is None and self.lt is None:
            raise ValueError("give at least one of min, max, gt, lt")
        lows = [v for v in (self.min, self.gt) if v is not None]
        highs = [v for v in (self.max, self.lt) if v is not None]
        if lows and highs and max(lows) > min(highs):
            raise ValueError("lower bound is above the upper bound")
        return self


class SizeBounds(_Model):
    """``length: {max: 200}`` / ``bytes: {max: 65536}``: inclusive, non-negative."""

    min: NonNegInt | None = None
    max: NonNegInt | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> SizeBounds:
        if self.min is None and self.max is None:
            raise ValueError("give min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("min is above max")
        return self


class RegexSpec(_Model):
    """``matches: "[A-Z]{3}-[0-9]{4}"`` or the long form with caps and flags."""

    pattern: StrictStr
    max_input: Annotated[StrictInt, Field(ge=1, le=MAX_INPUT_LIMIT)] = DEFAULT_MAX_INPUT
    unicode: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"pattern": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _compiles(self) -> RegexSpec:
        compile_pattern(self.pattern, self.unicode)
        return self


class PathUnderSpec(_Model):
    """``path_under: /srv/files`` (or a list, or ``{roots: [...], allow_root: true}``)."""

    roots: Annotated[list[AbsoluteRoot], Field(min_length=1)]
    allow_root: StrictBool = False

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str | list):
            return {"roots": [data] if isinstance(data, str) else data}
        return data


class UrlSpec(_Model):
    """``url: {schemes: [https], hosts: [api.example.com, "*.example.com"], ports: [443]}``."""

    schemes: Annotated[list[Scheme], Field(min_length=1)] | None = None
    hosts: Annotated[list[DomainPattern], Field(min_length=1)] | None = None
    ports: Annotated[list[Port], Field(min_length=1)] | None = None
    ip_in: Annotated[list[IpEntry], Field(min_length=1)] | None = None
    ip_literal: StrictBool | None = None

    @model_validator(mode="after")
    def _some_check(self) -> UrlSpec:
        if all(
            v is None for v in (self.schemes, self.hosts, self.ports, self.ip_in, self.ip_literal)
        ):
            raise ValueError("give at least one of schemes, hosts, ports, ip_in, ip_literal")
        return self


# --- conditions --------------------------------------------------------------------

COMBINATORS: Final = ("all", "any", "not")
SUBJECTS: Final = ("arg", "principal", "task", "field", "prior")
PREDICATES: Final = (
    "equals",
    "in",
    "contains",
    "contains_any",
    "contains_all",
    "number",
    "length",
    "bytes",
    "matches",
    "absent",
    "each",
    "some",
    "path_under",
    "url",
    "ip_in",
    "email_domain",
    "cel",
)


class Condition(_Model):
    """One test on one value, or a combination of conditions. See the module docstring."""

    all_: Annotated[list[Condition], Field(min_length=1)] | None = Field(None, alias="all")
    any_: Annotated[list[Condition], Field(min_length=1)] | None = Field(None, alias="any")
    not_: Condition | None = Field(None, alias="not")

    arg: ArgPathText | None = None
    principal: PrincipalPath | None = None
    task: TaskPath | None = None
    field_: ArgPathText | None = Field(None, alias="field")
    prior: PriorPath | None = None
    """``<tool>.<argument path>``: that argument of the task's latest succeeded call of
    the tool (absent when there is none)."""

    equals: JsonValue = None
    in_: list[JsonValue] | None = Field(None, alias="in")
    contains: JsonValue = None
    contains_any: Annotated[list[JsonValue], Field(min_length=1)] | None = None
    contains_all: Annotated[list[JsonValue], Field(min_length=1)] | None = None
    number: NumberBounds | None = None
    length: SizeBounds | None = None
    bytes_: SizeBounds | None = Field(None, alias="bytes")
    matches: RegexSpec | None = None
    absent: StrictBool | None = None
    each: Condition | None = None
    some: Condition | None = None
    path_under: PathUnderSpec | None = None
    url: UrlSpec | None = None
    ip_in: Annotated[list[IpEntry], Field(min_length=1)] | None = None
    email_domain: Annotated[list[DomainPattern], Field(min_length=1)] | None = None
    cel: Annotated[StrictStr, StringConstraints(min_length=1, max_length=4000)] | None = None
    """A CEL expression over ``args``, ``principal``, ``task``, ``tool`` and ``usage``
    (``celexpr``); it names its values itself, so it takes no subject."""

    def _given(self, names: tuple[str, ...]) -> list[str]:
        given = {(Condition.model_fields[f].alias or f) for f in self.model_fields_set}
        return [n for n in names if n in given]

    @property
    def combinator(self) -> str | None:
        found = self._given(COMBINATORS)
        return found[0] if found else None

    @property
    def predicate(self) -> str | None:
        found = self._given(PREDICATES)
        return found[0] if found else None

    @property
    def subjects(self) -> list[str]:
        return self._given(SUBJECTS)

    def operand(self, name: str) -> Any:
        """The value of predicate or combinator ``name`` as written (alias-aware)."""
        attr = {"all": "all_", "any": "any_", "not": "not_", "in": "in_", "bytes": "bytes_"}
        return getattr(self, attr.get(name, name))

    @model_validator(mode="after")
    def _one_thing(self) -> Condition:
        combinators = self._given(COMBINATORS)
        predicates = self._given(PREDICATES)
        subjects = self._given(SUBJECTS)
        if combinators:
            others = combinators[1:] + predicates + subjects
            if others:
                raise ValueError(
                    f"'{combinators[0]}' combines conditions and cannot be mixed with "
                    f"{', '.join(repr(o) for o in others)} in the same mapping"
                )
            return self
        if len(predicates) != 1:
            found = ", ".join(predicates) if predicates else "none"
            raise ValueError(
                f"a condition needs exactly one predicate (one of: {', '.join(PREDICATES)}); "
                f"found: {found}"
            )
        if len(subjects) > 1:
            raise ValueError(f"a condition tests one subject; found: {', '.join(subjects)}")
        return self

    @model_serializer(mode="wrap")
    def _only_written(self, handler: SerializerFunctionWrapHandler) -> Any:
        # ``equals: null`` and "no equals" differ; keep exactly the keys that were written.
        data = handler(self)
        keep = set()
        for name in self.model_fields_set:
            keep.add(name)
            alias = Condition.model_fields[name].alias
            if alias:
                keep.add(alias)
        return {k: v for k, v in data.items() if k in keep}


# --- rules, limits, tools -----------------------------------------------------------


def _format_version(value: int) -> int:
    if value != FORMAT_VERSION:
        raise ValueError(f"this agent-gate reads policy format version {FORMAT_VERSION}")
    return value


_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _window_seconds(text: str) -> int:
    return int(text[:-1]) * _UNITS[text[-1]]


def _window(text: str) -> str:
    if len(text) < 2 or text[-1] not in _UNITS or not text[:-1].isdigit():
        raise ValueError("a window is a whole number of s, m, h or d: '90s', '15m', '1h', '1d'")
    if not 1 <= _window_seconds(text) <= 366 * 86400:
        raise ValueError("a window is between 1 second and 366 days")
    return text


def _listify(data: Any) -> Any:
    return [data] if isinstance(data, dict) else data


class Rule(_Model):
    """A rule of one tool: when every ``when`` condition holds, ask for ``effect``.

    ``mode: shadow`` evaluates the rule on every call and records what the decision
    would have been with it enforced, without enforcing it."""

    id: RuleId
    effect: Verdict
    when: Annotated[list[Condition], BeforeValidator(_listify)] = []
    reason: Text | None = None
    mode: Literal["enforce", "shadow"] = "enforce"
    approval: RuleApproval | None = None
    """Grants an approver may give, and a quorum (``policy.approval``): approve rules only."""

    @model_validator(mode="after")
    def _approval_on_approve(self) -> Rule:
        if self.approval is not None and self.effect is not Verdict.APPROVE:
            raise ValueError("'approval' belongs to a rule with effect: approve")
        return self

    @model_serializer(mode="wrap")
    def _hash_stable(self, handler: SerializerFunctionWrapHandler) -> Any:
        # a rule that does not say ``mode`` keeps the hash it had before the key existed
        data = handler(self)
        if isinstance(data, dict) and data.get("mode") == "enforce":
            del data["mode"]
        if isinstance(data, dict) and data.get("approval", 0) is None:
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
    window: Annotated[StrictStr, AfterValidator(_window)] | None = None
    """Count only calls authorized within this sliding window (``90s``, ``15m``, ``1h``,
    ``1d``); none: all of them."""

    @property
    def window_seconds(self) -> int | None:
        return _window_seconds(self.window) if self.window is not None else None

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


Condition.model_rebuild()
from agent_gate.policy.approval import GrantOption, RuleApproval  # noqa: E402 - it needs Condition

GrantOption.model_rebuild(_types_namespace={"Condition": Condition})
for _model in (RuleApproval, Rule, GlobalRule, ToolPolicy, PolicyDocument):
    _model.model_rebuild()
