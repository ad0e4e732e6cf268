"""Cedar as a policy source: a tool's decision handed to a Cedar policy set.

Teams that standardised on Cedar (AWS AgentCore, Docker's MCP policies, ContextForge,
ToolHive) keep writing Cedar. A policy file names the set (``cedar: {file: ...}`` or
inline ``policies:``) and the tools it decides (``tools.<name>.cedar``); agent-gate
builds each request from the same judged values its own conditions see, asks Cedar
(``cedarpy``, the Rust implementation), and maps the answer onto its own verdicts.
Approvals, per-task limits and redaction stay agent-gate's.

The request (namespace ``AgentGate``):

* principal ``AgentGate::Principal::"<id>"`` with the principal's attributes, a member
  of ``AgentGate::Role::"<role>"`` for each role (``principal in AgentGate::Role::"finance"``);
* action ``AgentGate::Action::"<tool>"``;
* resource ``AgentGate::Task::"<task id>"`` with ``name`` and ``attributes``;
* context ``{args, usage}``: ``args`` are the judged arguments, each one the tool's
  ``cedar.args`` names handed over in its judged form: ``path`` the one resolved path,
  ``url`` a record ``{scheme, host, port, ip?}``, ``ip`` an ``ipaddr``, ``decimal`` a
  ``decimal`` (at most 4 places, Cedar's own limit), ``email`` ``{address, domain}``.
  Other numbers arrive as ``Long`` (integers) or ``decimal``; ``null`` is left out
  (Cedar has none); ``usage`` holds the task's counters as ``decimal``.

The answer: a ``permit`` that holds allows, or asks for a person when annotated
``@advice("approve")``; a ``forbid`` that holds denies; nothing permitting denies
(``agent-gate:cedar-default-deny``). ``@id("...")`` names a policy in decisions as
``cedar:<id>`` (else ``cedar:policy0``...), ``@reason("...")`` is its sentence, and
``@redact("field")`` adds an argument field to the redaction of the tools the
policy's action scope names. As everywhere in agent-gate, what cannot be judged
never grants: a ``forbid`` or approving ``permit`` whose evaluation errors denies,
and an argument that cannot be handed over (a path that cannot be resolved, a
decimal with 5 places) denies (``agent-gate:cedar-arguments``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from agent_gate.errors import UnjudgeablePath
from agent_gate.policy.conditions import EvalContext
from agent_gate.policy.netaddr import (
    AddressError,
    IPAddress,
    email_domain,
    equivalent_addresses,
    normalize_host,
    parse_url,
)
from agent_gate.policy.paths import MISSING, ArgPath, display, parse_path, resolve
from agent_gate.policy.values import RuleTrace, Truth, Verdict

__all__ = [
    "BUILTIN_CEDAR_ARGUMENTS",
    "BUILTIN_CEDAR_DEFAULT_DENY",
    "NAMESPACE",
    "CedarPolicySet",
    "CedarUnavailable",
]

NAMESPACE: Final = "AgentGate"
BUILTIN_CEDAR_DEFAULT_DENY: Final = "agent-gate:cedar-default-deny"
BUILTIN_CEDAR_ARGUMENTS: Final = "agent-gate:cedar-arguments"
_LONG: Final = 1 << 63
_DECIMAL_MAX: Final = Decimal("922337203685477.5807")
_ERROR_POLICY: Final = re.compile(r"policy `([^`]+)`")


class CedarUnavailable(ImportError):
    """``cedarpy`` is not installed."""


class _Unjudgeable(ValueError):
    """A value cannot be handed to Cedar; the message names the argument, not the value."""


def _cedarpy() -> Any:
    try:
        import cedarpy
    except ImportError:
        raise CedarUnavailable(
            "cedar: policy sets need cedarpy: pip install 'agent-gate[cedar]'"
        ) from None
    return cedarpy


# --- values --------------------------------------------------------------------------


def _decimal(value: Any, what: str) -> dict[str, Any]:
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise _Unjudgeable(f"{what} is not a number")
    try:
        number = Decimal(value) if isinstance(value, str | int | Decimal) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise _Unjudgeable(f"{what} is not a number") from None
    if not number.is_finite() or abs(number) > _DECIMAL_MAX:
        raise _Unjudgeable(f"{what} is out of Cedar's decimal range")
    exponent = number.normalize().as_tuple().exponent
    places = max(1, -exponent) if isinstance(exponent, int) else 1
    if places > 4:
        raise _Unjudgeable(f"{what} has more than 4 decimal places (Cedar's decimal)")
    return {"__extn": {"fn": "decimal", "arg": f"{number:.{places}f}"}}


def _value(value: Any, what: str, depth: int = 0) -> Any:
    """A JSON value as Cedar's JSON value; ``MISSING`` for ``null`` (Cedar has none)."""
    if depth > 32:
        raise _Unjudgeable(f"{what} is nested too deeply")
    if value is None:
        return MISSING
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        if not -_LONG <= value < _LONG:
            raise _Unjudgeable(f"{what} is out of Cedar's Long range")
        return value
    if isinstance(value, float):
        return _decimal(value, what)
    if isinstance(value, list):
        items = [_value(v, f"{what}[]", depth + 1) for v in value]
        return [v for v in items if v is not MISSING]
    if isinstance(value, Mapping):
        record = {str(k): _value(v, f"{what}.{k}", depth + 1) for k, v in value.items()}
        return {k: v for k, v in record.items() if v is not MISSING}
    raise _Unjudgeable(f"{what} is not a JSON value")


