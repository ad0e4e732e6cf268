"""A registry's tools as each provider API's tool list: one schema, many spellings.

The schema a model is shown and the schema the gate validates its calls against
must be the same object, or the model is told one thing and judged by another.
``definitions`` writes each ``ToolSpec`` in the shape the API expects, copying the
schema verbatim (deep-copied, so a caller editing the list cannot change the spec):

- ``openai-responses``: ``{"type": "function", "name", "description", "parameters",
  "strict": false}``. ``strict`` is required by the API; it is false because strict
  mode only accepts schemas whose every property is required, and the gate checks
  every call against the full schema anyway.
- ``openai-chat``: ``{"type": "function", "function": {"name", "description",
  "parameters"}}`` (Chat Completions, Azure and compatible servers).
- ``anthropic``: ``{"name", "description", "input_schema"}``.
- ``gemini``: one ``{"functionDeclarations": [...]}`` tool whose declarations carry
  the schema as ``parametersJsonSchema``, the field that takes JSON Schema as it is
  (``additionalProperties``, ``$defs``/``$ref``, ``anyOf``). The older ``parameters``
  field takes only an OpenAPI 3.0 subset, and translating into it would drop the
  very constraints the gate enforces, so it is not offered.
- ``mcp``: ``{"name", "description", "inputSchema", "annotations"}`` with
  ``readOnlyHint``, ``destructiveHint`` and ``idempotentHint`` read off the tool's
  effect and idempotency (``natural`` alone is idempotent to a repeated call).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from agent_gate.errors import UnknownProviderError
from agent_gate.tools.spec import Effect, Idempotency, ToolSpec

__all__ = ["DEFINITION_FORMATS", "definitions"]


def _described(spec: ToolSpec, out: dict[str, Any]) -> dict[str, Any]:
    if spec.description:
        out["description"] = spec.description
    return out


def _schema(spec: ToolSpec) -> dict[str, Any]:
    return copy.deepcopy(dict(spec.schema))


def _openai_responses(spec: ToolSpec) -> dict[str, Any]:
    out = _described(spec, {"type": "function", "name": spec.name})
    out["parameters"] = _schema(spec)
    out["strict"] = False
    return out


def _openai_chat(spec: ToolSpec) -> dict[str, Any]:
    function = _described(spec, {"name": spec.name})
    function["parameters"] = _schema(spec)
    return {"type": "function", "function": function}


def _anthropic(spec: ToolSpec) -> dict[str, Any]:
    out = _described(spec, {"name": spec.name})
    out["input_schema"] = _schema(spec)
    return out


def _gemini(spec: ToolSpec) -> dict[str, Any]:
    out = _described(spec, {"name": spec.name})
    out["parametersJsonSchema"] = _schema(spec)
    return out


def _mcp(spec: ToolSpec) -> dict[str, Any]:
    out = _described(spec, {"name": spec.name})
    out["inputSchema"] = _schema(spec)
    out["annotations"] = {
        "readOnlyHint": spec.effect is Effect.READ,
        "destructiveHint": spec.effect is Effect.DESTRUCTIVE,
        "idempotentHint": spec.idempotency is Idempotency.NATURAL,
    }
    return out


_FORMATS: dict[str, Callable[[ToolSpec], dict[str, Any]]] = {
    "openai-responses": _openai_responses,
    "openai-chat": _openai_chat,
    "anthropic": _anthropic,
    "gemini": _gemini,
    "mcp": _mcp,
}

DEFINITION_FORMATS: tuple[str, ...] = tuple(_FORMATS)
"""The provider names ``definitions`` knows."""


def definitions(specs: Iterable[ToolSpec], provider: str) -> list[dict[str, Any]]:
    """The tool list ``provider``'s API takes for these specs, in their order."""
    write = _FORMATS.get(provider)
    if write is None:
        raise UnknownProviderError(provider, DEFINITION_FORMATS)
    written = [write(spec) for spec in specs]
    if provider == "gemini":
        return [{"functionDeclarations": written}] if written else []
    return written
