"""New calls and their tasks: the one insert of a ``tool_calls`` row.

A call is recorded once, as ``received``, under its (task, call id) and its dedupe
key; seeing it again returns the stored row. Its task row is created on first use
and bound to the principal and scope it was started with, which never change
afterwards (``TaskContextConflict``). A caller may decide the new call in the same
transaction (one commit instead of two): the decision goes through
``flows.apply_ruling`` like every other arrow, and a ruling that authorizes a call
about to run carries its claim (``Ruling.claim``) into that same commit.

On PostgreSQL's pipelined transactions (``pipeline``) the insert is not waited for
when this process holds a spare row id (``_SpareIds``, asked of the sequence in the
previous intakes' round trips): the call is inserted under it with a plain
``INSERT``, decided and claimed at once, and its rows read with the answer to the
``COMMIT`` (the transaction's one round trip). The decision's and the claim's
arrows are folded into that ``INSERT`` (``cas.Folded``): one row version, not
three. A call recorded before fails that
insert, nothing of the transaction commits, and it is recorded again the usual way
(``ON CONFLICT DO NOTHING``, the insert's answer read before anything is decided).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    TextClause,
    bindparam,
    exc,
    func,
    select,
    text,
    update,
)

from agent_gate.ledger import audit
from agent_gate.ledger.backend.dialect import for_update, insert_ignore, insert_returning
from agent_gate.ledger.backend.pg_pipeline import Unexpected
from agent_gate.ledger.backend.prepared import Open, Rows, opened, prepare
from agent_gate.ledger.canonical import canonical_json, sha256_hex
from agent_gate.ledger.cas import Folded, Later
from agent_gate.ledger.flows import Lost, apply, apply_ruling, lock_task, write
from agent_gate.ledger.reads import call_by
from agent_gate.ledger.records import (
    CALL_COLUMNS,
    CALLS,
    TASKS,
    CallRecord,
    NewCall,
    Ruling,
    TaskContextConflict,
    call_record,
    driver_call_record,
)
from agent_gate.ledger.states import CallState, Event
from agent_gate.ledger.txn import LedgerTxn

__all__ = ["ensure_task", "record"]

_RECEIVED = CallState.RECEIVED.value


def _guess_failed(error: exc.IntegrityError) -> bool:
    """Whether ``error`` is ``_insert_guessed``'s unique-key violation: the first
    error of its pipeline, so nothing after it ran."""
    return (
        getattr(error.orig, "sqlstate", None) == _UNIQUE_VIOLATION
        and (error.statement or "").startswith("INSERT INTO tool_calls ")
    )


_UNIQUE_VIOLATION = "23505"


SPARE_BATCH = 16
"""How many row ids one intake asks the sequence for when this process is running
out (``_SpareIds``): one statement per sixteen calls instead of one per call."""


def _next_call_ids() -> TextClause:
    # Not rolled back with the transaction: an id asked for is never handed twice.
    # In ascending order, each above every id handed before.
    return text(
        "SELECT nextval(pg_get_serial_sequence('tool_calls', 'id')) "
        f"FROM generate_series(1, {SPARE_BATCH}) ORDER BY 1"
    )


def _may_fold(conn: Connection, state: Open | None) -> bool:
    """Whether a SQLite intake may choose its row's id and fold its arrows into the
    insert: a transaction begun on the driver (the write lock held since its
    ``BEGIN IMMEDIATE``) that Core has not joined (a Core statement after the
    deferred insert would otherwise run first), on a SQLite that can return the row
    it inserts (3.35+: the folded ``INSERT`` is read back by its ``RETURNING``)."""
    return (
        state is not None and state.raw and not conn.in_transaction()
        and conn.dialect.name == "sqlite" and conn.dialect.insert_returning
    )


def _free_call_id() -> Select[Any]:
    c = CALLS.c
    task = bindparam("task_id", type_=c.task_id.type)
    call = bindparam("call_id", type_=c.call_id.type)
    key = bindparam("idem_key", type_=c.idem_key.type)
    return select(
        select(func.max(c.id)).scalar_subquery(),
        select(c.id).where(c.task_id == task, c.call_id == call).scalar_subquery(),
        select(c.id).where(c.task_id == task, c.idem_key == key).scalar_subquery(),
    )


def _free_id(conn: Connection, new: NewCall) -> tuple[int | None, int | None]:
    """SQLite: ``(free, seen)``: the id the call's row takes if inserted now, or the
    id of the row that recorded it before (under its call id, else its dedupe key).
    One statement, under the write lock: nobody else can insert before this
    transaction ends, and the free id is the one SQLite itself would give (the
    largest plus one; rows are never deleted)."""
    top, by_call, by_key = prepare(conn, "free_call_id", _free_call_id).run(
        conn, {"task_id": new.task_id, "call_id": new.call_id, "idem_key": new.idem_key}
    ).rows[0]
    seen = by_call if by_call is not None else by_key
    if seen is not None:
        return None, int(seen)
    return int(top or 0) + 1, None


def _context_detail(principal: str | None, scope: str | None) -> dict[str, Any] | None:
    """Hashes of the principal and scope a task is bound to (their JSON is on the task)."""
    info: dict[str, Any] = {}
    if principal is not None:
        info["principal_sha256"] = sha256_hex(principal)
    if scope is not None:
        info["scope_sha256"] = sha256_hex(scope)
    return info or None


def ensure_task(
    conn: Connection,
    task_id: str,
    provider: str | None,
    principal: str | None = None,
    scope: str | None = None,
) -> None:
    """Create the task row if missing; bind a principal/scope never given before;
    ``TaskContextConflict`` for one that differs from what the task was started with."""
    now = datetime.now(UTC)
    values = {"id": task_id, "created_at": now, "updated_at": now, "provider": provider,
              "principal": principal, "scope": scope}
    if insert_ignore(conn, TASKS, values):
        audit.append(
            conn, task_id=task_id, event="task_created", at=now,
            detail=_context_detail(principal, scope),
        )
        return
    if principal is None and scope is None:
        return
    ((stored_principal, stored_scope),) = prepare(
        conn,
        "task_context",
        lambda: for_update(
            conn,
            select(TASKS.c.principal, TASKS.c.scope).where(TASKS.c.id == bindparam("id")),
        ),
    ).run(conn, {"id": task_id}).rows
    bind: dict[str, Any] = {}
    for name, given, stored in (("principal", principal, stored_principal),
                                ("scope", scope, stored_scope)):
        if given is None or given == stored:
            continue
        if stored is not None:
            raise TaskContextConflict(
                f"task {task_id!r} was started with another {name} "
                f"(sha256 {sha256_hex(stored)[:12]} != {sha256_hex(given)[:12]}); "
                "a task keeps the principal and scope it was started with"
            )
        bind[name] = given
    if bind:
        conn.execute(update(TASKS).where(TASKS.c.id == task_id).values(**bind))
        audit.append(
            conn, task_id=task_id, event="task_bound", at=now,
            detail=_context_detail(bind.get("principal"), bind.get("scope")),
        )


def record(
    engine: Engine,
    new: NewCall,
    *,
    provider: str | None,
    actor: str | None,
    decide: Callable[[LedgerTxn, CallRecord], Ruling | None] | None,
    lock: bool,
    task_known: bool,
) -> tuple[CallRecord, bool]:
    """``Ledger.record``: insert the call as ``received`` unless already there, and
    with ``decide`` apply its decision in the same transaction. ``task_known``: the
    task row is known to exist bound to this principal and scope (skip ``ensure_task``)."""
    now = datetime.now(UTC)
    # The arrows applied to a row inserted in this very transaction cannot lose:
    # in a pipelined transaction they are not waited for (``flows.apply``'s
    # ``later``), and the row they leave is read after the commit.
    spare = _spare_ids(engine) if engine.dialect.name == "postgresql" else None
    row_id: int | None = None
    if spare is not None and spare.ids:
        with suppress(IndexError):  # another thread took the last one
            row_id = spare.ids.popleft()
    kw: dict[str, Any] = {"provider": provider, "actor": actor, "decide": decide,
                          "lock": lock, "task_known": task_known}
    later: list[Later] = []
    asked: list[Rows] = []
    try:
        try:
            rec, inserted = _record(engine, new, now, later=later, row_id=row_id,
                                    ask=asked if spare is not None and len(spare.ids) < 2
                                    else None, **kw)
        except exc.IntegrityError as error:
            if row_id is None or not _guess_failed(error):
                raise
            # The guess was wrong (the call was recorded before, or the id was
            # taken): that transaction committed nothing. Record it the usual way.
            later, asked = [], []
            rec, inserted = _record(engine, new, now, later=later, row_id=None, ask=None,
                                    **kw)
    except Unexpected:  # pragma: no cover - the row is ours until commit
        raise RuntimeError("a ledger row changed under its insert") from None
    if spare is not None:
        if inserted and not (later and isinstance(later[0], Folded)):
            # Inserted under the sequence's next id, above every spare one: a call
            # inserted under a spare id after it would sort before it.
            spare.ids.clear()
        spare.ids.extend(int(row[0]) for got in asked for row in got.rows)
    return (later[-1].record() if later else rec), inserted


class _SpareIds:
    """Row ids the ``tool_calls`` sequence handed this process for its next calls.

    A call on a task already known is inserted under one (``_record``'s ``row_id``),
    so that deciding and claiming it need not wait for the insert's answer: its
    ``RETURNING`` row comes with the ``COMMIT``'s answer, and one that inserted
    nothing (the call was recorded before) rolls the transaction back. A pipelined
    intake that finds fewer than two left asks the sequence for ``SPARE_BATCH``
    more in its own round trip. Kept per process (a forked child must not reuse its
    parent's); ids a process never uses are gaps in the sequence, as a rolled-back
    insert's are.
    """

    __slots__ = ("ids", "pid")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ids: deque[int] = deque()


_SPARE_ATTR = "_agent_gate_spare_call_ids"


def _spare_ids(engine: Engine) -> _SpareIds:
    spare: _SpareIds | None = engine.__dict__.get(_SPARE_ATTR)
    if spare is None or spare.pid != os.getpid():
        spare = engine.__dict__[_SPARE_ATTR] = _SpareIds()
    return spare


def _record(
    engine: Engine,
    new: NewCall,
    now: datetime,
    *,
    provider: str | None,
    actor: str | None,
    decide: Callable[[LedgerTxn, CallRecord], Ruling | None] | None,
    lock: bool,
    task_known: bool,
    later: list[Later],
    row_id: int | None,
    ask: list[Rows] | None,
) -> tuple[CallRecord, bool]:
    """One intake transaction. In a pipelined one, ``row_id``: insert under this id
    without waiting (``_SpareIds``); ``ask``: append the sequence's next ids to it."""
    rec: CallRecord | None
    with write(engine) as conn:
        if not task_known:
            ensure_task(conn, new.task_id, provider, new.principal, new.scope)
        if decide is not None and lock:
            lock_task(conn, new.task_id)
        # Asked now: a statement Core ran above (binding a task's principal) took the
        # transaction out of pipeline mode.
        state = opened(conn)
        pipe = state.pipe if state is not None else None
        values = {
            "task_id": new.task_id,
            "call_id": new.call_id,
            "idem_key": new.idem_key,
            "tool": new.tool,
            "effect": new.effect,
            "idempotency": new.idempotency,
            "args_hash": new.args_hash,
            "arguments": (
                new.arguments_json if new.arguments_json is not None
                else canonical_json(dict(new.arguments)) if new.arguments is not None
                else None
            ),
            "sealed_arguments": new.sealed_arguments,
            "state": _RECEIVED,
            "version": 0,
            "attempt": 0,
            "created_at": now,
            "updated_at": now,
            "trace_id": new.trace_id,
            "span_id": new.span_id,
        }
        fold_id, seen = (
            (row_id, None) if pipe is not None
            else _free_id(conn, new) if decide is not None and _may_fold(conn, state)
            else (None, None)
        )
        if seen is not None:  # recorded before: read it, insert nothing
            inserted = False
            rec = call_by(conn, id=seen)
        elif fold_id is not None and state is not None:
            # Inserted under that id, as late as it can be: the arrows applied to it
            # before anything else is sent are folded into its INSERT.
            later.append(Folded(conn, state, {**values, "id": fold_id}))
            inserted = True
            rec = call_record(tuple(
                [fold_id if c.name == "id" else values.get(c.name) for c in CALL_COLUMNS]
            ))
        else:
            returned = insert_returning(conn, CALLS, values)
            if returned is None:  # the dialect cannot: insert, then read the row
                inserted = insert_ignore(conn, CALLS, values)
                rec = call_by(conn, task_id=new.task_id, call_id=new.call_id)
            else:
                inserted = bool(returned.rows)
                rec = (
                    driver_call_record(conn.dialect, returned.rows[0], returned.processed)
                    if inserted
                    else call_by(conn, task_id=new.task_id, call_id=new.call_id)
                )
        if rec is None:
            rec = call_by(conn, task_id=new.task_id, idem_key=new.idem_key)
        if rec is None:  # pragma: no cover - a row we could not insert must exist
            raise RuntimeError("ledger row vanished during insert")
        if inserted:
            info: dict[str, Any] = {"tool": new.tool, "args_hash": new.args_hash,
                                    "idem_key": new.idem_key}
            if new.sealed_arguments is not None:
                # The redacted form, never the values: what the policy lets the trail keep.
                info["arguments"] = dict(new.arguments or {})
            audit.append(
                conn, task_id=new.task_id, call_row_id=rec.row_id, call_id=new.call_id,
                event="received", to_state=_RECEIVED, actor=actor, detail=info, at=now,
            )
            ruling = decide(LedgerTxn(conn), rec) if decide is not None else None
            if ruling is not None and ruling.event is not None:
                try:
                    sent = len(later)
                    rec = apply_ruling(conn, rec, ruling, actor=actor, later=later)
                    if ruling.claim is not None and rec.state is CallState.AUTHORIZED:
                        # Runs at once: claimed in this commit (two commits a call).
                        sent = len(later)
                        claimed = apply(conn, rec, Event.CLAIM, actor=actor,
                                        lease=ruling.claim, later=later)
                        if claimed is None:
                            raise Lost
                        rec = claimed
                    # The last arrow was applied at once (Core joined the transaction
                    # in between): its row is the one read, not a deferred one.
                    if len(later) == sent:
                        later.clear()
                except Lost:  # pragma: no cover - the row is ours until commit
                    raise RuntimeError(
                        f"ledger row {rec.row_id} changed under its insert"
                    ) from None
        if ask is not None and state is not None and state.pipe is not None:
            # After the arrows (which it would stop folding into the insert): the
            # next calls' ids, above this one's (a process's calls keep their order
            # by id).
            ask.append(prepare(conn, "next_call_ids", _next_call_ids).run(conn, {}))
    return rec, inserted
