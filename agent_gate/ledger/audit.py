"""Appending to the audit trail, always inside the transaction that changed state,
and linking every entry into its task's hash chain.

A transition and its audit event commit together or not at all, so the trail can
never miss a transition nor describe one that did not happen. Details are bounded
JSON of ids, codes and hashes; callers never pass argument values here (redacted
stand-ins at most). ``append`` is the only writer of ``audit_events``.

One chain per task, many writers
================================

Each entry's hash covers its predecessor's in the same task
(``agent_gate.ledger.chain``). Linking needs "read the task's newest link, write
the next one" to be atomic across processes, so each task's newest link lives in
its row of ``audit_heads`` and an append locks that row only
(``dialect.for_update``: ``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite every
write transaction already holds the database write lock from its ``BEGIN
IMMEDIATE``). A second writer of the same task waits for the first to commit and
then reads the link the first one wrote, so two entries can never share a
predecessor (no fork) and ``seq`` has no gaps within a task: a rolled-back
transaction rolls back its entries and its move of the head together. Writers of
different tasks lock different rows and never wait for each other: no global row
is on the write path. ``agent_gate.ledger.checkpoints`` binds every task's head
into one root from time to time.

``_link`` is three statements: one read of the task's head ``FOR UPDATE``, one
multi-row ``INSERT`` of every entry of the transaction, one ``UPDATE`` of the head.
A task's first entry finds no head row; it inserts one (seq 0, genesis) unless a
racing writer did, and reads it again under the lock: once per task. In a
pipelined PostgreSQL transaction (``pipeline``) the same steps run in the server,
in one statement sent with the ``COMMIT`` (``_link_in_server``, the function of
revision 0007): the client writes each entry's hashed text around its link
(``chain.entry_parts``), the server reads the head under the lock, splices the link
in and hashes with ``sha256``, so that nothing in the transaction waits for the
head's answer and it commits in one round trip. The hashes are the ones
``chain.entry_hash`` computes; ``verify`` cannot tell the two writers apart.

The head lock is the last lock a write transaction takes: a transaction opened
with ``staged(conn)`` collects its events and ``flush`` links them right before
commit. A transaction that holds a head never waits for any other row (a
transaction touching several tasks locks their heads in task id order), so heads
cannot take part in a deadlock, and each is held only for the statements of the
flush.

The chain also vouches for each call's current state
=====================================================

A row of ``tool_calls`` is not hashed, so a raw ``UPDATE`` could move a finished
call back to ``authorized`` without touching the chain. Every state a call ever had
was written by a *transition entry* (``received``, then one per arrow of the state
machine: from one state to another), in the transaction that set it; so a call's
state must be the ``to_state`` of its newest transition entry. ``verify`` compares
the two for every call
(``state_rewritten``), and ``Ledger.claim`` refuses to run a call whose row
disagrees with its trail (``audited_state``), so a rewritten state is neither
clean nor run again. Audit-only entries (seen again, approval granted...) do not
count: they repeat a state some snapshot held, and may be older than the row.

The same holds for what else a call's entries vouch for: the row each ``received``
entry was written for still holds that call (``call_deleted``: without its row a
call runs again when sent again), and the quota charges the arrow that authorized
it recorded are still stored with their amounts (``charge_rewritten``: a task's
usage is the sum of its rows in ``quota_charges``, which are not hashed either).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Engine,
    bindparam,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from agent_gate._lazy import exports
from agent_gate.ledger.backend.dialect import begin_write, for_update, insert_ignore
from agent_gate.ledger.backend.prepared import opened, prepare
from agent_gate.ledger.chain import GENESIS, as_utc, entry_hash, entry_parts
from agent_gate.ledger.models import AUDIT_EVENTS, AUDIT_HEADS
from agent_gate.ledger.privacy import bound
from agent_gate.ledger.records import from_row

__all__ = [
    "MAX_DETAIL_CHARS",
    "AuditRecord",
    "ChainProblem",
    "ChainReport",
    "append",
    "audited_state",
    "close_stage",
    "flush",
    "open_stage",
    "read",
    "record_of",
    "settled",
    "staged",
    "verify",
]

MAX_DETAIL_CHARS = 2000
_EVENTS = AUDIT_EVENTS
_HEAD = AUDIT_HEADS
_STAGES: dict[int, list[dict[str, Any]]] = {}
"""The events staged in each open write transaction, by its ``Connection`` (``id``).

