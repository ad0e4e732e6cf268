"""``cel:`` conditions: compiled and type-checked at load, judged with agent-gate's operators."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from agent_gate.cli import main
from agent_gate.errors import PolicyLoadError
from agent_gate.policy import Policy, Principal, TaskScope, Truth, Verdict


def cel_policy(expression: str, effect: str = "allow") -> Policy:
    rules: list[dict[str, Any]] = [{"id": "r", "effect": effect, "when": [{"cel": expression}]}]
    if effect != "allow":
        rules.append({"id": "base", "effect": "allow"})
    doc = {"version": 1, "tools": {"t": {"rules": rules, "limits": [
        {"id": "total", "sum": "amount", "max": 1000}]}}}
    return Policy.from_text(yaml.safe_dump(doc, sort_keys=False), source="cel.yaml")


def truth(expression: str, args: dict[str, Any], **kwargs: Any) -> Truth:
    kwargs.setdefault("usage", {"t/sum/amount": 0})
    decision = cel_policy(expression).evaluate("t", args, **kwargs)
    return decision.rules[0].truth


@pytest.mark.parametrize(
    ("expression", "args", "expected"),
    [
        ('path_under(args.p, ["/srv/ws"])', {"p": "/srv/ws/a/b.txt"}, Truth.TRUE),
        ('path_under(args.p, ["/srv/ws"])', {"p": "/srv/ws/../etc/passwd"}, Truth.FALSE),
        ('path_under(args.p, "/srv/ws")', {"p": "/srv/ws"}, Truth.FALSE),  # the root itself
        ('host_in(args.u, ["*.example.com"])', {"u": "https://api.example.com/x"}, Truth.TRUE),
        ('host_in(args.u, ["*.example.com"])', {"u": "https://example.com.evil.io/"}, Truth.FALSE),
        ('host_in(args.u, ["*.example.com"])', {"u": "https://10.0.0.1/"}, Truth.FALSE),
        ('url_host(args.u) == "api.example.com"', {"u": "HTTPS://API.Example.COM./"}, Truth.TRUE),
        ('url_scheme(args.u) == "https" && url_port(args.u) == 443', {"u": "https://a.io"},
         Truth.TRUE),
        ('ip_in(url_host(args.u), ["non_global"])', {"u": "http://0x7f.1/"}, Truth.TRUE),
        ('ip_in(args.h, ["10.0.0.0/8"])', {"h": "10.1.2.3"}, Truth.TRUE),
        ('ip_in(args.h, ["10.0.0.0/8"])', {"h": "example.com"}, Truth.FALSE),
        ('email_domain_in(args.to, ["example.com"])', {"to": "Ana <ana@EXAMPLE.com>"},
         Truth.ERROR),  # a display name is not an address: cannot tell
        ('email_domain_in(args.to, ["example.com"])', {"to": "ana@example.com"}, Truth.TRUE),
        ('amount_le(args.a, "100.10")', {"a": 100.1}, Truth.TRUE),
        ('amount_le(args.a, "100.10")', {"a": 100.11}, Truth.FALSE),
        ('amount_le(args.a, "100.10")', {"a": "100.10"}, Truth.TRUE),
        ("amount_gt(args.a, 0) && amount_lt(args.a, 0.3)", {"a": 0.1}, Truth.TRUE),
        ('amount_le(args.a, "100")', {"a": True}, Truth.ERROR),
        ('matches_full(args.id, "ORD-[0-9]{6}")', {"id": "ORD-123456"}, Truth.TRUE),
        ('matches_full(args.id, "ORD-[0-9]{6}")', {"id": "xORD-123456"}, Truth.FALSE),
        ('matches_full(args.id, "(a+)+")', {"id": "aaa"}, Truth.ERROR),  # a refused pattern
        ('matches_full(args.id, "a")', {"id": "a" * 1025}, Truth.ERROR),  # over the input cap
        ("args.a > 5", {}, Truth.ERROR),  # a missing key: unknown, never false
        ("has(args.a) && args.a > 5", {}, Truth.FALSE),
        ("args.a > 5", {"a": "six"}, Truth.ERROR),
    ],
)
def test_functions_and_three_valued_results(
    expression: str, args: dict[str, Any], expected: Truth
) -> None:
    assert truth(expression, args) is expected


def test_principal_task_tool_and_usage_are_visible() -> None:
    expression = (
        '"finance" in principal.roles && principal.attributes.team == "emea" && '
        'task.name == "support" && tool == "t" && usage["t/sum/amount"] < 500.0'
    )
    kwargs: dict[str, Any] = {
        "principal": Principal(id="u", roles={"finance"}, attributes={"team": "emea"}),
        "task_scope": TaskScope(task_id="k", name=None, attributes={}),
    }
    assert truth(expression, {"amount": 1}, **kwargs) is Truth.ERROR  # no task name: missing key
    kwargs["task_scope"] = TaskScope(task_id="k", attributes={})
    doc = {"version": 1, "scopes": {"support": {"tools": ["t"]}}, "tools": {"t": {
        "rules": [{"id": "r", "effect": "allow", "when": [{"cel": expression}]}]}}}
    policy = Policy.from_text(yaml.safe_dump(doc), source="p.yaml")
    scope = TaskScope(task_id="k", name="support")
    principal = kwargs["principal"]
    assert policy.evaluate("t", {}, principal=principal, task_scope=scope, usage={
        "t/sum/amount": 499}).effect is Verdict.ALLOW
    assert policy.evaluate("t", {}, principal=principal, task_scope=scope, usage={
        "t/sum/amount": 500}).effect is Verdict.DENY


def test_an_error_never_grants_and_a_deny_that_errors_denies() -> None:
    allow = cel_policy("args.a > 5")
    assert allow.evaluate("t", {}, usage={"t/sum/amount": 0}).rule_ids == (
        "agent-gate:default-deny",)
    deny = cel_policy("args.a > 5", effect="deny")
    decision = deny.evaluate("t", {"amount": 1}, usage={"t/sum/amount": 0})
    assert decision.effect is Verdict.DENY and decision.rule_ids == ("r",)
    assert "fail closed" in decision.reasons[0]


def test_a_cel_path_is_the_one_resolved_path(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    os.symlink("/etc", tmp_path / "ws" / "link")
    expression = f'path_under(args.p, ["{tmp_path}/ws"])'
    assert truth(expression, {"p": f"{tmp_path}/ws/link/passwd"}) is Truth.FALSE
    # a path that cannot be resolved is a bad path, whichever condition met it
    decision = cel_policy(expression).evaluate("t", {"p": "relative/x"},
                                               usage={"t/sum/amount": 0})
    assert decision.effect is Verdict.DENY


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("tool > 3", "found no matching overload for '_>_' applied to '(string, int)'"),
        ("nope == 1", "undeclared reference to 'nope'"),
        ('path_under(1, ["/a"])', "no matching overload for 'path_under'"),
        ("args.a + 1", "must be a boolean expression, not INT"),
        ("args.a >", "Syntax error"),
    ],
)
def test_type_errors_are_load_errors_naming_rule_and_line(expression: str, message: str) -> None:
    with pytest.raises(PolicyLoadError) as info:
        cel_policy(expression)
    problem = info.value.problems[0]
    assert problem.key == "tools.t.rules[0].when[0].cel"
    assert problem.line == 8  # the line of `cel:` in the dumped YAML
    assert problem.message.startswith("rule r: ")
    assert message in problem.message


def test_policy_check_reports_a_cel_type_error(tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "version: 1\ntools:\n  t:\n    rules:\n      - id: big\n        effect: deny\n"
        "        when:\n          - cel: 'args.amount > \"100\" + 1'\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["policy", "check", str(policy)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"{policy}:8:13: tools.t.rules[0].when[0].cel: rule big: ")


def test_cel_is_not_mixed_with_a_subject_nor_used_inside_each() -> None:
    for condition in ({"arg": "a", "cel": "true"},
                      {"arg": "xs", "each": {"cel": "true"}}):
        doc = {"version": 1, "tools": {"t": {"rules": [
            {"id": "r", "effect": "allow", "when": [condition]}]}}}
        with pytest.raises(PolicyLoadError):
            Policy.from_text(yaml.safe_dump(doc), source="p.yaml")


def test_cel_and_yaml_operators_decide_alike() -> None:
    yaml_rule = [{"arg": "order_id", "matches": "ORD-[0-9]{6}"},
                 {"arg": "amount", "number": {"gt": 0, "max": 100}}]
    cel_rule = [{"cel": 'args.order_id.matches("^ORD-[0-9]{6}$") && args.amount > 0 '
                        '&& amount_le(args.amount, 100)'}]
    policies = [
        Policy.from_text(yaml.safe_dump({"version": 1, "tools": {"refund": {"rules": [
            {"id": "small", "effect": "allow", "when": when}]}}}), source="p.yaml")
        for when in (yaml_rule, cel_rule)
    ]
    for args in ({"order_id": "ORD-123456", "amount": 40}, {"order_id": "ORD-1", "amount": 40},
                 {"order_id": "ORD-123456", "amount": 101}, {"order_id": "ORD-123456"},
                 {"order_id": "ORD-123456", "amount": 0}):
        a, b = (p.evaluate("refund", args) for p in policies)
        assert (a.effect, a.rule_ids) == (b.effect, b.rule_ids), args


def test_a_policy_without_cel_keeps_its_hash() -> None:
    text = Path(__file__).resolve().parents[2].joinpath("policies/example.yaml").read_text()
    # the example as it was before CEL existed: since then it gained an approval block
    # (edit then approve), which is part of its meaning and so of its hash
    editable = ("        approval:\n          editable: [subject, body]   # the approver may "
                "fix the text, never the recipient\n")
    assert editable in text
    text = text.replace(editable, "")
    assert Policy.from_text(text).hash == (
        "sha256:73299e7badeca1d4e8b6e6a0bab02e68269f86f517a4633dd3d7b9c83b834313"
    )
