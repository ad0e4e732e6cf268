"""Tools: what each one is, the registry, and validating a call's arguments.

One job per module, arrows pointing down:

- ``spec``: ``ToolSpec`` and the enums every layer shares (``Effect``,
  ``Idempotency``, ``Reconciliation``), ``CallInfo``, ``ToolOptions``;
- ``registry``: ``Tool`` (a spec bound to its function) and ``ToolRegistry``;
- ``validate``: the reference validator (python-jsonschema) and the one site
  that picks it or ``_fastpath``'s jsonschema-rs shortcut (same interface);
- ``models``: tools declared with a pydantic model;
- ``signature``: tools declared as plain typed functions (the schema from the hints);
- ``definitions``: the tools as each provider API's tool list (``ToolRegistry.definitions``);
- ``errors``: what a refused declaration or call is told, as JSON pointers and
  schema keywords, never argument values.

``agent_gate.schema`` is the old path of these names and re-exports them.
"""

from __future__ import annotations

from agent_gate.errors import (
    COERCION_UNSTABLE,
    ArgumentError,
    ArgumentsInvalid,
    ArgumentsNotObject,
    ToolDefinitionError,
    UnknownTool,
)
from agent_gate.tools.pointer import json_pointer
from agent_gate.tools.registry import Tool, ToolRegistry
from agent_gate.tools.spec import (
    DISPATCH_MODES,
    CallInfo,
    Effect,
    Idempotency,
    Reconciled,
    Reconciliation,
    ToolOptions,
    ToolSpec,
)

__all__ = [
    "COERCION_UNSTABLE",
    "DISPATCH_MODES",
    "ArgumentError",
    "ArgumentsInvalid",
    "ArgumentsNotObject",
    "CallInfo",
    "Effect",
    "Idempotency",
    "Reconciled",
    "Reconciliation",
    "Tool",
    "ToolDefinitionError",
    "ToolOptions",
    "ToolRegistry",
    "ToolSpec",
    "UnknownTool",
    "json_pointer",
]
