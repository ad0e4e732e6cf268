"""The one site that picks how the ledger's statements reach the database.

The rules (``flows``, ``intake``, ``approvals``, ``quota``, the audit append) ask one
interface, ``txn.Txn``; this package holds everything under it. Three
implementations, and one place that chooses among them (``txn_class``), as
SQLAlchemy's ``engine/processors.py`` picks its compiled or pure twin:

* ``core.CoreTxn``, the reference: plain SQLAlchemy Core on SQLite and PostgreSQL.
  Every transaction is begun and ended by ``Connection.begin()`` on a pooled
  connection, every statement runs through ``Connection.execute``. It relies on no
  SQLAlchemy internals.
* ``sqlite_fast.SqliteFastTxn``: the same statements compiled once and run on the
  DB-API cursor (``prepared``), on a few connections kept checked out between
  transactions with ``BEGIN``/``COMMIT`` issued on the driver (``spares``), a new
  call's arrows folded into its insert (``fast``): two synced commits a gate call.
* ``pg_fast.PgPipelineTxn``: PostgreSQL's write transactions in libpq's pipeline
  mode (``pg_pipeline``, ``_libpq``): two round trips a gate call.

The fast ones fall back to Core whenever anyone could notice the difference (a
listener, echo); what they must ask SQLAlchemy for that is in ``_sa_private``.
All pass the same ledger tests (``tests/ledger/conftest.py`` runs them over each).

The storage is chosen per engine, here only: ``Ledger(..., storage=...)`` or
``create_ledger_engine(..., storage=...)``, else ``$AGENT_GATE_LEDGER_BACKEND``
(``core`` or ``fast``), else ``FAST`` unless ``AGENT_GATE_PURE_PYTHON`` is set; the
fast implementation is then the engine's dialect's. It is kept on the engine's
dialect, which is also where compiled statements are cached. Every transaction,
the rules' (``writing``, ``reading``, ``transact``) and the plain ones of the read
models and migrations (``begin_write``, ``begin_read``), is begun as the chosen
implementation begins them (``dialect.pooled``, or a fast one's ``spares.begin_fast``):
nothing else asks which one it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine

import agent_gate._speedups as _speedups
from agent_gate.errors import LedgerConfigError
from agent_gate.ledger.backend import spares
from agent_gate.ledger.backend.dialect import DEFAULT_BUSY_TIMEOUT, build_engine, pooled

if TYPE_CHECKING:
    from agent_gate.ledger.txn import Txn

_T = TypeVar("_T")

__all__ = [
    "BACKENDS",
    "CORE",
    "ENV_BACKEND",
    "FAST",
    "begin_read",
    "begin_write",
    "choose",
    "chosen",
    "create_ledger_engine",
    "default",
    "joined",
    "on",
    "reading",
    "register",
    "release",
    "resolve",
    "transact",
    "txn_class",
    "writing",
]

CORE = "core"
FAST = "fast"
BACKENDS = (CORE, FAST)
ENV_BACKEND = "AGENT_GATE_LEDGER_BACKEND"
_ATTR = "_agent_gate_backend"


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
    dialect.__dict__.pop(_TXN_ATTR, None)
    dialect.__dict__[_ATTR] = name
    return name


def chosen(dialect: Any) -> str:
    """The backend of ``dialect``'s engine (chosen now, by default, if never chosen)."""
    name: str | None = dialect.__dict__.get(_ATTR)
    return name if name is not None else choose(dialect)


_TXN_ATTR = "_agent_gate_txn_class"


def txn_class(dialect: Any) -> type[Txn]:
    """The ``Txn`` implementation of ``dialect``'s engine: the one choice of backend."""
    cls: type[Txn] | None = dialect.__dict__.get(_TXN_ATTR)
    if cls is not None:
        return cls
    if chosen(dialect) != FAST:
        from agent_gate.ledger.backend.core import CoreTxn as cls
    elif dialect.name == "postgresql":
        from agent_gate.ledger.backend.pg_fast import PgPipelineTxn as cls
    else:
        from agent_gate.ledger.backend.sqlite_fast import SqliteFastTxn as cls
    dialect.__dict__[_TXN_ATTR] = cls
    return cls


