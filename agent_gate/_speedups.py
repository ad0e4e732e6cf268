"""The one switch for agent-gate's fast paths, read once at import.

Every compiled or shortcut path in the package (msgspec/orjson JSON, jsonschema-rs
validation, the SSE decoder's whole-chunk path, the accumulator's known-adapter
path) has a plain reference beside it with the same interface. ``PURE_PYTHON``
decides, for the whole process, which one runs: ``AGENT_GATE_PURE_PYTHON=1`` turns
every fast path off, so the references can be exercised, measured, or relied on
alone (a compiled wheel missing on some platform must never change an answer).
"""

from __future__ import annotations

import os

__all__ = ["PURE_PYTHON"]

PURE_PYTHON: bool = os.environ.get("AGENT_GATE_PURE_PYTHON", "") not in ("", "0")
"""True when ``AGENT_GATE_PURE_PYTHON`` is set to anything but ``0`` (read at import)."""
