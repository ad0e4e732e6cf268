"""``agent-gate policy test`` and the dead-rule warnings of ``policy check``, as CI runs them."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from agent_gate.cli import main
from agent_gate.policy import Policy
from agent_gate.policy.casecheck import run_cases
from agent_gate.policy.casefile import load_cases

from .conftest import REPO

SHIPPED = [
    ("policies/example.yaml", "policies/example.tests.yaml", ["--tools", "agent_gate.demo.tools"]),
    ("examples/support_policy.yaml", "policies/support_policy.tests.yaml", []),
    ("examples/payments_policy.yaml", "policies/payments_policy.tests.yaml", []),
    ("examples/mcp_policy.yaml", "policies/mcp_policy.tests.yaml", []),
]

POLICY = """\
version: 1
tools:
  pay:
    rules:
      - id: small
        effect: allow
        when:
          - arg: amount
            number: {max: 100}
      - id: big
        effect: approve
        when:
          - arg: amount
            number: {gt: 100}
      - id: typo-never-matches
        effect: deny
        when:
          - arg: ammount
            number: {gt: 5000}
      - id: wrong-type
        effect: allow
        when:
          - arg: to
            number: {gt: 0}
      - id: vendor-blocked
        effect: deny
        when:
          - arg: to
            in: [shady]
"""

SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "amount": {"type": "integer"}},
    "required": ["to", "amount"],
    "additionalProperties": False,
}

CASES = """\
version: 1
cases:
  - name: small pays
    tool: pay
    args: {to: acme, amount: 10}
    expect: {decision: allow, rule_ids: [small]}
  - name: big waits
    tool: pay
    args: {to: acme, amount: 500}
    expect: {decision: allow, rule_ids: [small]}
