"""Which storage path runs the ledger's statements: the one site that picks.

Two implementations of the same interface (``prepared.prepare(conn, key, build)
.run(conn, params) -> Rows`` and ``dialect.begin_write`` / ``begin_read``):

* ``CORE``, the reference: plain SQLAlchemy Core. Every transaction is begun and
  ended by ``Connection.begin()`` on a pooled connection, every statement runs
  through ``Connection.execute``, values pass Core's own bind and result
  processors. It relies on no SQLAlchemy internals.
* ``FAST``: the same statements compiled once per backend and run on the DB-API
  cursor of the connection the transaction holds (``prepared``), and on SQLite a
  few connections kept checked out between transactions with ``BEGIN``/``COMMIT``
  issued on the driver (``dialect._sqlite_transaction``). It falls back to Core
  whenever anyone could notice the difference (a listener, echo); what it must ask
  SQLAlchemy for that is in ``_sa_private``.

Both pass the same ledger tests (``tests/ledger/conftest.py`` runs them over both).
The choice is made per engine, here only: ``Ledger(..., backend=...)`` or
``create_ledger_engine(..., backend=...)``, else ``$AGENT_GATE_LEDGER_BACKEND``
(``core`` or ``fast``), else ``FAST`` unless ``AGENT_GATE_PURE_PYTHON`` is set.
It is kept on the engine's dialect, which is also where compiled statements are
cached, so the hot path asks nothing more than before.
"""

from __future__ import annotations

import os
from typing import Any

import agent_gate._speedups as _speedups
from agent_gate.errors import LedgerConfigError

__all__ = [
    "BACKENDS",
    "CORE",
    "ENV_BACKEND",
    "FAST",
    "FAST_CACHE",
    "choose",
    "chosen",
    "default",
    "is_fast",
    "resolve",
]

CORE = "core"
FAST = "fast"
BACKENDS = (CORE, FAST)
ENV_BACKEND = "AGENT_GATE_LEDGER_BACKEND"
_ATTR = "_agent_gate_backend"
FAST_CACHE = "_agent_gate_prepared"
"""Where a ``FAST`` dialect caches its compiled statements (``prepared.prepare``): a
dialect that has one is fast, which is all the hot path needs to know."""


def _valid(name: str, source: str) -> str:
    if name not in BACKENDS:
        raise LedgerConfigError(f"{source}: unknown ledger backend {name!r}; use 'core' or 'fast'")
    return name


def default() -> str:
    """The backend an engine gets when nobody names one."""
    named = os.environ.get(ENV_BACKEND, "").strip().lower()
    if named:
        return _valid(named, f"${ENV_BACKEND}")
    return CORE if _speedups.PURE_PYTHON else FAST


def resolve(backend: str | None) -> str:
    """``backend`` checked, or ``default()`` when None (before any engine is made)."""
    return _valid(backend, "storage") if backend is not None else default()


def choose(dialect: Any, backend: str | None = None) -> str:
    """Fix ``dialect``'s (one engine's) backend: ``backend``, else ``default()``."""
    name = resolve(backend)
    if name != FAST:
        dialect.__dict__.pop(FAST_CACHE, None)
    dialect.__dict__[_ATTR] = name
    return name


def chosen(dialect: Any) -> str:
    """The backend of ``dialect``'s engine (chosen now, by default, if never chosen)."""
    name: str | None = dialect.__dict__.get(_ATTR)
    return name if name is not None else choose(dialect)


def is_fast(dialect: Any) -> bool:
    return chosen(dialect) == FAST