def _ipaddr(address: IPAddress) -> dict[str, Any]:
    """An address as Cedar's ``ipaddr``: an IPv6 address that carries an IPv4 one
    (mapped, NAT64, 6to4, Teredo) is the IPv4 address it reaches, so Cedar's
    ``isInRange(ip("10.0.0.0/8"))`` judges the destination, as ``ip_in`` does."""
    found = equivalent_addresses(address)
    return {"__extn": {"fn": "ip", "arg": str(found[1] if len(found) > 1 else address)}}


def _url(text: Any, what: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise _Unjudgeable(f"{what} is not a string")
    try:
        url = parse_url(text)
    except AddressError as exc:
        raise _Unjudgeable(f"{what}: {exc}") from None
    record: dict[str, Any] = {"scheme": url.scheme, "host": url.host}
    if url.effective_port is not None:
        record["port"] = url.effective_port
    if url.address is not None:
        try:
            record["ip"] = _ipaddr(url.address)
        except AddressError as exc:
            raise _Unjudgeable(f"{what}: {exc}") from None
    return record


def _ip(text: Any, what: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise _Unjudgeable(f"{what} is not a string")
    try:
        _name, address = normalize_host(text)
        if address is None:
            raise _Unjudgeable(f"{what} is a host name, not an IP address")
        return _ipaddr(address)
    except AddressError as exc:
        raise _Unjudgeable(f"{what}: {exc}") from None


def _email(text: Any, what: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise _Unjudgeable(f"{what} is not a string")
    try:
        return {"address": text, "domain": email_domain(text)}
    except AddressError as exc:
        raise _Unjudgeable(f"{what}: {exc}") from None


def _set_at(target: dict[str, Any], path: ArgPath, value: Any) -> None:
    for segment in path[:-1]:
        child = target.get(segment)
        if not isinstance(child, dict):
            return  # the shape differs from the declaration: the value stays as it was
        target = child
    target[path[-1]] = value


def cedar_args(
    ctx: EvalContext, arguments: Mapping[str, Any], kinds: Mapping[str, str]
) -> dict[str, Any]:
    """The arguments as ``context.args``: each declared one in its judged form."""
    out = _value(dict(arguments), "args")
    for text, kind in kinds.items():
        path = parse_path(text)
        raw = resolve(dict(arguments), path)
        if raw is MISSING or raw is None:
            continue
        what = f"argument '{display(path)}'"
        if kind == "path":
            try:
                judged: Any = ctx.path_value(what, raw)
            except UnjudgeablePath as exc:
                raise _Unjudgeable(f"{what}: {exc}") from None
        elif kind == "url":
            judged = _url(raw, what)
        elif kind == "ip":
            judged = _ip(raw, what)
        elif kind == "email":
            judged = _email(raw, what)
        else:
            judged = _decimal(raw, what)
        _set_at(out, path, judged)
    return out


# --- the policy set --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Meta:
    """What agent-gate reads off one Cedar policy: its name, effect and annotations."""

    name: str
    forbid: bool
    approve: bool
    reason: str | None
    redact: tuple[str, ...]
    actions: frozenset[str] | None  # None: every action


def _actions(scope: Mapping[str, Any]) -> frozenset[str] | None:
    op = scope.get("op")
    if op == "==" and isinstance(scope.get("entity"), Mapping):
        return frozenset({str(scope["entity"].get("id"))})
    if op == "in" and isinstance(scope.get("entities"), list):
        return frozenset(str(e.get("id")) for e in scope["entities"] if isinstance(e, Mapping))
    return None


_DECIMAL_LITERAL: Final = re.compile(r"-?([0-9]+)\.([0-9]+)")


def _decimal_literal_problem(node: Any, depth: int = 0) -> str | None:
    """What is wrong with the first ``decimal("...")`` literal in a policy's EST that
    Cedar cannot construct (None: every one is fine). Cedar parses such a policy and
    only fails when it evaluates it: a ``forbid`` then denies every call it covers
    and a ``permit`` never grants, with nothing said before a call is judged."""
    if depth > 200:
        return None
    if isinstance(node, Mapping):
        arguments = node.get("decimal")
        if isinstance(arguments, list) and len(arguments) == 1 and isinstance(
            arguments[0], Mapping
        ) and isinstance(arguments[0].get("Value"), str):
            text = arguments[0]["Value"]
            found = _DECIMAL_LITERAL.fullmatch(text)
            if found is None:
                return f"decimal({text!r}) is not a Cedar decimal (digits, a dot, 1 to 4 places)"
            if len(found.group(2)) > 4:
                return (f"decimal({text!r}) has more than 4 decimal places, Cedar's limit; "
                        "Cedar cannot evaluate the policy, which would deny at every call")
            if not -_DECIMAL_MAX - Decimal("0.0001") <= Decimal(text) <= _DECIMAL_MAX:
                return f"decimal({text!r}) is out of Cedar's decimal range"
        children: Any = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        problem = _decimal_literal_problem(child, depth + 1)
        if problem is not None:
            return problem
    return None


@dataclass(frozen=True, slots=True)
class CedarPolicySet:
    """A parsed Cedar policy set and what its annotations tell agent-gate."""

    text: str
    handle: Any
    meta: Mapping[str, _Meta]

    @classmethod
    def parse(cls, text: str) -> CedarPolicySet:
        """Raises ``ValueError`` (Cedar's parse error) or ``CedarUnavailable``."""
        cedarpy = _cedarpy()
        handle = cedarpy.PolicySet.from_str(text)
        est = json.loads(cedarpy.policies_to_json_str(text))
        meta: dict[str, _Meta] = {}
        names: set[str] = set()
        for key, policy in (est.get("staticPolicies") or {}).items():
            notes = policy.get("annotations") or {}
            name = str(notes.get("id") or key)
            if name in names:
                raise ValueError(f"two policies are named @id({name!r})")
            names.add(name)
            literal = _decimal_literal_problem(policy.get("conditions"))
            if literal is not None:
                raise ValueError(f"{name}: {literal}")
            advice = notes.get("advice")
            if advice not in (None, "approve"):
                raise ValueError(f"{name}: @advice can only be \"approve\", not {advice!r}")
            if advice and policy.get("effect") != "permit":
                raise ValueError(f"{name}: @advice(\"approve\") belongs on a permit")
            redact = tuple(p.strip() for p in str(notes.get("redact") or "").split(",") if p)
            for field in redact:
                parse_path(field, wildcard=True)
            meta[key] = _Meta(
                name=f"cedar:{name}",
                forbid=policy.get("effect") == "forbid",
                approve=advice == "approve",
                reason=notes.get("reason"),
                redact=redact,
                actions=_actions(policy.get("action") or {}),
            )
        if est.get("templates"):
            raise ValueError("Cedar templates are not supported: link them into policies")
        return cls(text=text, handle=handle, meta=meta)

    def redactions(self, tool: str) -> tuple[str, ...]:
        """``@redact`` fields of every policy whose action scope covers ``tool``."""
        return tuple(
            field
            for meta in self.meta.values()
            if meta.actions is None or tool in meta.actions
            for field in meta.redact
        )

    def judge(
        self, ctx: EvalContext, arguments: Mapping[str, Any], kinds: Mapping[str, str]
    ) -> list[RuleTrace]:
        """Cedar's answer for one call, as traces the evaluator ranks like rules."""
        try:
            request, entities = _request(ctx, arguments, kinds)
        except _Unjudgeable as exc:
            detail = f"cannot hand the call to Cedar ({exc})"
            return [RuleTrace(BUILTIN_CEDAR_ARGUMENTS, Verdict.DENY, Truth.ERROR, detail)]
        result = _cedarpy().is_authorized(request, self.handle, entities)
        traces: list[RuleTrace] = []
        for key in result.diagnostics.reasons:
            meta = self.meta.get(key)
            if meta is None:
                continue
            effect = (
                Verdict.DENY if meta.forbid else Verdict.APPROVE if meta.approve else Verdict.ALLOW
            )
            word = "forbid" if meta.forbid else "permit"
            because = f"{meta.reason} " if meta.reason else ""
            traces.append(
                RuleTrace(meta.name, effect, Truth.TRUE, f"{because}[Cedar {word} holds]")
            )
        for message in result.diagnostics.errors:
            found = _ERROR_POLICY.search(str(message))
            meta = self.meta.get(found.group(1)) if found else None
            if meta is None:
                continue
            effect = (
                Verdict.DENY if meta.forbid else Verdict.APPROVE if meta.approve else Verdict.ALLOW
            )
            # Cedar's message may quote a value; keep the kind of failure only
            traces.append(RuleTrace(meta.name, effect, Truth.ERROR,
                                    "Cedar cannot evaluate it (a type error or missing key)"))
        if not result.allowed and not any(t.effect is Verdict.DENY for t in traces):
            traces.append(
                RuleTrace(
                    BUILTIN_CEDAR_DEFAULT_DENY, Verdict.DENY, Truth.TRUE,
                    "no Cedar policy permits this call (Cedar denies by default)",
                )
            )
        return traces


def _entity(kind: str, ident: str, attrs: Mapping[str, Any], parents: Sequence[str] = ()) -> Any:
    return {
        "uid": {"type": f"{NAMESPACE}::{kind}", "id": ident},
        "attrs": dict(attrs),
        "parents": [{"type": f"{NAMESPACE}::Role", "id": p} for p in parents],
    }


def _request(
    ctx: EvalContext, arguments: Mapping[str, Any], kinds: Mapping[str, str]
) -> tuple[dict[str, Any], list[Any]]:
    principal = ctx.principal
    roles = [str(r) for r in principal.get("roles") or ()]
    principal_id = str(principal.get("id") or "")
    task_id = str(ctx.task.get("id") or "")
    task_attrs: dict[str, Any] = {
        "attributes": _value(ctx.task.get("attributes") or {}, "task attributes")
    }
    if ctx.task.get("name") is not None:
        task_attrs["name"] = str(ctx.task["name"])
    entities = [
        _entity("Principal", principal_id,
                _value(principal.get("attributes") or {}, "principal attributes"), roles),
        _entity("Task", task_id, task_attrs),
        *(_entity("Role", role, {}) for role in roles),
    ]
    usage = {key: _decimal(value, f"usage '{key}'") for key, value in ctx.usage.items()}
    request = {
        "principal": {"type": f"{NAMESPACE}::Principal", "id": principal_id},
        "action": {"type": f"{NAMESPACE}::Action", "id": ctx.tool},
        "resource": {"type": f"{NAMESPACE}::Task", "id": task_id},
        "context": {"args": cedar_args(ctx, arguments, kinds), "usage": usage},
    }
    return request, entities
