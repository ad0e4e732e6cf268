"""``policies/example.yaml`` behaves as its README says (the demo relies on it)."""

from __future__ import annotations

from typing import Any

import pytest

from agent_gate.policy import Policy, Principal, TaskScope, Verdict
from agent_gate.privacy.redaction import redact_arguments

ALLOW = Verdict.ALLOW
APPROVE = Verdict.APPROVE
DENY = Verdict.DENY


def zero_usage(policy: Policy, tool: str, **used: float) -> dict[str, float]:
    usage = {limit.key: 0.0 for limit in policy.limits(tool)}
    usage.update({key.replace("__", "/"): value for key, value in used.items()})
    return usage


def decide(policy: Policy, tool: str, arguments: dict[str, Any], **kwargs: Any) -> tuple[Any, ...]:
    kwargs.setdefault("usage", zero_usage(policy, tool))
    decision = policy.evaluate(tool, arguments, **kwargs)
    return decision.effect, decision.rule_ids


def test_declares_the_demo_tools(example: Policy) -> None:
    assert {"get_weather", "send_email", "delete_file", "refund", "fetch_url"} <= set(example.tools)
    assert example.tool_overrides("send_email").idempotency == "none"


def test_get_weather(example: Policy) -> None:
    assert decide(example, "get_weather", {"city": "Oslo"}) == (ALLOW, ("weather-for-anyone",))
    assert decide(example, "get_weather", {"city": ""})[0] is DENY


@pytest.mark.parametrize(
    ("to", "expected"),
    [
        ("ana@example.com", (ALLOW, ("email-internal",))),
        ("ops@eu.example.com", (ALLOW, ("email-internal",))),
        ("someone@gmail.com", (APPROVE, ("email-external-needs-approval",))),
        ("ana@example.com.evil.com", (APPROVE, ("email-external-needs-approval",))),
        # Unparseable addresses are not sent for approval: they are denied.
        ("a@b.com@evil.com", (DENY, ("email-external-needs-approval",))),
    ],
)
def test_send_email(example: Policy, to: str, expected: tuple[Any, ...]) -> None:
    assert decide(example, "send_email", {"to": to, "subject": "s", "body": "hi"}) == expected


def test_send_email_size_and_count(example: Policy) -> None:
    big = {"to": "ana@example.com", "subject": "s", "body": "x" * 70_000}
    assert decide(example, "send_email", big) == (DENY, ("email-size",))
    small = {"to": "ana@example.com", "subject": "s", "body": "hi"}
    usage = zero_usage(example, "send_email", send_email__calls=20)
    assert decide(example, "send_email", small, usage=usage) == (DENY, ("email-per-task",))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/srv/agent-gate/workspace/tmp/report.csv", (ALLOW, ("delete-in-workspace",))),
        ("/srv/agent-gate/workspace/../../etc/passwd", (DENY, ("delete-outside-workspace",))),
        ("/etc/passwd", (DENY, ("delete-outside-workspace",))),
        ("/srv/agent-gate/workspace", (DENY, ("delete-outside-workspace",))),
        # A relative path cannot be resolved, so neither path rule can judge it.
        ("workspace/x", (DENY, ("delete-outside-workspace", "delete-keeps-audit-files"))),
        ("/srv/agent-gate/workspace/x.audit.jsonl", (DENY, ("delete-keeps-audit-files",))),
    ],
)
def test_delete_file(example: Policy, path: str, expected: tuple[Any, ...]) -> None:
    assert decide(example, "delete_file", {"path": path}) == expected


def test_refund(example: Policy) -> None:
    finance = Principal(id="f", roles={"finance"})
    assert decide(example, "refund", {"order_id": "ORD-000001", "amount": 40}) == (
        ALLOW,
        ("refund-small",),
    )
    assert decide(example, "refund", {"order_id": "ORD-000001", "amount": 400}) == (
        APPROVE,
        ("refund-large-needs-approval",),
    )
    assert decide(example, "refund", {"order_id": "ORD-000001", "amount": 1500}) == (
        DENY,
        ("refund-finance-only-above-1000",),
    )
    assert decide(
        example, "refund", {"order_id": "ORD-000001", "amount": 1500}, principal=finance
    ) == (APPROVE, ("refund-large-needs-approval",))
    assert decide(example, "refund", {"order_id": "ORD-1", "amount": 40})[0] is DENY
    # The per-task total: 1950 already refunded, 60 more would pass 2000.
    usage = zero_usage(example, "refund", refund__sum__amount=1950)
    assert decide(example, "refund", {"order_id": "ORD-000001", "amount": 60}, usage=usage) == (
        DENY,
        ("refund-total-per-task",),
    )
    # More than five refunds in a task go to a human even when small.
    usage = zero_usage(example, "refund", refund__calls=5)
    assert decide(example, "refund", {"order_id": "ORD-000001", "amount": 1}, usage=usage) == (
        APPROVE,
        ("refund-count-per-task",),
    )


@pytest.mark.parametrize(
    ("url", "effect"),
    [
        ("https://en.wikipedia.org/wiki/SSRF", ALLOW),
        ("http://en.wikipedia.org/", DENY),
        ("https://en.wikipedia.org:8443/", DENY),
        ("https://127.0.0.1/", DENY),
        ("https://2130706433/", DENY),
        ("https://[::ffff:169.254.169.254]/", DENY),
        ("https://localhost/", DENY),
        ("https://db.internal/", DENY),
        ("https://metadata.google.internal/computeMetadata/v1/", DENY),
        ("https://en.wikipedia.org@127.0.0.1/", DENY),
        ("file:///etc/passwd", DENY),
    ],
)
def test_fetch_url_ssrf_guard(example: Policy, url: str, effect: Verdict) -> None:
    assert decide(example, "fetch_url", {"url": url})[0] is effect


def test_scopes_and_suspended_principals(example: Policy) -> None:
    mail = {"to": "ana@example.com", "subject": "s", "body": "hi"}
    triage = TaskScope(task_id="t1", name="triage")
    assert decide(example, "send_email", mail, task_scope=triage)[1] == ("agent-gate:task-scope",)
    assert decide(example, "get_weather", {"city": "Oslo"}, task_scope=triage)[0] is ALLOW
    suspended = Principal(id="u", attributes={"suspended": True})
    assert decide(example, "get_weather", {"city": "Oslo"}, principal=suspended) == (
        DENY,
        ("suspended-principals-do-nothing",),
    )


def test_redacts_mail_bodies(example: Policy) -> None:
    redacted = redact_arguments({"to": "a@example.com", "body": "secret text here"},
                                example.redaction_rules("send_email"))
    assert redacted["body"]["preview"] == "secr…"
    assert "secret text here" not in str(redacted)
