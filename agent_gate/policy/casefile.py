"""The file format of ``agent-gate policy test``: cases a policy must decide as written.

A team changes a policy the way it changes code: with tests in CI. A case names one
call (tool, arguments), who it is for (principal, task scope), what the task already
did (earlier calls and counters), and what the policy must answer (the verdict, the
ids that decide it: rule and limit ids or a built-in ``agent-gate:*`` code, and
phrases the reasons must contain). The file is read like a policy file (same YAML
rules: no duplicate keys, aliases or coercions) so every problem names its line.

    version: 1
    defaults:
      principal: {id: u1, roles: [support]}
    schemas:                     # optional: tool -> JSON Schema, to find dead rules
      refund: {type: object, properties: {amount: {type: number}}}
    cases:
      - name: small refunds run on their own
        tool: refund
        args: {order_id: ORD-123456, amount: 40}
        expect: {decision: allow, rule_ids: [refund-small]}
      - name: the sixth refund of a task needs a person
        tool: refund
        args: {order_id: ORD-123456, amount: 10}
        prior:
          - {tool: refund, args: {order_id: ORD-123456, amount: 10}}
        usage: {refund/calls: 4}
        expect: {decision: approve, rule_ids: [refund-count-per-task]}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
)

from agent_gate.errors import PolicyLoadError, Problem
from agent_gate.policy.scalars import JsonValue, Number, RoleName, ScopeName, Text, ToolName
from agent_gate.policy.values import Principal, TaskScope, Verdict
from agent_gate.policy.yamlsource import YamlDocument, parse_yaml

__all__ = ["Case", "CaseFile", "Expect", "load_cases", "schemas_of"]

CASES_FORMAT_VERSION: Final = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _cases_version(value: int) -> int:
    if value != CASES_FORMAT_VERSION:
        raise ValueError(f"this agent-gate reads test file version {CASES_FORMAT_VERSION}")
    return value


class CasePrincipal(_Model):
    """Who the call is for, as ``Principal``."""

    id: StrictStr | None = None
    roles: list[RoleName] = []
    attributes: dict[str, JsonValue] = {}

    def build(self) -> Principal:
        return Principal(id=self.id, roles=frozenset(self.roles), attributes=self.attributes)


class CaseScope(_Model):
    """The task's scope, as ``TaskScope`` (``task`` is the task id conditions see)."""

    task: StrictStr | None = None
    name: ScopeName | None = None
    tools: list[ToolName] | None = None
    attributes: dict[str, JsonValue] = {}

    def build(self) -> TaskScope:
        tools = frozenset(self.tools) if self.tools is not None else None
        return TaskScope(
            task_id=self.task, name=self.name, tools=tools, attributes=self.attributes
        )


class PriorCall(_Model):
    """A call the task already made, authorized and succeeded: it counts toward the
    limits, and sequence rules (``after``, ``not_after``, ``prior:``) see it."""

    tool: ToolName
    args: dict[str, JsonValue] = {}


class Expect(_Model):
    """What the policy must answer. ``rule_ids`` (any order) and ``limits_exceeded``
    are compared exactly when given; each of ``reasons`` must appear in some reason."""

    decision: Verdict
    rule_ids: list[StrictStr] | None = None
    reasons: list[Annotated[StrictStr, Field(min_length=1)]] = []
    limits_exceeded: list[StrictStr] | None = None
    shadow: Verdict | None = None
    """The would-be decision of the policy's ``mode: shadow`` rules (never enforced)."""


class Case(_Model):
    name: Text
    tool: ToolName
    args: JsonValue = Field(default_factory=dict)
    principal: CasePrincipal | None = None
    scope: CaseScope | None = None
    prior: list[PriorCall] = []
    usage: dict[StrictStr, Number] = {}
    expect: Expect


class Defaults(_Model):
    principal: CasePrincipal | None = None
    scope: CaseScope | None = None


def _schema_map(value: dict[str, Any]) -> dict[str, Any]:
    for name, schema in value.items():
        if not isinstance(schema, dict | bool):
            raise ValueError(f"the schema of {name!r} must be a JSON Schema object")
    return value


class CaseFile(_Model):
    version: Annotated[StrictInt, AfterValidator(_cases_version)]
    description: Text | None = None
    defaults: Defaults = Defaults()
    schemas: Annotated[dict[ToolName, JsonValue], AfterValidator(_schema_map)] = {}
    cases: Annotated[list[Case], Field(min_length=1)]


@dataclass(frozen=True, slots=True)
class LoadedCases:
    """A validated test file and its YAML, so a case's line can be named."""

    cases: CaseFile
    yaml: YamlDocument

    @property
    def source(self) -> str:
        return self.yaml.source

    def line_of(self, index: int) -> int | None:
        return self.yaml.problem(("cases", index), "").line


def load_cases(raw: bytes | str, source: str) -> LoadedCases:
    """Parse and validate a test file; raises ``PolicyLoadError`` with located problems."""
    doc = parse_yaml(raw, source)
    try:
        cases = CaseFile.model_validate(doc.data)
    except ValidationError as exc:
        problems: list[Problem] = []
        for error in exc.errors(include_url=False, include_input=False):
            message = str(error["msg"]).removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = "unknown key"
            elif error["type"] == "missing":
                message = "required key is missing"
            problems.append(doc.problem(tuple(error["loc"]), message))
        problems.sort(key=lambda p: (p.line or 0, p.column or 0))
        raise PolicyLoadError(problems) from None
    return LoadedCases(cases=cases, yaml=doc)


_SCHEMA_KEYS: Final = ("parameters", "input_schema", "inputSchema", "parametersJsonSchema")


def _definition(item: Mapping[str, Any]) -> tuple[str, Any] | None:
    inner = item.get("function")
    if isinstance(inner, Mapping):
        item = inner
    name = item.get("name")
    if not isinstance(name, str):
        return None
    for key in _SCHEMA_KEYS:
        if key in item:
            return name, item[key]
    return None


def schemas_of(data: Any) -> dict[str, Any]:
    """Tool schemas from what a team already has: a mapping tool -> JSON Schema, or a
    tool list in any provider's shape (OpenAI Responses/Chat, Anthropic, MCP, Gemini's
    ``functionDeclarations``), as ``ToolRegistry.definitions`` writes them."""
    if isinstance(data, Mapping) and not any(k in data for k in ("name", "tools")):
        return {str(k): v for k, v in data.items()}
    if isinstance(data, Mapping) and isinstance(data.get("tools"), list):
        data = data["tools"]
    out: dict[str, Any] = {}
    if isinstance(data, list):
        for item in data:
            if not isinstance(item, Mapping):
                continue
            declarations = item.get("functionDeclarations")
            for entry in declarations if isinstance(declarations, list) else [item]:
                found = _definition(entry) if isinstance(entry, Mapping) else None
                if found is not None:
                    out[found[0]] = found[1]
    if not out:
        raise ValueError(
            "no tool schemas found: give a mapping tool -> JSON Schema or a list of tool "
            "definitions (OpenAI, Anthropic, MCP or Gemini shape)"
        )
    return out
