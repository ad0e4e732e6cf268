"""Redacted argument forms for the audit trail (the policy declares the rules,
``privacy.redaction`` applies them), and safer-only class overrides."""

from __future__ import annotations

import hashlib
import hmac
import json
import textwrap

import pytest

from agent_gate.policy import (
    Idempotency,
    Policy,
    PolicyLoadError,
    ToolEffect,
    safer_effect,
    safer_idempotency,
)
from agent_gate.privacy.redaction import redact_arguments

POLICY = Policy.from_text(
    textwrap.dedent(
        """
        version: 1
        redact: [api_key]
        tools:
          send_email:
            effect: read            # claims less than the code registers
            idempotency: none
            redact:
              - path: body
                preview: 8
              - attachments.*.content
              - headers.*
          get_weather:
            effect: destructive
            idempotency: key
        """
    )
)

def redact(tool: str, arguments: dict[str, object], key: bytes | None = None) -> dict:
    """What the audit trail keeps of ``arguments``: the policy's rules for ``tool``, applied."""
    return redact_arguments(arguments, POLICY.redaction_rules(tool), key=key)


SECRET_BODY = "Dear Ana, the door code is 4711-0815. Regards, Bob."


def canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_redacted_fields_keep_only_digest_and_short_preview() -> None:
    arguments = {
        "to": "ana@example.com",
        "body": SECRET_BODY,
        "api_key": "sk-123",
        "attachments": [{"name": "a.txt", "content": "AAAA"}, {"name": "b.txt", "content": "B"}],
        "headers": {"X-Token": "t0k3n", "X-Trace": "abc"},
    }
    original = json.loads(json.dumps(arguments))
    redacted = redact("send_email", arguments)
    assert arguments == original  # the input is not modified
    assert redacted["to"] == "ana@example.com"  # not named: kept
    body = redacted["body"]
    assert body == {
        "redacted": "sha256:" + hashlib.sha256(canonical(SECRET_BODY)).hexdigest(),
        "preview": "Dear Ana…",
        "size": len(SECRET_BODY),
        "type": "string",
    }
    assert redacted["attachments"][0]["name"] == "a.txt"
    assert redacted["attachments"][1]["content"]["preview"] == "…"
    assert set(redacted["headers"]) == {"X-Token", "X-Trace"}
    assert redacted["api_key"]["type"] == "string"  # policy-wide field
    text = json.dumps(redacted)
    for clear in ("4711", "door code", "sk-123", "AAAA", "t0k3n"):
        assert clear not in text


def test_preview_never_shows_more_than_a_quarter() -> None:
    short = redact("send_email", {"body": "hunter2"})["body"]
    assert short["preview"] == "h…"  # preview: 8, but 7 // 4 == 1
    assert redact("send_email", {"body": "abc"})["body"]["preview"] == "…"


def test_keyed_digests() -> None:
    key = b"audit-key"
    out = redact("send_email", {"body": "x"}, key=key)["body"]
    assert out["redacted"] == "hmac-sha256:" + hmac.new(key, b'"x"', hashlib.sha256).hexdigest()
    assert out["redacted"] != redact("send_email", {"body": "x"})["body"]["redacted"]


def test_non_strings_and_unknown_tools() -> None:
    out = redact("send_email", {"body": {"html": "<b>x</b>"}})["body"]
    assert out["type"] == "object" and out["preview"] == "…"
    assert out["size"] == len(canonical({"html": "<b>x</b>"}))
    # An undeclared tool still gets the policy-wide redactions.
    assert redact("nope", {"api_key": "k", "q": 1})["api_key"]["type"] == "string"
    assert redact("nope", {"api_key": "k", "q": 1})["q"] == 1


def test_redaction_paths_are_validated() -> None:
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_text("version: 1\ntools:\n  t:\n    redact: ['a..b']\n")
    assert info.value.line == 4
    assert info.value.key == "tools.t.redact[0]"


def test_overrides_only_move_toward_the_safe_side() -> None:
    mail = POLICY.tool_overrides("send_email")
    assert (mail.effect, mail.idempotency) == (ToolEffect.READ, Idempotency.NONE)
    applied = mail.apply("write", "key")
    assert (applied.effect, applied.idempotency) == (ToolEffect.WRITE, Idempotency.NONE)
    assert len(applied.notes) == 1 and "less careful" in applied.notes[0]

    weather = POLICY.tool_overrides("get_weather").apply(ToolEffect.READ, Idempotency.NATURAL)
    assert (weather.effect, weather.idempotency) == (ToolEffect.DESTRUCTIVE, Idempotency.KEY)
    assert weather.notes == ()

    none = POLICY.tool_overrides("undeclared").apply("write", "natural")
    assert (none.effect, none.idempotency) == (ToolEffect.WRITE, Idempotency.NATURAL)


@pytest.mark.parametrize(
    ("a", "b", "safer"),
    [("read", "write", "write"), ("destructive", "write", "destructive"), ("read", "read", "read")],
)
def test_safer_effect(a: str, b: str, safer: str) -> None:
    assert safer_effect(a, b) is ToolEffect(safer)
    assert safer_effect(b, a) is ToolEffect(safer)


@pytest.mark.parametrize(
    ("a", "b", "safer"),
    [("natural", "key", "key"), ("none", "key", "none"), ("natural", "none", "none")],
)
def test_safer_idempotency(a: str, b: str, safer: str) -> None:
    assert safer_idempotency(a, b) is Idempotency(safer)
    assert safer_idempotency(b, a) is Idempotency(safer)


def test_policy_classes_are_the_tools_own() -> None:
    from agent_gate import tools

    assert ToolEffect is tools.Effect
    assert Idempotency is tools.Idempotency
    spec = tools.ToolSpec.build("t", schema={"type": "object"}, effect="write")
    applied = POLICY.tool_overrides("t").apply(spec.effect, spec.idempotency)
    assert applied.effect is tools.Effect.WRITE
    assert applied.idempotency is tools.Idempotency.NONE
