"""``Policy``: a loaded, compiled policy file and the calls the gate makes on it.

A ``Policy`` is immutable and holds no connection, clock or cache that changes
its answers: the same policy, call, principal, scope and usage always give the
same ``PolicyDecision``. That is what lets the ledger bind an approval to
``policy.hash`` and trust that the answer it approved is the answer it gets.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from agent_gate.errors import PolicyLoadError, Problem, error_code
from agent_gate.plainjson import canonical_bytes, sha256_hex
from agent_gate.policy.approval import closed_rules, escalation_roles, role_refusal
from agent_gate.policy.cedar import CedarPolicySet
from agent_gate.policy.cedarload import load_cedar
from agent_gate.policy.conditions import EvalContext
from agent_gate.policy.deadline import DeadlineTerms, deadlines_of, earliest
from agent_gate.policy.evaluator import CompiledRule, Delegate, LimitRule, Sequencing, decide
from agent_gate.policy.loader import load_located, prior_tools
from agent_gate.policy.mcp_rules import SAMPLING_TOOL, sampling_decision
from agent_gate.policy.model import PolicyDocument
from agent_gate.policy.redaction import RedactionRule
from agent_gate.policy.values import (
    PolicyDecision,
    Principal,
    ShadowDecision,
    TaskHistory,
    TaskScope,
    ToolOverrides,
)
from agent_gate.policy.yamlsource import MAX_POLICY_BYTES, YamlDocument, format_key

__all__ = ["Policy"]


def _cedar_judge(
    cedar: CedarPolicySet, kinds: Mapping[str, str], ctx: EvalContext, arguments: Mapping[str, Any]
) -> Any:
    return cedar.judge(ctx, arguments, kinds)


class Policy:
    """A validated policy, ready to evaluate calls.

    Build one with ``Policy.load(path)`` or ``Policy.from_text(text, source=...)``;
    both raise ``PolicyLoadError`` naming file, line and key on any problem.
    """

    def __init__(
        self,
        document: PolicyDocument,
        *,
        source: str,
        source_sha256: str,
        yaml: YamlDocument | None = None,
    ) -> None:
        self._document = document
        self._yaml = yaml
        self._source = source
        self._source_sha256 = source_sha256
        dumped = document.model_dump(mode="json", by_alias=True)
        self._cedar = load_cedar(document, source, self.locate)
        if self._cedar is not None and document.cedar is not None and document.cedar.file:
            # the hash binds approvals to what decides: the set's text, not its file name
            dumped["cedar"]["text_sha256"] = sha256_hex(self._cedar.text.encode("utf-8"))
        self._hash = "sha256:" + sha256_hex(canonical_bytes(dumped, "surrogatepass"))
        global_rules = [CompiledRule.build(rule) for rule in document.rules]
        self._rules: dict[str, tuple[CompiledRule, ...]] = {}
        self._shadow_rules: dict[str, tuple[CompiledRule, ...]] = {}
        self._sequencing: dict[str, Sequencing] = {}
        """Per tool with ``mode: shadow`` rules: every rule, the shadow ones enforced."""
        self._shadow_policy: Policy | None = None
        self._limits: dict[str, tuple[LimitRule, ...]] = {}
        self._redaction: dict[str, tuple[RedactionRule, ...]] = {}
        common_redaction = tuple(RedactionRule.parse(r.path, r.preview) for r in document.redact)
        for name, tool in document.tools.items():
            own = [CompiledRule.build(rule) for rule in tool.rules]
            every = [r for r in global_rules if r.applies_to(name)] + own
            reads = frozenset(
                t for index, rule in enumerate(document.rules)
                if rule.tools is None or name in rule.tools
                for _, t in prior_tools(rule, ("rules", index))
            ) | frozenset(
                t for index, rule in enumerate(tool.rules)
                for _, t in prior_tools(rule, ("tools", name, "rules", index))
            )
            self._sequencing[name] = Sequencing(tuple(tool.after), tuple(tool.not_after), reads)
            self._rules[name] = tuple(r for r in every if not r.shadow)
            if any(r.shadow for r in every):
                self._shadow_rules[name] = tuple(every)
            self._limits[name] = tuple(LimitRule.build(name, limit) for limit in tool.limits)
            self._redaction[name] = common_redaction + tuple(
                RedactionRule.parse(r.path, r.preview) for r in tool.redact
            )
            if tool.cedar is not None and self._cedar is not None:
                self._redaction[name] += tuple(
                    RedactionRule.parse(path, 0) for path in self._cedar.redactions(name)
                )
        self._common_redaction = common_redaction
        self._common_result_redaction = tuple(
            RedactionRule.parse(r.path, r.preview) for r in document.redact_result
        )
        self._result_redaction = {
            name: self._common_result_redaction
            + tuple(RedactionRule.parse(r.path, r.preview) for r in tool.redact_result)
            for name, tool in document.tools.items()
        }
        self._delegates: dict[str, Delegate] = {}
        if self._cedar is not None:
            for name, tool in document.tools.items():
                if tool.cedar is not None:
                    kinds = dict(tool.cedar.args)
                    self._delegates[name] = functools.partial(_cedar_judge, self._cedar, kinds)
        self._deadlines = deadlines_of(document)
        self._scopes: Mapping[str, frozenset[str]] = MappingProxyType(
            {name: frozenset(scope.tools) for name, scope in document.scopes.items()}
        )

    # --- construction ------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Policy:
        """Read and validate a policy file."""
        source = os.fspath(path)
        try:
            with open(source, "rb") as handle:
                raw = handle.read(MAX_POLICY_BYTES + 1)
        except OSError as exc:
            reason = exc.strerror or error_code(exc)
            raise PolicyLoadError(
                [Problem(source, None, None, "", f"cannot read: {reason}")]
            ) from None
        return cls.from_text(raw, source=source)

    @classmethod
    def from_text(cls, text: str | bytes, *, source: str = "<policy>") -> Policy:
        """Validate policy text; ``source`` is the name used in error messages."""
        raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
        document, yaml = load_located(text, source)
        return cls(document, source=source, source_sha256=sha256_hex(raw), yaml=yaml)

    # --- identity ----------------------------------------------------------------

    @property
    def hash(self) -> str:
        """``sha256:<hex>`` of the canonical policy (survives reformatting, not edits)."""
        return self._hash

    @property
    def source(self) -> str:
        return self._source

    @property
    def source_sha256(self) -> str:
        """SHA-256 of the exact bytes the policy was read from."""
        return self._source_sha256

    @property
    def document(self) -> PolicyDocument:
        return self._document

    @property
    def cedar(self) -> CedarPolicySet | None:
        """The Cedar policy set the file names (``cedar:``), parsed once at load."""
        return self._cedar

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(self._document.tools)

    @property
    def scopes(self) -> Mapping[str, frozenset[str]]:
        return self._scopes

    def locate(self, loc: tuple[str | int, ...], message: str) -> Problem:
        """A problem at ``loc`` (``("tools", "refund", "rules", 0)``) with its line, when the
        policy was read from text (built from a document: no line)."""
        if self._yaml is not None:
            return self._yaml.problem(loc, message)
        return Problem(self._source, None, None, format_key(loc), message)

    def __repr__(self) -> str:
        return f"Policy(source={self._source!r}, hash={self._hash[:19]}…)"

    # --- what the gate calls -------------------------------------------------------

    def evaluate(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        principal: Principal | None = None,
        task_scope: TaskScope | None = None,
        usage: Mapping[str, int | float | Decimal] | None = None,
        history: TaskHistory | None = None,
    ) -> PolicyDecision:
        """Decide one call. Never raises for anything about the call itself.

        ``history`` is what the task's earlier calls tell the tool's sequence rules
        (``after``, ``not_after``, ``prior:``; ``history_tools(tool)`` names the tools it
        must cover); a tool with such rules and no history is denied.

        ``usage`` maps each counter key of ``limits(tool)`` to what the task has
        used so far; the ledger computes it in the transaction that authorizes
        the call. A limit whose counter is missing from ``usage`` denies.
        """
        decision = self._decide(tool, arguments, self._rules.get(tool), principal, task_scope,
                                usage, history)
        would: PolicyDecision | None = None
        if self._shadow_policy is not None:
            would = self._shadow_policy.evaluate(
                tool, arguments, principal=principal, task_scope=task_scope, usage=usage,
                history=history,
            )
            would = dataclasses.replace(would, shadow=None)
        elif tool in self._shadow_rules:
            would = self._decide(tool, arguments, self._shadow_rules[tool], principal,
                                 task_scope, usage, history)
        if would is None:
            return decision
        shadow = ShadowDecision(
            effect=would.effect,
            rule_ids=would.rule_ids,
            policy_hash=would.policy_hash,
            differs=would.effect is not decision.effect,
        )
        return dataclasses.replace(decision, shadow=shadow)

    def _decide(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        rules: tuple[CompiledRule, ...] | None,
        principal: Principal | None,
        task_scope: TaskScope | None,
        usage: Mapping[str, int | float | Decimal] | None,
        history: TaskHistory | None,
    ) -> PolicyDecision:
        if tool == SAMPLING_TOOL:  # an MCP sampling request: the mcp section's rules judge it
            return sampling_decision(self._document.mcp, arguments, self._hash)
        return decide(
            tool=tool,
            arguments=arguments,
            rules=rules,
            limits=self._limits.get(tool, ()),
            scopes=self._scopes,
            principal=principal,
            task_scope=task_scope,
            usage=usage,
            policy_hash=self._hash,
            delegate=self._delegates.get(tool),
            sequencing=self._sequencing.get(tool),
            history=history,
        )

    def history_tools(self, tool: str) -> frozenset[str]:
        """The tools whose earlier calls in the task ``tool``'s decision reads (its
        ``after``, ``not_after`` and ``prior:`` subjects): pass their ``TaskHistory``."""
        found = self._sequencing.get(tool)
        own = found.tools if found is not None else frozenset()
        if self._shadow_policy is not None:
            own |= self._shadow_policy.history_tools(tool)
        return own

    def with_shadow(self, shadow: Policy | str | os.PathLike[str] | None) -> Policy:
        """This policy, enforced, with ``shadow`` (a policy or its file) evaluated beside
        it on every call: its decision is recorded as the would-be one, never enforced.
        The hash stays this policy's: approvals are bound to what is enforced."""
        twin = copy.copy(self)
        twin._shadow_policy = (
            shadow if isinstance(shadow, Policy) or shadow is None else Policy.load(shadow)
        )
        return twin

    @property
    def shadow_policy(self) -> Policy | None:
        """The policy evaluated in shadow beside this one (``with_shadow``), if any."""
        return self._shadow_policy

    def approval_refusal(self, tool: str, approver: str, principal: str | None,
                         rule_ids: Sequence[str] = ()) -> str | None:
        """Why ``approver`` may not approve (or edit then approve) a call of ``tool``
        that ``rule_ids`` sent to a person, in a task acting for ``principal`` (an id),
        or None when they may: the one judgement the gate makes when an approval is
        given and used, and every front end makes before offering one.

        The tool's ``approvers`` entry, else the file's, decides; roles come from the
        file's ``operators``, never from the approver's own word. The task's own
        principal approving its own call is refused unless ``self_approval`` is set.
        Then each of those rules whose ``approval: approvers:`` names roles wants one of
        them (``approval.role_refusal``).
        """
        own = self._document.tools.get(tool)
        rule = own.approvers if own is not None and own.approvers is not None else None
        rule = rule or self._document.approvers
        if principal and approver == principal and not (rule and rule.self_approval):
            return (
                f"{approver!r} is the principal the task acts for and may not approve "
                "its own calls (approvers.self_approval is not set)"
            )
        roles = self.roles_of(approver)
        if rule is not None and (rule.roles or rule.ids) and approver not in rule.ids \
                and not set(roles) & set(rule.roles):
            wanted = [f"role {r!r}" for r in rule.roles] + [f"{i!r}" for i in rule.ids]
            return f"{approver!r} may not approve {tool!r} calls (approvers: {', '.join(wanted)})"
        return role_refusal(self._document, tool, rule_ids, approver, roles)

    def denial_refusal(self, tool: str, approver: str, rule_ids: Sequence[str]) -> str | None:
        """Why ``approver`` may not deny a call of ``tool`` that ``rule_ids`` sent to a
        person (None: they may): only where a rule counts denials like approvals
        (``deny: quorum``) and names roles they hold none of (``approval.role_refusal``)."""
        return role_refusal(self._document, tool, rule_ids, approver,
                            self.roles_of(approver), denial=True)

    def closed_rules(self, operator: str) -> tuple[tuple[tuple[str, ...] | None, str], ...]:
        """The rules a call sent by which ``operator`` may neither approve nor deny
        (``approval.closed_rules``): what "the calls I may answer" leaves out."""
        return closed_rules(self._document, self.roles_of(operator), denial=True)

    def deadline(self, rule_ids: Iterable[str]) -> DeadlineTerms | None:
        """The deadline a call these rules sent to a person is armed with (the
        earliest of their ``approval:`` blocks), or None: it waits as long as it takes."""
        return earliest(self._deadlines, rule_ids) if self._deadlines else None

    def holds_role(self, operator: str, role: str) -> bool:
        """Whether the file's ``operators:`` gives ``operator`` the ``role`` (who may
        answer a call escalated to it)."""
        return role in self.roles_of(operator)

    def escalation_roles(self) -> tuple[str, ...]:
        """Every role a rule may escalate a call to, sorted (``approval.escalation_roles``):
        what a notification route's ``roles:`` may name."""
        return escalation_roles(self._document)

    def roles_of(self, operator: str) -> tuple[str, ...]:
        """Every role the file's ``operators:`` gives ``operator``: what a list of the
        calls they may answer filters escalated calls by (``InboxQuery.roles``)."""
        entry = self._document.operators.get(operator)
        return tuple(entry.roles) if entry is not None else ()

    def tool_overrides(self, name: str) -> ToolOverrides:
        """The effect / idempotency classes the policy sets for ``name`` (or none)."""
        tool = self._document.tools.get(name)
        if tool is None:
            return ToolOverrides(tool=name)
        return ToolOverrides(tool=name, effect=tool.effect, idempotency=tool.idempotency)

    def limits(self, tool: str) -> tuple[LimitRule, ...]:
        """The per-task limits of ``tool``; their ``key``s are what ``usage`` must hold."""
        return self._limits.get(tool, ())

    def redaction_rules(self, tool: str) -> tuple[RedactionRule, ...]:
        """Policy-wide redactions plus the tool's own (policy-wide only, if undeclared)."""
        return self._redaction.get(tool, self._common_redaction)

    def result_redaction_rules(self, tool: str) -> tuple[RedactionRule, ...]:
        """``redact_result`` paths for ``tool``'s results: policy-wide plus the tool's own."""
        return self._result_redaction.get(tool, self._common_result_redaction)