Not in ``conn.info``: that belongs to the driver connection under ``conn``, which is
another one after a transaction found its connection gone was sent again on a new
one (``pipeline``'s replay); events staged before would be left behind with the old
one, and linked nowhere."""


@dataclass(frozen=True, slots=True)
class AuditRecord:
    id: int
    at: datetime
    task_id: str
    call_row_id: int | None
    call_id: str | None
    event: str
    from_state: str | None
    to_state: str | None
    actor: str | None
    detail: dict[str, Any] | None
    seq: int = 0
    """The entry's position in the whole trail (``audit_events.id``): insertion order,
    the cursor of pages, ``audit --follow`` and webhooks."""
    hash: str = ""
    tool: str | None = None
    """The call's tool, when the entry was read with it (``pages.audit_page``)."""
    task_seq: int = 0
    """The entry's position in its task's hash chain (``audit_events.seq``)."""


_DETAIL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
"""``json.dumps(..., sort_keys=True, separators=(",", ":"), default=str)``, built once:
``dumps`` with options makes a new encoder on every call."""


def _detail_text(detail: Mapping[str, Any] | None) -> str | None:
    if not detail:
        return None
    text = _DETAIL_JSON.encode(dict(detail))
    if len(text) > MAX_DETAIL_CHARS:
        text = json.dumps({"truncated": bound(text, MAX_DETAIL_CHARS)})
    return text


def append(
    conn: Connection,
    *,
    task_id: str,
    event: str,
    call_row_id: int | None = None,
    call_id: str | None = None,
    from_state: str | None = None,
    to_state: str | None = None,
    actor: str | None = None,
    detail: Mapping[str, Any] | None = None,
    at: datetime | None = None,
) -> None:
    """Add one event to the trail in ``conn``'s transaction.

    Inside ``staged(conn)`` the event is linked at the end of the transaction;
    otherwise it is linked now (taking the head lock now).
    """
    values: dict[str, Any] = {
        "at": as_utc(at) if at is not None else datetime.now(UTC),
        "task_id": task_id,
        "call_row_id": call_row_id,
        "call_id": call_id,
        "event": event,
        "from_state": from_state,
        "to_state": to_state,
        "actor": actor,
        "detail": _detail_text(detail),
    }
    stage = _STAGES.get(id(conn))
    if stage is not None:
        stage.append(values)
    else:
        _link(conn, [values], now=True)


@contextmanager
def staged(conn: Connection) -> Iterator[Connection]:
    """Collect the events appended in the block; link them when the block succeeds.

    Use it as the innermost block of a write transaction, so that the flush runs
    before the commit. If the block raises, nothing is linked (the transaction rolls
    back anyway).
    """
    stage = open_stage(conn)
    try:
        yield conn
        if stage is not None:
            flush(conn)
    finally:
        if stage is not None:
            close_stage(stage)


def open_stage(conn: Connection) -> int | None:
    """``staged`` without the context manager (``flows.write`` runs three per call):
    start collecting ``conn``'s events. Returns what ``close_stage`` needs, or None
    when a stage is open already (nested: the outer one flushes)."""
    key = id(conn)
    if key in _STAGES:
        return None
    _STAGES[key] = []
    return key


def close_stage(stage: int) -> None:
    """Stop collecting (after ``flush``, or when the transaction failed)."""
    _STAGES.pop(stage, None)


def flush(conn: Connection) -> None:
    """Link the staged events into the chain (takes the head lock)."""
    stage = _STAGES.get(id(conn))
    if stage:
        pending = list(stage)
        stage.clear()
        _link(conn, pending)


_ROWS_PER_INSERT = 64
"""Entries per ``INSERT`` (a call's transaction writes one to four): 768 parameters,
under every SQLite build's limit, and one statement per transaction in practice."""
_ENTRY_COLUMNS = ("at", "task_id", "call_row_id", "call_id", "event", "from_state",
                  "to_state", "actor", "detail", "seq", "prev_hash", "hash")


def _link(conn: Connection, entries: list[dict[str, Any]], *, now: bool = False) -> None:
    """``now``: linked (and the heads locked) before this returns, as an append
    outside a stage promises, not only sent."""
    state = opened(conn)
    if state is not None and state.pipe is not None:
        _link_in_server(state.pipe, entries)
        if now:
            state.pipe.wait()
        return
    # Every transaction that changes a call ends here, so the statements are compiled
    # once and run on the driver (``agent_gate.ledger.backend.prepared``).
    # In task id order, so that two transactions touching the same tasks cannot deadlock.
    heads = {task: _lock_head(conn, task)
             for task in sorted({values["task_id"] for values in entries})}
    for values in entries:  # each dict is append's own: completed in place
        task = values["task_id"]
        seq, prev = heads[task]
        seq += 1
        digest = entry_hash(seq=seq, prev_hash=prev, **values)
        values["seq"], values["prev_hash"], values["hash"] = seq, prev, digest
        heads[task] = (seq, digest)
    for start in range(0, len(entries), _ROWS_PER_INSERT):
        chunk = entries[start:start + _ROWS_PER_INSERT]
        count = len(chunk)
        insert_all = prepare(conn, ("audit_insert", count),
                             lambda count=count: _insert_rows(count))
        params: dict[str, Any] = {}
        for i, values in enumerate(chunk):
            params.update(zip(_entry_keys(i), _ENTRY_VALUES(values), strict=True))
        insert_all.run(conn, params)
    move = prepare(
        conn,
        "audit_move_head",
        lambda: update(_HEAD)
        # Not "task_id": Core reserves a column's name for the SET clause of an UPDATE.
        .where(_HEAD.c.task_id == bindparam("head_task", type_=_HEAD.c.task_id.type))
        .values(seq=bindparam("seq", type_=_HEAD.c.seq.type),
                hash=bindparam("hash", type_=_HEAD.c.hash.type)),
    )
    for task, (seq, digest) in heads.items():
        move.run(conn, {"head_task": task, "seq": seq, "hash": digest})


_ENTRY_VALUES = itemgetter(*_ENTRY_COLUMNS)
_ENTRY_KEYS: dict[int, tuple[str, ...]] = {}
"""Per position ``i`` in an ``INSERT``, its parameters' names (``column_i``), made once."""


def _entry_keys(i: int) -> tuple[str, ...]:
    keys = _ENTRY_KEYS.get(i)
    if keys is None:
        keys = _ENTRY_KEYS.setdefault(i, tuple(f"{k}_{i}" for k in _ENTRY_COLUMNS))
    return keys


def _insert_rows(count: int) -> Any:
    """One ``INSERT`` of ``count`` entries (parameters ``column_i``): a transaction's
    entries in one statement, in order, so their ids follow their chain order."""
    return insert(_EVENTS).values([
        {k: bindparam(f"{k}_{i}", type_=_EVENTS.c[k].type) for k in _ENTRY_COLUMNS}
        for i in range(count)
    ])


def _lock_head(conn: Connection, task_id: str) -> tuple[int, str]:
    """The task's newest link, locked until the transaction ends."""
    read = prepare(
        conn,
        "audit_head",
        lambda: for_update(
            conn,
            select(_HEAD.c.seq, _HEAD.c.hash)
            .where(_HEAD.c.task_id == bindparam("task_id", type_=_HEAD.c.task_id.type)),
        ),
    )
    head = read.run(conn, {"task_id": task_id}).rows
    if head:
        return int(head[0][0]), str(head[0][1])
    # The task's first entry. The row inserted here is this transaction's until it
    # commits (a racing writer waits on its key); if a racing writer inserted it
    # first, read theirs, committed by then, under the lock.
    if insert_ignore(conn, _HEAD, {"task_id": task_id, "seq": 0, "hash": GENESIS}):
        return 0, GENESIS
    head = read.run(conn, {"task_id": task_id}).rows
    return int(head[0][0]), str(head[0][1])


_APPEND_COLUMNS = (("at", "timestamptz"), ("task_id", "text"), ("call_row_id", "integer"),
                   ("call_id", "text"), ("event", "text"), ("from_state", "text"),
                   ("to_state", "text"), ("actor", "text"), ("detail", "text"))
_APPEND_SQL: dict[int, str] = {}
"""Revision 0007's function called for ``n`` entries, by ``n``: each column an
``ARRAY[...]`` of one parameter per entry (the driver adapts a scalar several times
faster than a list), the task ids one ``text[]`` (a transaction may touch many)."""


def _append_sql(count: int) -> str:
    sql = _APPEND_SQL.get(count)
    if sql is None:
        arrays = [
            "ARRAY[" + ", ".join([f"%s::{kind}"] * count) + "]"
            for kind in [kind for _, kind in _APPEND_COLUMNS] + ["bytea", "bytea"]
        ]
        sql = _APPEND_SQL.setdefault(
            count, f"SELECT agent_gate_audit_append(%s::text[], %s::text, {', '.join(arrays)})"
        )
    return sql


def _link_in_server(pipe: Any, entries: list[dict[str, Any]]) -> None:
    """``_link`` on a pipelined PostgreSQL transaction, computed by the server: the
    head reads would otherwise be the one answer the transaction waits for before
    its ``COMMIT``. The client writes each entry's hashed text around its link
    (``chain.entry_parts``, encoded as ``entry_hash`` encodes it) and the task ids
    in lock order; the server locks the heads, splices each link in, hashes,
    inserts and moves the heads, in the order and with the locks ``_link`` takes.
    Sent unanswered: it goes out with the ``COMMIT``.

    In chunks of ``_ROWS_PER_INSERT`` entries, each naming every task of the
    transaction: the first chunk locks all of their heads, in order."""
    tasks = sorted({values["task_id"] for values in entries})
    for start in range(0, len(entries), _ROWS_PER_INSERT):
        chunk = entries[start:start + _ROWS_PER_INSERT]
        heads: list[bytes] = []
        tails: list[bytes] = []
        for values in chunk:
            head, tail = entry_parts(**values)
            heads.append(head.encode("utf-8", "surrogatepass"))
            tails.append(tail.encode("utf-8", "surrogatepass"))
        args: list[Any] = [tasks, GENESIS]
        for column, _ in _APPEND_COLUMNS:
            args += [values[column] for values in chunk]
        args += heads
        args += tails
        pipe.send(_append_sql(len(chunk)), args, fetch=False)


def record_of(row: Mapping[str, Any]) -> AuditRecord:
    detail = row["detail"]
    return from_row(
        AuditRecord, row, at=as_utc(row["at"]), detail=json.loads(detail) if detail else None,
        tool=row.get("tool"), seq=row["id"], task_seq=row["seq"],
    )


def read(
    conn: Connection,
    *,
    task_id: str | None = None,
    call_row_id: int | None = None,
    call_id: str | None = None,
) -> list[AuditRecord]:
    # A task's entries in seq order, which is their id order (both are assigned under
    # the task's head lock, entry after entry): the (task_id, seq) index, no sort.
    by_seq = task_id is not None and call_row_id is None
    stmt = select(_EVENTS).order_by(_EVENTS.c.seq if by_seq else _EVENTS.c.id)
    if task_id is not None:
        stmt = stmt.where(_EVENTS.c.task_id == task_id)
    if call_row_id is not None:
        stmt = stmt.where(_EVENTS.c.call_row_id == call_row_id)
    if call_id is not None:
        stmt = stmt.where(_EVENTS.c.call_id == call_id)
    return [record_of(row) for row in conn.execute(stmt).mappings()]


_SETTLE_WAIT = "250ms"
"""How long ``settled`` waits for inserting transactions before giving up for now."""


def settled(engine: Engine) -> int | None:
    """The id up to which the trail can no longer change: every entry with a smaller
    or equal id is committed or will never be. None: no bound needed (SQLite).

    Why: ids are given out at ``INSERT`` and, with one chain per task, transactions
    of different tasks on PostgreSQL commit in any order, so a reader going forward
    by id (``audit --follow``, webhooks) could pass an id whose entry commits a moment
    later, and never see it. An ``INSERT`` holds the table's ROW EXCLUSIVE lock from
    before its ids are drawn until its transaction ends, so taking SHARE on the table
    waits for every transaction that drew ids and lets none draw more until the
    highest id is read; the lock is held only for that read. When inserting
    transactions hold it longer than ``_SETTLE_WAIT``, the answer is 0 (nothing new
    is settled yet: the reader asks again at its next poll), so a reader never holds
    writers up longer than that. On SQLite every write transaction holds the database
    lock from its first statement to its commit: ids commit in order.
    """
    if engine.dialect.name != "postgresql":
        return None
    from sqlalchemy.exc import OperationalError

    try:
        with begin_write(engine) as conn:
            conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{_SETTLE_WAIT}'")
            conn.exec_driver_sql(f"LOCK TABLE {_EVENTS.name} IN SHARE MODE")
            return int(conn.execute(select(func.coalesce(func.max(_EVENTS.c.id), 0))).scalar_one())
    except OperationalError as error:
        if getattr(error.orig, "sqlstate", None) == "55P03":  # lock_not_available
            return 0
        raise


def audited_state(conn: Connection, task_id: str, call_row_id: int) -> str | None:
    """The state the newest transition entry of the call moved it to; None if none.

    Walks the call's entries newest first (the ``call_row_id, id`` index) and stops at
    its newest transition: right before a claim that is the last few entries.
    """
    rows = prepare(
        conn,
        "audited_state",
        lambda: select(_EVENTS.c.to_state)
        .where(
            _EVENTS.c.task_id == bindparam("task_id"),
            _EVENTS.c.call_row_id == bindparam("call_row_id"),
            _EVENTS.c.to_state.is_not(None),
            or_(_EVENTS.c.from_state.is_(None), _EVENTS.c.from_state != _EVENTS.c.to_state),
        )
        .order_by(_EVENTS.c.id.desc())
        # Literal: an int would be a parameter prepare is never given (SQLite's
        # compiler also adds an OFFSET parameter to a LIMIT unless one is set).
        .limit(literal_column("1"))
        .offset(literal_column("0")),
    ).run(conn, {"task_id": task_id, "call_row_id": call_row_id}).rows
    return str(rows[0][0]) if rows else None


# ------------------------------------------------------------------- verification
# In their own module (the longest part of the trail's code); named here too, and
# imported on first use: a command that appends an entry (``agent-gate approve``)
# has no use for the verifier.

if TYPE_CHECKING:
    from agent_gate.ledger.trail_verify import ChainProblem, ChainReport, verify

__getattr__, __dir__ = exports(__name__, {
    "ChainProblem": "agent_gate.ledger.trail_verify",
    "ChainReport": "agent_gate.ledger.trail_verify",
    "verify": "agent_gate.ledger.trail_verify",
}, globals())
