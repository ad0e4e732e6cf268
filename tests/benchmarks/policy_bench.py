"""Section 2, policy rows: one decision with the same rules in YAML operators, CEL and Cedar.

The rules are the example policy's refund rules (a well-formed order id and an
amount up to 100 run on their own, above 100 a person approves, above 1000 only for
finance) plus its URL rules (public HTTPS allowed, internal addresses denied),
written three ways (Cedar has no ``non_global``: its form lists loopback and 10/8,
which is what the calls below need). Before anything is timed every form must give the same verdict
and count of deciding rules on every call below; a faster form that decides
differently is no comparison. A "decision" is ``Policy.evaluate`` for one call,
everything included (scope, every rule, limits, the trace), averaged over the calls.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_gate.policy import Policy, Principal

YAML_RULES = """\
version: 1
tools:
  refund:
    limits: [{id: total, sum: amount, max: 2000}]
    rules:
      - id: refund-small
        effect: allow
        when:
          - {arg: order_id, matches: 'ORD-[0-9]{6}'}
          - {arg: amount, number: {gt: 0, max: 100}}
      - id: refund-large
        effect: approve
        when:
          - {arg: order_id, matches: 'ORD-[0-9]{6}'}
          - {arg: amount, number: {gt: 100, max: 5000}}
      - id: refund-finance-only-above-1000
        effect: deny
        when:
          - {arg: amount, number: {gt: 1000}}
          - not: {principal: roles, contains_any: [finance]}
  fetch_url:
    rules:
      - id: fetch-public-https
        effect: allow
        when:
          - {arg: url, url: {schemes: [https], hosts: ["*.example.com"]}}
      - id: fetch-no-internal
        effect: deny
        when:
          - {arg: url, url: {ip_in: [non_global]}}
"""

CEL_RULES = """\
version: 1
tools:
  refund:
    limits: [{id: total, sum: amount, max: 2000}]
    rules:
      - id: refund-small
        effect: allow
        when:
          - cel: 'matches_full(args.order_id, "ORD-[0-9]{6}") && args.amount > 0
                  && args.amount <= 100'
      - id: refund-large
        effect: approve
        when:
          - cel: 'matches_full(args.order_id, "ORD-[0-9]{6}") && args.amount > 100
                  && args.amount <= 5000'
      - id: refund-finance-only-above-1000
        effect: deny
        when:
          - cel: 'args.amount > 1000 && !("finance" in principal.roles)'
  fetch_url:
    rules:
      - id: fetch-public-https
        effect: allow
        when:
          - cel: 'url_scheme(args.url) == "https" && host_in(args.url, ["*.example.com"])'
      - id: fetch-no-internal
        effect: deny
        when:
          - cel: 'ip_in(url_host(args.url), ["non_global"])'
"""

CEDAR_SET = """\
@id("refund-small")
permit(principal, action == AgentGate::Action::"refund", resource)
when { context.args.order_id like "ORD-*" && context.args.amount.greaterThan(decimal("0.0"))
       && context.args.amount.lessThanOrEqual(decimal("100.0")) };
@id("refund-large")
@advice("approve")
permit(principal, action == AgentGate::Action::"refund", resource)
when { context.args.order_id like "ORD-*" && context.args.amount.greaterThan(decimal("100.0"))
       && context.args.amount.lessThanOrEqual(decimal("5000.0")) };
@id("refund-finance-only-above-1000")
forbid(principal, action == AgentGate::Action::"refund", resource)
when { context.args.amount.greaterThan(decimal("1000.0")) }
unless { principal in AgentGate::Role::"finance" };
@id("fetch-public-https")
permit(principal, action == AgentGate::Action::"fetch_url", resource)
when { context.args.url.scheme == "https" && context.args.url.host like "*.example.com" };
@id("fetch-no-internal")
forbid(principal, action == AgentGate::Action::"fetch_url", resource)
when { context.args.url has ip && (context.args.url.ip.isLoopback() ||
       context.args.url.ip.isInRange(ip("10.0.0.0/8"))) };
"""

CEDAR_RULES = """\
version: 1
cedar: {file: rules.cedar}
tools:
  refund:
    cedar: {args: {amount: decimal}}
    limits: [{id: total, sum: amount, max: 2000}]
  fetch_url:
    cedar: {args: {url: url}}
"""

SUPPORT = Principal(id="u1", roles={"support"})
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("refund", {"order_id": "ORD-123456", "amount": 40}),
    ("refund", {"order_id": "ORD-123456", "amount": 400}),
    ("refund", {"order_id": "ORD-123456", "amount": 1400}),
    ("fetch_url", {"url": "https://docs.example.com/a"}),
    ("fetch_url", {"url": "https://10.1.2.3/"}),
]

YAML, CEL, CEDAR = (
    "YAML operators",
    "CEL (cel-expr-python)",
    "Cedar (cedarpy)",
)


def policies() -> dict[str, Policy]:
    folder = Path(tempfile.mkdtemp(prefix="ag-policy-bench-"))
    (folder / "rules.cedar").write_text(CEDAR_SET, encoding="utf-8")
    (folder / "cedar.yaml").write_text(CEDAR_RULES, encoding="utf-8")
    found = {
        YAML: Policy.from_text(YAML_RULES, source="yaml.yaml"),
        CEL: Policy.from_text(CEL_RULES, source="cel.yaml"),
        CEDAR: Policy.load(folder / "cedar.yaml"),
    }
    os.unlink(folder / "rules.cedar")
    os.unlink(folder / "cedar.yaml")
    os.rmdir(folder)
    return found


def _decide_all(policy: Policy) -> Callable[[], list[str]]:
    usage = {"refund/sum/amount": 0}

    def run() -> list[str]:
        return [
            policy.evaluate(tool, args, principal=SUPPORT, usage=usage).effect.value
            for tool, args in CALLS
        ]

    return run


def candidates() -> dict[str, Callable[[], list[str]]]:
    """Each form's decision over ``CALLS``; all must agree before they are timed."""
    found = {name: _decide_all(policy) for name, policy in policies().items()}
    verdicts = {name: run() for name, run in found.items()}
    expected = ["allow", "approve", "deny", "allow", "deny"]
    for name, got in verdicts.items():
        assert got == expected, (name, got)
    return found
