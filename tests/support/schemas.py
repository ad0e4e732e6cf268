"""The tool schemas the test suites declare their tools with, written once."""

from __future__ import annotations

from typing import Any

WEATHER: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
    "required": ["city"],
    "additionalProperties": False,
}
"""``get_weather(city, unit="celsius")``: a read."""

EMAIL: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "format": "email"},
        "subject": {"type": "string"},
        "body": {"type": "string"},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}
"""``send_email(to, subject, body)``: a write."""

NOTE: dict[str, Any] = {
    "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
}
"""A tool that posts one note: ``{"text": ...}``."""

PATH: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
"""A tool on one file path."""

EMAIL_ANY_TO: dict[str, Any] = {
    **EMAIL,
    "properties": {**EMAIL["properties"], "to": {"type": "string"}},
}
"""``send_email`` whose ``to`` is any text: for recorded and generated streams, whose
addresses are not all valid ones (``EMAIL`` checks the format)."""

FILE_WRITE: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
    "additionalProperties": False,
}
"""``file_write(path, content)``: a write."""
