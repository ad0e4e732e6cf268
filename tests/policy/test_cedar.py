"""Cedar as a policy source: requests from the judged values, answers as verdicts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.cli import main
from agent_gate.errors import PolicyLoadError
from agent_gate.policy import Policy, Principal, TaskScope, Verdict
from agent_gate.privacy.redaction import redact_arguments

CEDAR = """\
@id("refund-small")
@reason("Small refunds on a well-formed order run on their own.")
permit(principal, action == AgentGate::Action::"refund", resource)
when {
  context.args.order_id like "ORD-*" &&
  context.args.amount.lessThanOrEqual(decimal("100.00"))
};

@id("refund-large")
@advice("approve")
@redact("card_last4")
permit(principal in AgentGate::Role::"support", action == AgentGate::Action::"refund", resource)
when { context.args.amount.greaterThan(decimal("100.00")) };

@id("refund-finance-only-above-1000")
forbid(principal, action == AgentGate::Action::"refund", resource)
when { context.args.amount.greaterThan(decimal("1000.0")) }
unless { principal in AgentGate::Role::"finance" };

@id("refund-emea-team-total")
forbid(principal, action == AgentGate::Action::"refund", resource)
when {
  principal has team && principal.team == "emea" &&
  context.usage["refund/sum/amount"].greaterThan(decimal("500.0"))
};

@id("delete-in-workspace")
permit(principal, action == AgentGate::Action::"delete_file", resource)
when { context.args.path like "/srv/agent-gate/workspace/*" };

@id("fetch-example-https")
permit(principal, action == AgentGate::Action::"fetch_url", resource)
when { context.args.url.scheme == "https" && context.args.url.host like "*.example.com" };

@id("fetch-no-internal")
forbid(principal, action == AgentGate::Action::"fetch_url", resource)
when { context.args.url has ip && (context.args.url.ip.isLoopback() ||
       context.args.url.ip.isInRange(ip("10.0.0.0/8"))) };

@id("ping-private-only")
permit(principal, action == AgentGate::Action::"ping", resource)
when { context.args.host.isInRange(ip("10.0.0.0/8")) };

@id("mail-our-domain")
permit(principal, action == AgentGate::Action::"send_email", resource)
when { context.args.to.domain == "example.com" && resource has name && resource.name == "support" };

@id("mail-big-forbidden")
forbid(principal, action == AgentGate::Action::"send_email", resource)
when { context.args.size > 100 };
"""

POLICY = """\
version: 1
cedar: {file: refunds.cedar}
scopes:
  support: {tools: [send_email, refund]}
rules:
  - id: suspended-principals-do-nothing
    effect: deny
    when:
      - principal: attributes.suspended
        equals: true
tools:
  refund:
    cedar: {args: {amount: decimal}}
    limits:
      - {id: refund-total-per-task, sum: amount, max: 2000}
  delete_file:
    cedar: {args: {path: path}}
  fetch_url:
    cedar: {args: {url: url}}
  ping:
    cedar: {args: {host: ip}}
  send_email:
    cedar: {args: {to: email}}
