"""The one compare-and-set builder.

Every change of a call's row the ledger makes to a row it saw goes through one
statement shape: ``UPDATE tool_calls SET ... WHERE id=? AND state=? AND version=?``
plus the guard, built here (``statement``) and run by the transaction
(``txn.Txn.compare_and_set``); ``flows`` builds its arrows on it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from sqlalchemy import BigInteger, bindparam, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement

from agent_gate.ledger.records import (
    CALL_COLUMNS,
    CALLS,
    CallRecord,
    DbNowPlus,
    Guard,
    moved,
)
from agent_gate.ledger.sql import db_now_ms
from agent_gate.ledger.states import CallState

__all__ = ["NO_GUARD", "predicted", "statement", "stored_values"]

NO_GUARD = Guard()
"""The guard of an arrow that names only the row's state and version."""


def statement(
    dialect: Dialect, rec: CallRecord, values: Mapping[str, Any], guard: Guard
) -> tuple[Hashable, Callable[[], Any], dict[str, Any]]:
    """``UPDATE tool_calls SET values WHERE id, state, version (and guard)`` for the row
    the caller saw at ``rec.state``/``rec.version``: the key naming its shape, its
    builder and its parameters. It returns the row as updated where the dialect can
    (PostgreSQL; SQLite 3.35+): one statement fewer per transition. A ``DbNowPlus``
    value is computed by the database."""
    returning = dialect.update_returning
    # The columns in the caller's order: a call site always sets them in one order,
    # so this names one statement per site without sorting on every call.
    keys = tuple(values)
    clocked = tuple([k for k, v in values.items() if isinstance(v, DbNowPlus)])
    owner_guard = guard.owner and guard.lease_owner is not None
    no_owner = guard.owner and guard.lease_owner is None
    shape = ("cas", keys, clocked, owner_guard, no_owner, guard.lease_expired, returning)

    def build() -> Any:
        c = CALLS.c
        where: list[ColumnElement[bool]] = [
            c.id == bindparam("w_id", type_=c.id.type),
            c.state == bindparam("w_state", type_=c.state.type),
            c.version == bindparam("w_version", type_=c.version.type),
        ]
        if owner_guard:
            where.append(c.lease_owner == bindparam("w_owner", type_=c.lease_owner.type))
        if no_owner:
            where.append(c.lease_owner.is_(None))
        if guard.lease_expired:
            where.append(c.lease_expires_ms < db_now_ms())
        sets: dict[str, Any] = {
            k: (
                db_now_ms() + bindparam(k, type_=BigInteger())
                if k in clocked
                else bindparam(k, type_=c[k].type)
            )
            for k in keys
        }
        stmt = update(CALLS).where(*where).values(sets)
        return stmt.returning(*CALL_COLUMNS) if returning else stmt

    params = stored_values(values) if clocked else dict(values)
    params["w_id"] = rec.row_id
    params["w_state"] = rec.state._value_
    params["w_version"] = rec.version
    if owner_guard:
        params["w_owner"] = guard.lease_owner
    return shape, build, params


def stored_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` as parameters: a ``DbNowPlus`` as its milliseconds (the statement
    adds the database's clock)."""
    return {k: (v.ms if isinstance(v, DbNowPlus) else v) for k, v in values.items()}


def predicted(rec: CallRecord, values: Mapping[str, Any]) -> CallRecord:
    """What an arrow whose row is read only after the commit leaves of the row for the
    next arrow of the same transaction to name (its state, version and attempt)."""
    return moved(rec, CallState(values["state"]), values["version"],
                 values.get("attempt", rec.attempt))
