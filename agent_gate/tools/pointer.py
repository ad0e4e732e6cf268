"""Where arguments failed, as RFC 6901 JSON pointers: the one location format both
jsonschema and pydantic map their error locations to, so an ``ArgumentError`` reads the
same whichever validator found it."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["escape_token", "json_pointer"]


def escape_token(token: str | int) -> str:
    """One reference token of a JSON pointer, with ``~`` and ``/`` escaped."""
    return str(token).replace("~", "~0").replace("/", "~1")


def json_pointer(path: Sequence[str | int]) -> str:
    """RFC 6901 pointer: the one location format both jsonschema and pydantic map to."""
    return "".join("/" + escape_token(p) for p in path)
