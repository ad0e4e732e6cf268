"""The old path of the tool registry and argument validation: ``agent_gate.tools``.

Everything here lives in ``agent_gate.tools`` now (spec, registry, validate,
models, errors); this module only re-exports the public names so that
``from agent_gate.schema import ToolRegistry`` and the like keep working. New code
imports from ``agent_gate.tools`` (or the top level, ``agent_gate``).
"""

from __future__ import annotations

from agent_gate.errors import json_type_name
from agent_gate.tools import (
    COERCION_UNSTABLE,
    DISPATCH_MODES,
    ArgumentError,
    ArgumentsInvalid,
    ArgumentsNotObject,
    CallInfo,
    Effect,
    Idempotency,
    Reconciled,
    Reconciliation,
    Tool,
    ToolDefinitionError,
    ToolOptions,
    ToolRegistry,
    ToolSpec,
    UnknownTool,
    json_pointer,
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
    "json_type_name",
]
