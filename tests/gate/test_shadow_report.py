"""Shadow rules: evaluated on every call, recorded with it, never enforced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from click.testing import CliRunner
from support import EXAMPLE_POLICY as EXAMPLE
from support.tables import table_rows

from agent_gate import CallState, Gate
from agent_gate.authorize import PolicyAuthorizer
from agent_gate.cli import main
from agent_gate.demo.tools import tools
from agent_gate.gate.shadow_report import shadow_report
from agent_gate.policy import Policy, Principal, TaskScope, Verdict

CAP = """\
      - id: refund-cap-300
        effect: deny
        mode: shadow
        reason: Trying out a lower cap.
        when:
          - arg: amount
            number: {gt: 300}
      - id: refund-finance-only-above-1000"""

WITH_SHADOW_RULE = EXAMPLE.read_text(encoding="utf-8").replace(
    "      - id: refund-finance-only-above-1000", CAP
)
# a whole draft file in shadow: weather only for short city names
DRAFT = EXAMPLE.read_text(encoding="utf-8").replace(
    "length: {min: 1, max: 100}", "length: {min: 1, max: 4}"
)
USAGE = {"refund/sum/amount": 0, "refund/calls": 0}
SUPPORT = Principal(id="u1", roles={"support"})


def test_a_shadow_rule_is_evaluated_but_not_enforced() -> None:
    policy = Policy.from_text(WITH_SHADOW_RULE)
    decision = policy.evaluate("refund", {"order_id": "ORD-123456", "amount": 400}, usage=USAGE)
    assert (decision.effect, decision.rule_ids) == (Verdict.APPROVE,
                                                    ("refund-large-needs-approval",))
    assert decision.shadow is not None
    assert (decision.shadow.effect, decision.shadow.rule_ids) == (Verdict.DENY,
                                                                  ("refund-cap-300",))
    assert decision.shadow.differs
    same = policy.evaluate("refund", {"order_id": "ORD-123456", "amount": 40}, usage=USAGE)
    assert same.shadow is not None and not same.shadow.differs
    # tools without shadow rules carry no shadow decision
    assert policy.evaluate("get_weather", {"city": "Oslo"}).shadow is None


def test_mode_enforce_is_the_default_and_keeps_the_hash() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    explicit = text.replace("        effect: allow\n        reason: Weather lookups",
                            "        effect: allow\n        mode: enforce\n"
                            "        reason: Weather lookups")
    assert explicit != text
    assert Policy.from_text(explicit).hash == Policy.from_text(text).hash


def test_a_shadow_policy_keeps_the_enforced_hash() -> None:
    enforced = Policy.load(EXAMPLE)
    both = enforced.with_shadow(Policy.from_text(DRAFT))
    assert both.hash == enforced.hash
    decision = both.evaluate("get_weather", {"city": "Lisbon"})
    assert decision.effect is Verdict.ALLOW
    assert decision.shadow is not None and decision.shadow.effect is Verdict.DENY
    assert decision.shadow.rule_ids == ("agent-gate:default-deny",)


def _audit_shadows(url: str) -> dict[str, dict[str, Any]]:
    engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        rows = conn.execute(sqlalchemy.text(
            "SELECT call_id, detail FROM audit_events WHERE from_state = 'received' "
            "AND to_state <> 'received'")).all()
    engine.dispose()
    return {call_id: json.loads(detail).get("shadow") for call_id, detail in rows}


def test_recorded_with_the_call_and_reported(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_GATE_DEMO_OUTBOX", str(tmp_path / "outbox.jsonl"))
    (tmp_path / "draft.yaml").write_text(DRAFT, encoding="utf-8")
    policy = PolicyAuthorizer(Policy.from_text(WITH_SHADOW_RULE),
                              shadow_policy=tmp_path / "draft.yaml")
    with Gate(tools, db_url, policy=policy, principal=SUPPORT, scope=TaskScope(name="support"),
              seal_key=bytes(32)) as gate:
        weather = gate.execute("t1", {"call_id": "w1", "name": "get_weather",
                                      "arguments": {"city": "Lisbon"}})
        refund = gate.execute("t1", {"call_id": "r1", "name": "refund",
                                     "arguments": {"order_id": "ORD-123456", "amount": 400}})
    # enforced: the weather ran; the shadow file would have denied it
    assert weather.state is CallState.SUCCEEDED
    assert refund.state is CallState.AWAITING_APPROVAL
    shadows = _audit_shadows(db_url)
    assert shadows["w1"]["verdict"] == "deny" and shadows["w1"]["differs"] is True
    assert shadows["w1"]["rule_ids"] == ["agent-gate:default-deny"]
    # the shadow file decides the refund too (its own rules: approve, as enforced)
    assert shadows["r1"]["verdict"] == "approve" and shadows["r1"]["differs"] is False

    report = shadow_report(db_url)
    assert report.shadowed == 2
    assert [(d.call.call_id, d.enforced.value, d.shadow.value) for d in report.diffs] == [
        ("w1", "allow", "deny")]

    result = CliRunner().invoke(main, ["policy", "shadow-report", "--db", db_url, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["shadowed"] == 2 and data["differ"] == 1
    assert data["rules"][0]["rule_id"] == "agent-gate:default-deny"
    assert [c["call_id"] for c in data["rules"][0]["calls"]] == ["w1"]
    human = CliRunner().invoke(main, ["policy", "shadow-report", "--db", db_url])
    assert "2 calls decided with a shadow evaluation; 1 where it differs" in human.stdout
    assert "t1/w1" in human.stdout and "Lisbon" not in human.stdout
    assert table_rows(human.stdout, "by the shadow decision's rule") == [
        ["agent-gate:default-deny", "1", "allow -> deny", "t1/w1"]]


def test_per_rule_shadows_through_a_gate(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_GATE_DEMO_OUTBOX", str(tmp_path / "outbox.jsonl"))
    path = tmp_path / "policy.yaml"
    path.write_text(WITH_SHADOW_RULE, encoding="utf-8")
    with Gate(tools, db_url, policy=path, principal=SUPPORT, seal_key=bytes(32)) as gate:
        gate.execute("t1", {"call_id": "r1", "name": "refund",
                            "arguments": {"order_id": "ORD-123456", "amount": 400}})
    report = shadow_report(db_url, task="t1")
    assert [(d.enforced.value, d.shadow.value, d.shadow_rules) for d in report.diffs] == [
        ("approve", "deny", ("refund-cap-300",))]


def test_explain_shows_the_shadow_decision(tmp_path: Path) -> None:
    (tmp_path / "draft.yaml").write_text(DRAFT, encoding="utf-8")
    result = CliRunner().invoke(main, [
        "policy", "explain", str(EXAMPLE), "--tool", "get_weather", "--args",
        '{"city": "Lisbon"}', "--shadow", str(tmp_path / "draft.yaml")])
    assert result.exit_code == 0, result.output
    assert "shadow (not enforced): deny by agent-gate:default-deny (differs)" in result.stdout


def test_shadow_decisions_are_counted_in_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from agent_gate.telemetry.otel import OtelObserver

    monkeypatch.setenv("AGENT_GATE_DEMO_OUTBOX", str(tmp_path / "outbox.jsonl"))
    reader = InMemoryMetricReader()
    observer = OtelObserver(TracerProvider(), MeterProvider(metric_readers=[reader]))
    (tmp_path / "draft.yaml").write_text(DRAFT, encoding="utf-8")
    policy = PolicyAuthorizer(EXAMPLE, shadow_policy=tmp_path / "draft.yaml")
    with Gate(tools, f"sqlite:///{tmp_path}/l.db", policy=policy, create=True,
              telemetry=observer) as gate:
        for call_id, city in (("w1", "Lisbon"), ("w2", "Oslo"), ("w3", "Porto")):
            gate.execute("t1", {"call_id": call_id, "name": "get_weather",
                                "arguments": {"city": city}})
        gate.execute("t1", {"call_id": "w1", "name": "get_weather",
                            "arguments": {"city": "Lisbon"}})  # replayed: decided once
    data = reader.get_metrics_data()
    points = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "agent_gate.policy.shadow_decisions"
        for point in metric.data.data_points
    ]
    counted = {(p.attributes["agent_gate.shadow_decision"], p.attributes[
        "agent_gate.shadow_differs"]): p.value for p in points}
    assert counted == {("deny", True): 2, ("allow", False): 1}
    assert {p.attributes["gen_ai.tool.name"] for p in points} == {"get_weather"}


def test_policy_test_cases_can_expect_the_shadow_decision(tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(WITH_SHADOW_RULE, encoding="utf-8")
    cases = tmp_path / "cases.yaml"
    cases.write_text(
        "version: 1\ncases:\n"
        "  - name: the lower cap would deny\n    tool: refund\n"
        "    args: {order_id: ORD-123456, amount: 400}\n"
        "    expect: {decision: approve, shadow: deny}\n"
        "  - name: small refunds stay allowed\n    tool: refund\n"
        "    args: {order_id: ORD-123456, amount: 40}\n"
        "    expect: {decision: allow, shadow: allow}\n",
        encoding="utf-8",
    )
    runner = CliRunner()
    result = runner.invoke(main, ["policy", "test", str(tmp_path / "policy.yaml"), str(cases)])
    assert result.exit_code == 0, result.output
    cases.write_text(cases.read_text().replace("shadow: deny", "shadow: allow"))
    result = runner.invoke(main, ["policy", "test", str(tmp_path / "policy.yaml"), str(cases)])
    assert result.exit_code == 1
    assert "shadow: expected allow, got deny" in result.stdout