def create_ledger_engine(
    url: str,
    *,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    create: bool = True,
    storage: str | None = None,
) -> Engine:
    """An engine configured for durable compare-and-set writes on its database, its
    backend chosen (``storage``: ``"core"`` or ``"fast"``; default ``default()``).

    ``create=False``: not even its first connection may create a SQLite file (a
    caller that checked ``require_ledger_file`` first keeps that promise under a
    race with whoever deletes the file).
    """
    storage = resolve(storage)
    fast = storage == FAST
    engine = build_engine(url, busy_timeout=busy_timeout, create=create, ping=not fast)
    choose(engine.dialect, storage)
    if fast and engine.dialect.name == "postgresql":
        from agent_gate.ledger.backend import pg_pipeline

        if pg_pipeline.supported():
            pg_pipeline.install(engine)
    return engine


def begin_write(engine: Engine, *, reuse: bool = True) -> AbstractContextManager[Connection]:
    """A transaction that will write, begun as ``engine``'s backend begins them: it
    holds the write lock from its first statement on SQLite; on PostgreSQL rows are
    locked as they are updated. ``reuse=False``: on a connection of its own, not one
    kept for the next transaction (for callers such as Alembic that keep references
    to it)."""
    if chosen(engine.dialect) != FAST:
        return pooled(engine, write=True)
    return spares.begin_fast(engine, write=True, reuse=reuse)


def begin_read(engine: Engine, *, reuse: bool = True) -> AbstractContextManager[Connection]:
    """A read-only transaction over one consistent snapshot, taking no lock
    (``reuse`` as for ``begin_write``)."""
    if chosen(engine.dialect) != FAST:
        return pooled(engine, write=False)
    return spares.begin_fast(engine, write=False, reuse=reuse)


@contextmanager
def writing(engine: Engine, *, guess: bool = True) -> Iterator[Txn]:
    """A write transaction: its audit entries linked right before it commits.
    ``guess=False``: the backend guesses nothing (``transact``)."""
    cls = txn_class(engine.dialect)
    with begin_write(engine) as conn:
        txn = cls(conn, guess=guess)
        yield txn
        txn.finish()
    txn.after_commit()


@contextmanager
def reading(engine: Engine) -> Iterator[Txn]:
    """A read-only transaction over one consistent snapshot (``begin_read``)."""
    with begin_read(engine) as conn:
        yield txn_class(engine.dialect)(conn, staged=False)


def transact(engine: Engine, body: Callable[[Txn], _T]) -> tuple[Txn, _T]:
    """``body`` in one write transaction, and the transaction (for ``Txn.committed``).
    Run once more, the backend guessing nothing, when the first run failed on a
    guess of the backend's own and committed nothing (``Txn.retry``)."""
    txn: Txn | None = None
    try:
        with writing(engine) as txn:
            value = body(txn)
    except Exception as error:
        if txn is None or not txn.retry(error):
            raise
        with writing(engine, guess=False) as txn:
            value = body(txn)
    return txn, value


def on(conn: Connection) -> Txn:
    """The ``Txn`` of a transaction a plain ``Connection`` holds (opened with
    ``begin_write`` or ``begin_read``): each audit entry linked as appended."""
    return txn_class(conn.dialect)(conn, staged=False)


def joined(conn: Connection) -> Txn:
    """The ``Txn`` of a transaction the caller began on a connection of its own (a
    DBOS datasource's, for a transactional tool): always the reference, because the
    fast machinery only knows connections it opened; audit entries linked as appended."""
    from agent_gate.ledger.backend.core import CoreTxn

    return CoreTxn(conn, staged=False)


def register(engine: Engine) -> None:
    """A ledger opened ``engine``: in a forked child it starts with a pool of its own."""
    spares.forget_in_children(engine)


def release(engine: Engine) -> None:
    """Close the connections ``engine`` keeps between transactions (before dispose)."""
    spares.release_idle(engine)
