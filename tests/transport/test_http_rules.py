"""The pure HTTP judgements: media types, redacted error excerpts, retry hints."""

from __future__ import annotations

import email.utils
import json

import pytest

from agent_gate.transport.http import (
    REDACTED,
    error_excerpt,
    is_event_stream,
    is_retryable,
    media_type,
    redact,
    retry_after_seconds,
    shown_media_type,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("text/event-stream", True),
        ("text/event-stream; charset=utf-8", True),
        ("TEXT/Event-Stream ; charset=UTF-8", True),
        ('text/event-stream;foo="a;b"', True),
        ("  text/event-stream  ", True),
        ("application/json", False),
        ("application/json, text/event-stream", False),  # a list is not a media type
        ("text/event-stream-v2", False),
        ("text/event-streams", False),
        ("text/html; x=text/event-stream", False),
        ("text /event-stream", False),
        ("event-stream", False),
        ("", False),
        (None, False),
    ],
)
def test_event_stream_media_type_is_parsed_not_searched(value: str | None, expected: bool) -> None:
    assert is_event_stream(value) is expected


def test_media_type_lowercases_and_drops_parameters() -> None:
    assert media_type("Application/JSON; charset=utf-8") == "application/json"
    assert media_type("garbage") == ""
    assert shown_media_type("garbage") == "(malformed)"
    assert shown_media_type(None) == ""
    assert shown_media_type("text/html; charset=secret-token-value") == "text/html"


@pytest.mark.parametrize(
    "secret",
    [
        "sk-proj-AbCdEf0123456789xyz",
        "sk-ant-api03-abcdefghijklmnop",
        "AIzaSyA1234567890abcdefghijklmnop",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
        "AKIAABCDEFGHIJKLMNOP",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig_nature",
        "Q2hlY2tUaGlzTG9uZ1Rva2VuMTIzNDU2Nzg5MA",
    ],
)
def test_redact_removes_key_shaped_strings(secret: str) -> None:
    out = redact(f"Incorrect API key provided: {secret}. Check it.")
    assert secret not in out
    assert REDACTED in out
    assert out.startswith("Incorrect API key provided: ")


def test_redact_key_value_and_bearer_forms() -> None:
    out = redact('api_key=hunter2 token: "abc" Authorization: Bearer abc.def-ghi password=pw1')
    for leaked in ("hunter2", '"abc"', "abc.def-ghi", "pw1"):
        assert leaked not in out
    assert "api_key=" in out


def test_redact_keeps_ordinary_words_and_request_ids() -> None:
    text = "Rate limit reached for gpt-4o on tokens per min. req_011CSHoEeqs5C35K2UUqR7Fy"
    assert redact(text) == text


def test_openai_error_excerpt_names_type_and_redacts_message() -> None:
    body = json.dumps(
        {
            "error": {
                "message": "Incorrect API key provided: sk-proj-AAAABBBBCCCC1234. See docs.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
    ).encode()
    excerpt, etype = error_excerpt(body, truncated=False)
    assert etype == "invalid_request_error"
    assert "code=invalid_api_key" in excerpt
    assert "sk-proj-AAAABBBBCCCC1234" not in excerpt
    assert REDACTED in excerpt


def test_anthropic_error_excerpt_keeps_request_id() -> None:
    body = json.dumps(
        {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"},
            "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy",
        }
    ).encode()
    excerpt, etype = error_excerpt(body, truncated=False)
    assert etype == "overloaded_error"
    assert "message='Overloaded'" in excerpt
    assert "request_id=req_011CSHoEeqs5C35K2UUqR7Fy" in excerpt


def test_gemini_error_type_is_the_status_not_the_numeric_code() -> None:
    body = json.dumps(
        {"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED"}}
    ).encode()
    excerpt, etype = error_excerpt(body, truncated=False)
    assert etype == "RESOURCE_EXHAUSTED"
    assert "code=429" in excerpt


def test_excerpt_is_bounded_and_never_the_whole_body() -> None:
    message = "x " * 5000
    body = json.dumps({"error": {"message": message, "type": "server_error"}}).encode()
    excerpt, _ = error_excerpt(body, truncated=False, max_chars=300)
    assert len(excerpt) <= 300
    assert len(excerpt) < len(body)


def test_non_json_body_is_described_never_quoted() -> None:
    body = b"<html><body>Bad gateway: upstream sk-live-secret</body></html>"
    excerpt, etype = error_excerpt(body, truncated=True)
    assert etype is None
    assert excerpt == f"non-JSON error body ({len(body)}+ bytes)"


def test_json_without_error_fields_is_described() -> None:
    excerpt, etype = error_excerpt(b'{"detail": {"secret": "x"}}', truncated=False)
    assert etype is None
    assert "secret" not in excerpt
    excerpt, _ = error_excerpt(b"[1, 2]", truncated=False)
    assert excerpt.startswith("JSON error body without")


def test_retry_after_forms() -> None:
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"Retry-After": "-1"}) is None
    assert retry_after_seconds({"Retry-After": "nan"}) is None
    assert retry_after_seconds({}) is None
    date = email.utils.formatdate(1_000_010.0, usegmt=True)
    assert retry_after_seconds({"Retry-After": date}, now=1_000_000.0) == pytest.approx(10.0)
    assert retry_after_seconds({"Retry-After": "not a date"}) is None


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {}, True),
        (500, {}, True),
        (529, {}, True),
        (408, {}, True),
        (400, {}, False),
        (401, {}, False),
        (400, {"x-should-retry": "true"}, True),
        (503, {"X-Should-Retry": "false"}, False),
    ],
)
def test_retryable_hint(status: int, headers: dict[str, str], expected: bool) -> None:
    assert is_retryable(status, headers) is expected