"""

SUPPORT = Principal(id="u1", roles={"support"})
FINANCE = Principal(id="f1", roles={"finance", "support"})


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    (tmp_path / "refunds.cedar").write_text(CEDAR, encoding="utf-8")
    (tmp_path / "policy.yaml").write_text(POLICY, encoding="utf-8")
    return Policy.load(tmp_path / "policy.yaml")


def decide(policy: Policy, tool: str, args: dict[str, Any], **kwargs: Any) -> tuple[Any, ...]:
    usage = {limit.key: 0 for limit in policy.limits(tool)}
    usage.update(kwargs.pop("usage", {}))
    decision = policy.evaluate(tool, args, usage=usage, **kwargs)
    return decision.effect, decision.rule_ids


ALLOW, APPROVE, DENY = Verdict.ALLOW, Verdict.APPROVE, Verdict.DENY


@pytest.mark.parametrize(
    ("tool", "args", "kwargs", "expected"),
    [
        # decimals: exact, as Cedar's decimal; roles as entities the principal is in
        ("refund", {"order_id": "ORD-1", "amount": 100}, {}, (ALLOW, ("cedar:refund-small",))),
        ("refund", {"order_id": "ORD-1", "amount": 100.01}, {"principal": SUPPORT},
         (APPROVE, ("cedar:refund-large",))),
        ("refund", {"order_id": "ORD-1", "amount": 100.01}, {},
         (DENY, ("agent-gate:cedar-default-deny",))),
        ("refund", {"order_id": "ORD-1", "amount": 1500}, {"principal": SUPPORT},
         (DENY, ("cedar:refund-finance-only-above-1000",))),
        ("refund", {"order_id": "ORD-1", "amount": 1500}, {"principal": FINANCE},
         (APPROVE, ("cedar:refund-large",))),
        ("refund", {"order_id": "ORD-1", "amount": 0.00001}, {},
         (DENY, ("agent-gate:cedar-arguments",))),  # 5 places: Cedar's decimal cannot hold it
        # principal attributes and usage in the context
        ("refund", {"order_id": "ORD-1", "amount": 10},
         {"principal": Principal(id="e", attributes={"team": "emea"}),
          "usage": {"refund/sum/amount": 501}},
         (DENY, ("cedar:refund-emea-team-total",))),
        ("refund", {"order_id": "ORD-1", "amount": 10},
         {"principal": Principal(id="e", attributes={"team": "emea"}),
          "usage": {"refund/sum/amount": 500}},
         (ALLOW, ("cedar:refund-small",))),
        # agent-gate's own rules and limits still apply
        ("refund", {"order_id": "ORD-1", "amount": 50},
         {"principal": Principal(id="s", attributes={"suspended": True})},
         (DENY, ("suspended-principals-do-nothing",))),
        ("refund", {"order_id": "ORD-1", "amount": 50}, {"usage": {"refund/sum/amount": 1990}},
         (DENY, ("refund-total-per-task",))),
        # paths: the one resolved path
        ("delete_file", {"path": "/srv/agent-gate/workspace/a.txt"}, {},
         (ALLOW, ("cedar:delete-in-workspace",))),
        ("delete_file", {"path": "/srv/agent-gate/workspace/../../../etc/passwd"}, {},
         (DENY, ("agent-gate:cedar-default-deny",))),
        ("delete_file", {"path": "relative/a.txt"}, {}, (DENY, ("agent-gate:cedar-arguments",))),
        # URLs: a record of the parsed URL; an IP literal in every spelling
        ("fetch_url", {"url": "https://API.Example.com./x"}, {},
         (ALLOW, ("cedar:fetch-example-https",))),
        ("fetch_url", {"url": "http://docs.example.com/"}, {},
         (DENY, ("agent-gate:cedar-default-deny",))),
        ("fetch_url", {"url": "https://0x7f.1/"}, {}, (DENY, ("cedar:fetch-no-internal",))),
        ("fetch_url", {"url": "https://[::ffff:10.1.2.3]/"}, {},
         (DENY, ("cedar:fetch-no-internal",))),
        # addresses as ipaddr
        ("ping", {"host": "10.9.8.7"}, {}, (ALLOW, ("cedar:ping-private-only",))),
        ("ping", {"host": "012.1.1.1"}, {}, (ALLOW, ("cedar:ping-private-only",))),  # octal 10
        ("ping", {"host": "::ffff:a09:807"}, {}, (ALLOW, ("cedar:ping-private-only",))),
        ("ping", {"host": "1.2.3.4"}, {}, (DENY, ("agent-gate:cedar-default-deny",))),
        ("ping", {"host": "example.com"}, {}, (DENY, ("agent-gate:cedar-arguments",))),
        # e-mail as {address, domain}; the task as the resource
        ("send_email", {"to": "ana@EXAMPLE.com", "size": 1},
         {"task_scope": TaskScope(task_id="t", name="support")},
         (ALLOW, ("cedar:mail-our-domain",))),
        ("send_email", {"to": "ana@example.com", "size": 1}, {},
         (DENY, ("agent-gate:cedar-default-deny",))),
    ],
)
def test_each_operator_family(
    policy: Policy, tool: str, args: dict[str, Any], kwargs: dict[str, Any], expected: Any
) -> None:
    assert decide(policy, tool, args, **kwargs) == expected


def test_a_forbid_that_cannot_be_evaluated_denies(policy: Policy) -> None:
    scope = TaskScope(task_id="t", name="support")
    decision = policy.evaluate("send_email", {"to": "ana@example.com", "size": "huge"},
                               task_scope=scope)
    assert decision.effect is DENY
    assert decision.rule_ids == ("cedar:mail-big-forbidden",)
    assert "could not be evaluated" in decision.reasons[0]
    assert "huge" not in " ".join(decision.reasons)


def test_redact_annotations_redact_the_tools_they_name(policy: Policy) -> None:
    redacted = redact_arguments({"order_id": "ORD-1", "amount": 5, "card_last4": "4242"},
                                policy.redaction_rules("refund"))
    assert redacted["card_last4"] != "4242" and redacted["order_id"] == "ORD-1"
    kept = redact_arguments({"url": "x", "card_last4": "4242"}, policy.redaction_rules("fetch_url"))
    assert kept["card_last4"] == "4242"


def test_a_cedar_redaction_makes_the_gate_need_a_seal_key(policy: Policy) -> None:
    from agent_gate.authorize import PolicyAuthorizer

    assert PolicyAuthorizer(policy).redacts_anything
    assert PolicyAuthorizer(policy).redacts("refund") and not PolicyAuthorizer(policy).redacts(
        "fetch_url")


def test_the_hash_binds_the_cedar_text(tmp_path: Path, policy: Policy) -> None:
    before = policy.hash
    (tmp_path / "refunds.cedar").write_text(CEDAR.replace("100.00", "90.00"), encoding="utf-8")
    assert Policy.load(tmp_path / "policy.yaml").hash != before


@pytest.mark.parametrize(
    ("cedar", "policy_text", "where", "message"),
    [
        ("permit(principal, action resource);", POLICY, "cedar.file", "Cedar: "),
        ('@advice("approve") forbid(principal, action, resource);', POLICY, "cedar.file",
         "belongs on a permit"),
        ('@advice("maybe") permit(principal, action, resource);', POLICY, "cedar.file",
         "@advice can only be"),
        ("", POLICY.replace("refunds.cedar", "missing.cedar"), "cedar.file", "cannot read"),
        ("", POLICY.replace("cedar: {file: refunds.cedar}\n", ""), "tools.refund.cedar",
         "no top-level 'cedar:'"),
    ],
)
def test_load_problems_are_located(
    tmp_path: Path, cedar: str, policy_text: str, where: str, message: str
) -> None:
    (tmp_path / "refunds.cedar").write_text(cedar, encoding="utf-8")
    (tmp_path / "policy.yaml").write_text(policy_text, encoding="utf-8")
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(tmp_path / "policy.yaml")
    problem = info.value.problems[0]
    assert problem.key == where and message in problem.message and problem.line is not None


def test_inline_policies() -> None:
    text = (
        "version: 1\ncedar:\n  policies: |\n"
        '    permit(principal, action == AgentGate::Action::"t", resource)'
        ' when { context.args.n < 3 };\ntools:\n  t: {cedar: {}}\n'
    )
    policy = Policy.from_text(text)
    assert policy.evaluate("t", {"n": 2}).rule_ids == ("cedar:policy0",)
    assert policy.evaluate("t", {"n": 3}).effect is DENY


SCHEMAS = """\
refund:
  type: object
  properties: {order_id: {type: string}, amount: {type: number}, card_last4: {type: string}}
  required: [order_id, amount]