"""


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize(("policy", "tests", "extra"), SHIPPED, ids=[s[1] for s in SHIPPED])
def test_the_shipped_policies_pass_their_tests(
    policy: str, tests: str, extra: list[str], tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"
    result = run(
        "policy", "test", str(REPO / policy), str(REPO / tests), *extra, "--junit", str(junit)
    )
    assert result.exit_code == 0, result.output
    assert ", 0 failed" in result.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    assert int(suite.get("tests") or 0) >= 4
    assert "never matches" not in result.stdout


def test_the_example_policy_tests_exercise_every_rule_but_the_64k_body() -> None:
    result = run(
        "policy", "test", str(REPO / "policies/example.yaml"),
        str(REPO / "policies/example.tests.yaml"), "--json",
    )
    report = json.loads(result.stdout)
    assert [u["id"] for u in report["unexercised"]] == ["email-size"]
    assert report["passed"] is True


def _files(tmp_path: Path, policy: str = POLICY, cases: str = CASES) -> tuple[Path, Path]:
    (tmp_path / "policy.yaml").write_text(policy, encoding="utf-8")
    (tmp_path / "cases.yaml").write_text(cases, encoding="utf-8")
    return tmp_path / "policy.yaml", tmp_path / "cases.yaml"


def test_a_mismatch_fails_with_the_difference_and_junit_failure(tmp_path: Path) -> None:
    policy, cases = _files(tmp_path)
    junit = tmp_path / "out.xml"
    result = run("policy", "test", str(policy), str(cases), "--junit", str(junit))
    assert result.exit_code == 1
    assert f"FAIL {cases}:7: big waits" in result.stdout
    assert "decision: expected allow, got approve" in result.stdout
    assert "rule_ids: expected [small], got [big]" in result.stdout
    assert "1 passed, 1 failed" in result.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "1"
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["big waits"]
    assert [c.get("line") for c in failed] == ["7"]


def test_unexercised_and_never_matching_rules_are_listed_with_lines(tmp_path: Path) -> None:
    policy, cases = _files(tmp_path)
    schemas = tmp_path / "tools.json"
    # an OpenAI Responses tool list, as ToolRegistry.definitions writes it
    schemas.write_text(json.dumps([{"type": "function", "name": "pay", "parameters": SCHEMA}]))
    result = run("policy", "test", str(policy), str(cases), "--schemas", str(schemas), "--json")
    report = json.loads(result.stdout)
    assert {u["id"] for u in report["unexercised"]} == {
        "typo-never-matches", "wrong-type", "vendor-blocked"
    }
    dead = {d["id"]: d for d in report["never_match"]}
    assert set(dead) == {"typo-never-matches", "wrong-type"}
    assert dead["typo-never-matches"]["line"] == 15
    assert "no argument 'ammount'" in dead["typo-never-matches"]["why"]
    assert "'to' is string" in dead["wrong-type"]["why"]
    assert "'number' needs" in dead["wrong-type"]["why"]


def test_check_warns_about_never_matching_rules_but_passes(tmp_path: Path) -> None:
    policy, _ = _files(tmp_path)
    schemas = tmp_path / "tools.yaml"
    schemas.write_text("pay:\n" + textwrap.indent(json.dumps(SCHEMA), "  "), encoding="utf-8")
    result = run("policy", "check", str(policy), "--schemas", str(schemas))
    assert result.exit_code == 0
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 2
    assert warnings[0].startswith(f"{policy}:15:9: tools.pay.rules[2]: warning: rule "
                                  "typo-never-matches can never match")
    assert f"{policy}:20:9: tools.pay.rules[3]: warning: rule wrong-type" in warnings[1]
    assert "fail closed" not in result.stderr
    # without schemas nothing can be said
    assert run("policy", "check", str(policy)).stderr == ""


def test_check_uses_a_tool_registry_for_schemas() -> None:
    result = run("policy", "check", str(REPO / "policies/example.yaml"),
                 "--tools", "agent_gate.demo.tools")
    assert result.exit_code == 0 and result.stderr == ""


def test_a_bad_test_file_is_located(tmp_path: Path) -> None:
    policy, cases = _files(tmp_path, cases=CASES.replace("decision: allow, rule_ids: [small]}\n"
                                                         "  - name: big",
                                                         "decison: allow}\n  - name: big"))
    result = run("policy", "test", str(policy), str(cases))
    assert result.exit_code == 1
    assert f"{cases}:6:14: cases[0].expect.decison: unknown key" in result.stderr


def test_prior_calls_and_usage_add_to_the_counters(tmp_path: Path) -> None:
    policy = Policy.from_text(
        POLICY + "    limits:\n      - {id: total, sum: amount, max: 100}\n",
        source="p.yaml",
    )
    cases = load_cases(
        textwrap.dedent("""\
        version: 1
        cases:
          - name: within
            tool: pay
            args: {to: a, amount: 30}
            prior: [{tool: pay, args: {to: a, amount: 40}}]
            usage: {pay/sum/amount: 30}
            expect: {decision: allow, limits_exceeded: []}
          - name: over
            tool: pay
            args: {to: a, amount: 31}
            prior: [{tool: pay, args: {to: a, amount: 40}}]
            usage: {pay/sum/amount: 30}
            expect: {decision: deny, rule_ids: [total]}
          - name: unknown counter
            tool: pay
            args: {to: a, amount: 1}
            usage: {pay/calls: 3}
            expect: {decision: allow}
        """),
        "cases.yaml",
    )
    report = run_cases(policy, [cases])
    assert [r.passed for r in report.results] == [True, True, False]
    assert "usage names counter 'pay/calls'" in report.results[2].failures[0]


def test_a_deny_rule_on_the_wrong_type_is_said_to_deny_every_call(tmp_path: Path) -> None:
    policy, _ = _files(tmp_path, policy=POLICY.replace(
        "      - id: wrong-type\n        effect: allow",
        "      - id: wrong-type\n        effect: deny",
    ))
    schemas = tmp_path / "tools.json"
    schemas.write_text(json.dumps({"pay": SCHEMA}))
    result = run("policy", "check", str(policy), "--schemas", str(schemas))
    wrong = [w for w in result.stderr.splitlines() if "wrong-type" in w]
    assert len(wrong) == 1
    assert "this deny rule denies every call that has the argument (fail closed)" in wrong[0]
    # and that is what the policy does to a valid call
    decision = Policy.load(policy).evaluate("pay", {"to": "acme", "amount": 1})
    assert decision.rule_ids == ("wrong-type",)
