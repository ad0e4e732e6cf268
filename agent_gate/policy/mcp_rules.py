"""The policy file's ``mcp`` section: what an MCP proxy lets through besides tool calls.

```yaml
mcp:
  resources:                 # resources/read, resources/subscribe, resources/list
    - {id: docs, effect: allow, uri: "docs://**"}
    - {id: keys, effect: deny, uri: "secret://*", reason: Keys stay on the server.}
    - {id: mail, effect: redact, uri: "mail://*"}   # read, shown only as a stand-in
  prompts:                   # prompts/get, prompts/list
    - {id: prompts, effect: allow, name: "*"}
  sampling:                  # sampling/createMessage the upstream asks of the client
    - {id: summaries, effect: allow, tool: summarize}
    - {id: ask-first, effect: approve, tool: "*"}     # a person answers first
```

Rules are tried in order; the first whose pattern matches decides. Patterns are
shell-style (``fnmatch``: ``*`` matches any run of characters, ``/`` included).
Nothing matched: a resource or a sampling request is denied, a prompt allowed (a
prompt is text the server wrote; the resources it embeds are judged as resources).
A policy file without the section denies every resource and sampling request.

A sampling request is recorded in the ledger as a call of its own, of the reserved
tool ``SAMPLING_TOOL`` (``integrations.mcp.sampling``), and the policy decides it
like any call (``Policy.evaluate`` asks ``sampling_decision``): ``approve`` holds it
for a person (``agent-gate approve``/``deny``, the inbox), the approval bound to the
hash of the request as recorded, which is what that person is shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StrictStr, StringConstraints, model_validator

from agent_gate.policy.scalars import STRICT, RuleId
from agent_gate.policy.values import PolicyDecision, Verdict

__all__ = ["DEFAULT_RULE", "SAMPLING_TOOL", "McpDecision", "McpPolicy", "McpVerdict",
           "judge_prompt", "judge_resource", "judge_sampling", "sampling_decision"]

DEFAULT_RULE = "mcp-default"
"""The rule id of a decision no rule of the section made."""

SAMPLING_TOOL = "mcp:sampling/createMessage"
"""The tool name a sampling request is recorded under in the ledger: reserved (an
upstream tool of that name is refused), judged by the ``sampling`` rules only."""

_Pattern = Annotated[StrictStr, StringConstraints(min_length=1, max_length=512)]
_Reason = Annotated[StrictStr, StringConstraints(max_length=1000)]


class McpVerdict(StrEnum):
    """What the proxy does with an MCP request besides a tool call."""

    ALLOW = "allow"
    DENY = "deny"
    REDACT = "redact"
    """A resource read whose contents the client sees only as a stand-in."""
    APPROVE = "approve"
    """A sampling request a person answers before it is put to the client."""


class _Model(BaseModel):
    model_config = STRICT


class ResourceRule(_Model):
    id: RuleId
    effect: Literal["allow", "deny", "redact"]
    uri: _Pattern
    reason: _Reason | None = None


class PromptRule(_Model):
    id: RuleId
    effect: Literal["allow", "deny"]
    name: _Pattern
    reason: _Reason | None = None


class SamplingRule(_Model):
    id: RuleId
    effect: Literal["allow", "deny", "approve"]
    tool: Annotated[StrictStr, StringConstraints(max_length=512)] = "*"
    """The tool whose call the upstream was serving when it asked; ``""`` matches only
    a request that came outside any tool call (``"*"`` matches those too)."""
    reason: _Reason | None = None


class McpPolicy(_Model):
    """The ``mcp`` section of a policy file."""

    resources: list[ResourceRule] = Field(default_factory=list)
    prompts: list[PromptRule] = Field(default_factory=list)
    sampling: list[SamplingRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> McpPolicy:
        seen: set[str] = set()
        for rule in (*self.resources, *self.prompts, *self.sampling):
            if rule.id in seen:
                raise ValueError(f"duplicate rule id {rule.id!r} in the mcp section")
            seen.add(rule.id)
        return self


@dataclass(frozen=True, slots=True)
class McpDecision:
    """One judgement: the verdict, the rule that made it, and why."""

    verdict: McpVerdict
    rule_id: str
    reason: str

    @property
    def allowed(self) -> bool:
        """Not denied: allowed, redacted, or (sampling) once a person approves it."""
        return self.verdict is not McpVerdict.DENY


def judge_resource(policy: McpPolicy | None, uri: str) -> McpDecision:
    """The first resource rule whose ``uri`` pattern matches; else denied."""
    for rule in policy.resources if policy is not None else ():
        if fnmatchcase(uri, rule.uri):
            return McpDecision(McpVerdict(rule.effect), rule.id, rule.reason or "")
    return McpDecision(McpVerdict.DENY, DEFAULT_RULE,
                       "no resources rule of the policy allows this URI")


def judge_prompt(policy: McpPolicy | None, name: str) -> McpDecision:
    """The first prompt rule whose ``name`` pattern matches; else allowed."""
    for rule in policy.prompts if policy is not None else ():
        if fnmatchcase(name, rule.name):
            return McpDecision(McpVerdict(rule.effect), rule.id, rule.reason or "")
    return McpDecision(McpVerdict.ALLOW, DEFAULT_RULE, "prompts are allowed by default")


def judge_sampling(policy: McpPolicy | None, tool: str | None) -> McpDecision:
    """The first sampling rule whose ``tool`` pattern matches the tool being served
    (``""`` when the request came outside any tool call); else denied."""
    for rule in policy.sampling if policy is not None else ():
        if fnmatchcase(tool or "", rule.tool):
            return McpDecision(McpVerdict(rule.effect), rule.id, rule.reason or "")
    return McpDecision(McpVerdict.DENY, DEFAULT_RULE,
                       "no sampling rule of the policy allows this request")


def sampling_decision(
    policy: McpPolicy | None, arguments: Mapping[str, Any], policy_hash: str
) -> PolicyDecision:
    """The policy's decision on a recorded sampling request (a call of ``SAMPLING_TOOL``
    whose ``tool`` argument names the tool being served, ``""`` outside any): what
    ``judge_sampling`` says, as the gate's decision."""
    tool = arguments.get("tool")
    judged = judge_sampling(policy, tool if isinstance(tool, str) else None)
    verdict = {McpVerdict.ALLOW: Verdict.ALLOW,
               McpVerdict.APPROVE: Verdict.APPROVE}.get(judged.verdict, Verdict.DENY)
    reason = judged.reason or f"sampling rule {judged.rule_id} ({judged.verdict.value})"
    return PolicyDecision(effect=verdict, tool=SAMPLING_TOOL, rule_ids=(judged.rule_id,),
                          reasons=(reason,), policy_hash=policy_hash)