delete_file: {type: object, properties: {path: {type: string}}, required: [path]}
fetch_url: {type: object, properties: {url: {type: string}}, required: [url]}
ping: {type: object, properties: {host: {type: string}}, required: [host]}
send_email:
  type: object
  properties: {to: {type: string}, size: {type: integer}}
  required: [to, size]
"""


def test_check_runs_cedars_validator_against_the_generated_schema(
    tmp_path: Path, policy: Policy
) -> None:
    (tmp_path / "schemas.yaml").write_text(SCHEMAS, encoding="utf-8")
    runner = CliRunner()
    args = ["policy", "check", str(tmp_path / "policy.yaml"), "--schemas",
            str(tmp_path / "schemas.yaml")]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.stderr
    cedar = CEDAR.replace("context.args.size > 100", "context.args.sise > 100")
    (tmp_path / "refunds.cedar").write_text(cedar, encoding="utf-8")
    result = runner.invoke(main, args)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cedar:mail-big-forbidden" in lines[0] and "sise" in lines[0]
    assert lines[0].startswith(f"{tmp_path / 'policy.yaml'}:2:1: cedar: Cedar validator: ")
    (tmp_path / "refunds.cedar").write_text(cedar.replace("sise", "size"), encoding="utf-8")
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.stderr


def test_policy_test_runs_cases_against_a_cedar_policy(tmp_path: Path, policy: Policy) -> None:
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "version: 1\ncases:\n"
        "  - name: large refunds need a person\n    tool: refund\n"
        "    args: {order_id: ORD-1, amount: 400}\n    principal: {id: u1, roles: [support]}\n"
        "    expect: {decision: approve, rule_ids: [cedar:refund-large]}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["policy", "test", str(tmp_path / "policy.yaml"),
                                       str(cases)])
    assert result.exit_code == 0, result.output
    assert "no case makes Cedar policy cedar:refund-small hold" in result.stdout
    assert "cedar:refund-large hold" not in result.stdout


def test_a_gate_runs_what_cedar_permits_and_waits_on_advice(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "refunds.cedar").write_text(CEDAR, encoding="utf-8")
    (tmp_path / "policy.yaml").write_text(POLICY, encoding="utf-8")
    ran: list[float] = []
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {
        "order_id": {"type": "string"}, "amount": {"type": "number"}}}, effect="write")
    def refund(order_id: str, amount: float) -> str:
        ran.append(amount)
        return "ok"

    with Gate(tools, db_url, policy=tmp_path / "policy.yaml", principal=SUPPORT,
              seal_key=os.urandom(32)) as gate:  # @redact("card_last4") seals that field
        small = gate.execute("t1", {"call_id": "c1", "name": "refund",
                                    "arguments": {"order_id": "ORD-1", "amount": 40}})
        large = gate.execute("t1", {"call_id": "c2", "name": "refund",
                                    "arguments": {"order_id": "ORD-1", "amount": 400}})
    assert small.state is CallState.SUCCEEDED
    assert large.state is CallState.AWAITING_APPROVAL
    assert "cedar:refund-large" in (large.reason or "")
    assert ran == [40]


def test_symlinks_are_resolved_before_cedar_sees_a_path(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink("/etc", workspace / "link")
    text = (
        "version: 1\ncedar:\n  policies: |\n"
        '    permit(principal, action, resource) when { context.args.path like "'
        f'{workspace}/*" }};\ntools:\n  rm: {{cedar: {{args: {{path: path}}}}}}\n'
    )
    policy = Policy.from_text(text)
    assert policy.evaluate("rm", {"path": f"{workspace}/a"}).effect is ALLOW
    assert policy.evaluate("rm", {"path": f"{workspace}/link/passwd"}).effect is DENY


@pytest.mark.parametrize(("literal", "why"), [
    ("1000.00001", "more than 4 decimal places"),
    ("1000", "not a Cedar decimal"),
    ("9999999999999999.0", "out of Cedar's decimal range"),
])
def test_check_names_the_policy_with_a_decimal_cedar_cannot_make(
    tmp_path: Path, policy: Policy, literal: str, why: str
) -> None:
    """Cedar parses ``decimal("1000.00001")`` and fails only when it evaluates it: the
    forbid would deny every refund at run time, saying nothing before. ``policy check``
    refuses the file instead, naming the policy and the literal."""
    del policy  # writes policy.yaml and refunds.cedar
    cedar = CEDAR.replace('decimal("1000.0")', f'decimal("{literal}")')
    (tmp_path / "refunds.cedar").write_text(cedar, encoding="utf-8")
    result = CliRunner().invoke(main, ["policy", "check", str(tmp_path / "policy.yaml")])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "refund-finance-only-above-1000" in lines[0] and f'decimal({literal!r})' in lines[0]
    assert why in lines[0] and lines[0].startswith(f"{tmp_path / 'policy.yaml'}:2:")
    with pytest.raises(PolicyLoadError):
        Policy.load(tmp_path / "policy.yaml")
    # four places, or a negative at Cedar's lower bound, are fine
    for fine in ("1000.0001", "-922337203685477.5808"):
        (tmp_path / "refunds.cedar").write_text(
            CEDAR.replace('decimal("1000.0")', f'decimal("{fine}")'), encoding="utf-8")
        assert Policy.load(tmp_path / "policy.yaml").hash
