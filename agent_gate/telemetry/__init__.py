"""Traces, metrics and logs of every gated call and stream, behind one observer.

``observer()`` is resolved once per process: the OpenTelemetry observer
(``agent_gate.telemetry.otel``) when ``opentelemetry-api`` is importable (the
``agent-gate[otel]`` extra), else the base ``Observer``, which writes ``logging``
records only and imports nothing more. A ``Gate`` takes it at construction (or the
one passed as ``Gate(..., telemetry=...)``); a transport stream at its opening.

The library installs no log handler but the ``NullHandler`` the logging HOWTO
advises for libraries, so that an application that configured nothing sees no
``agent_gate`` records on stderr; records reach whatever handlers the host sets up.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from typing import TYPE_CHECKING

from agent_gate._lazy import exports
from agent_gate.telemetry.logs import CALL_LOG, MIGRATE_LOG, STREAM_LOG

if TYPE_CHECKING:
    from agent_gate.telemetry.base import CallTrace, Observer, StreamTrace

__all__ = [
    "CALL_LOG",
    "MIGRATE_LOG",
    "STREAM_LOG",
    "CallTrace",
    "Observer",
    "StreamTrace",
    "observer",
    "otel_available",
]

logging.getLogger("agent_gate").addHandler(logging.NullHandler())

_resolved: Observer | None = None
_lock = threading.Lock()

__getattr__, __dir__ = exports(__name__, {
    "CallTrace": "agent_gate.telemetry.base",
    "Observer": "agent_gate.telemetry.base",
    "StreamTrace": "agent_gate.telemetry.base",
}, globals())


def otel_available() -> bool:
    """Is the OpenTelemetry API importable here (without importing it)?"""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):
        return False


def observer() -> Observer:
    """The process's default observer, chosen on first use and kept."""
    global _resolved
    found = _resolved
    if found is None:
        with _lock:
            if _resolved is None:
                if otel_available():
                    from agent_gate.telemetry.otel import OtelObserver

                    _resolved = OtelObserver()
                else:
                    from agent_gate.telemetry.base import Observer

                    _resolved = Observer()
            found = _resolved
    return found
