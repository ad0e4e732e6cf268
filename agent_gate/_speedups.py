"""The one switch for agent-gate's fast paths, read once at import, and the compiled
libraries it lets in.

Every compiled or shortcut path in the package has a plain reference beside it with
the same interface, and the fast one only answers where it cannot differ:

============================================  ============================================
fast path (where)                             reference beside it
============================================  ============================================
msgspec event decode (``providers.base``)     ``json.loads``
orjson event snapshot (``providers.base``)    ``plainjson.dumps(sort_keys=True)``
jsonschema-rs accept (``schema``)             python-jsonschema
SSE short path (``sse.decoder``)              the decoder's line machinery; both are
                                              checked against ``sse._reference``
known-adapter path (``accumulate``)           ``Accumulator._feed_any``
typed Chat fragment decode                    the payload decoded to a dict, then
(``providers.openai_chat``)                   ``hot_delta`` (``accumulate``'s known path)
typed Responses delta decode                  the payload decoded to a dict, then
(``providers.openai_responses``)              ``hot_delta`` (``accumulate``'s known path)
seeded replay digest (``providers.base``)     ``content_digest``
strict parse short path (``strict_json``)     ``parse_arguments_reference``
frozen record fill (``ledger.records``)       ``CallRecord``'s own ``__init__``
============================================  ============================================

``PURE_PYTHON`` decides, for the whole process, which one runs:
``AGENT_GATE_PURE_PYTHON=1`` turns every fast path off, so the references can be
exercised, measured, or relied on alone (a compiled wheel missing on some platform
must never change an answer). Two more stood here until issue 15 measured them
under 5% of the decision path and they went: msgspec's strict argument parse and
orjson's canonical bytes (``tests/benchmarks/run.py --only tricks`` measures the
rest). The compiled libraries are imported here and nowhere
else (but ``schema``, which picks jsonschema-rs by reading ``PURE_PYTHON``); each
name below is ``None`` when its library is missing or the switch is on, and the
module that uses it keeps the name in a global of its own, which the tests and the
benchmarks set to ``None`` to run the reference in-process.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = [
    "ORJSON_SNAPSHOT_OPTION",
    "PURE_PYTHON",
    "msgspec",
    "msgspec_decode",
    "orjson_dumps",
]

PURE_PYTHON: bool = os.environ.get("AGENT_GATE_PURE_PYTHON", "") not in ("", "0")
"""True when ``AGENT_GATE_PURE_PYTHON`` is set to anything but ``0`` (read at import)."""


def _compiled(name: str) -> ModuleType | None:
    """The compiled module ``name``, or ``None`` when it is missing or switched off."""
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


# The compiled libraries are imported when a name below is first read (PEP 562), not
# with this module: the ledger reads ``PURE_PYTHON`` here, and a command that only
# opens a ledger (``agent-gate tasks``) has no use for msgspec or orjson.

msgspec: ModuleType | None
"""msgspec itself, for the typed decoders of ``providers.openai_chat`` (None: off)."""
msgspec_decode: Callable[[str], Any] | None
"""msgspec's JSON decoder: keeps integers beyond 64 bits exact, which orjson does not."""
orjson_dumps: Callable[..., bytes] | None
"""``orjson.dumps(value, default, option)``: refuses integers beyond 64 bits."""
ORJSON_SNAPSHOT_OPTION: int
"""orjson's options for an event snapshot (0: off)."""

_COMPILED = frozenset({"msgspec", "msgspec_decode", "orjson_dumps", "ORJSON_SNAPSHOT_OPTION"})


def _load() -> dict[str, Any]:
    msgspec_json = _compiled("msgspec.json")
    orjson = _compiled("orjson")
    return {
        "msgspec": _compiled("msgspec"),
        "msgspec_decode": msgspec_json.Decoder().decode if msgspec_json is not None else None,
        "orjson_dumps": orjson.dumps if orjson is not None else None,
        "ORJSON_SNAPSHOT_OPTION": (
            # Everything orjson would serialize differently from json.dumps(default=str)
            # (datetimes, dataclasses, subclasses of builtins) goes to ``default``, which
            # the caller makes refuse it, so that it falls back to the reference.
            orjson.OPT_SORT_KEYS
            | orjson.OPT_PASSTHROUGH_DATETIME
            | orjson.OPT_PASSTHROUGH_DATACLASS
            | orjson.OPT_PASSTHROUGH_SUBCLASS
            if orjson is not None
            else 0
        ),
    }


def __getattr__(name: str) -> Any:
    if name not in _COMPILED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    loaded = _load()
    globals().update(loaded)  # resolved once: later reads are plain attributes
    return loaded[name]
