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
(``sql.for_update``: ``SELECT ... FOR UPDATE`` on PostgreSQL; on SQLite every
write transaction already holds the database write lock from its ``BEGIN
IMMEDIATE``). A second writer of the same task waits for the first to commit and
then reads the link the first one wrote, so two entries can never share a
predecessor (no fork) and ``seq`` has no gaps within a task: a rolled-back
transaction rolls back its entries and its move of the head together. Writers of
different tasks lock different rows and never wait for each other: no global row
is on the write path. ``agent_gate.ledger.checkpoints`` binds every task's head
into one root from time to time.

Linking (``txn.Txn.link_audit``) is three statements: one read of the task's head
``FOR UPDATE``, one multi-row ``INSERT`` of every entry of the transaction, one
``UPDATE`` of the head. A task's first entry finds no head row; it inserts one
(seq 0, genesis) unless a racing writer did, and reads it again under the lock:
once per task. A backend may link in the server instead (PostgreSQL's fast backend sends
the entries to revision 0007's function, which reads the head under the lock,
splices the link in and hashes with ``sha256``, so that nothing waits for the
head's answer); the hashes are the ones ``chain.entry_hash`` computes, and
``verify`` cannot tell the writers apart.

The head lock is the last lock a write transaction takes: a write transaction
(``txn.Txn``) collects its events and links them right before it commits
(``Txn.finish``). A transaction that holds a head never waits for any other row (a
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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, literal_column, or_, select

from agent_gate._lazy import exports
from agent_gate.ledger.chain import as_utc
from agent_gate.ledger.models import AUDIT_EVENTS
from agent_gate.ledger.records import from_row
from agent_gate.privacy.scrub import bound

__all__ = [
    "MAX_DETAIL_CHARS",
    "AuditRecord",
    "ChainProblem",
    "ChainReport",
    "append",
    "audited_state",
    "read",
    "record_of",
    "verify",
]

MAX_DETAIL_CHARS = 2000
_EVENTS = AUDIT_EVENTS


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
    txn: Txn,
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
    """Add one event to the trail in ``txn``'s transaction: linked at its end
    (``Txn.finish``) in a write transaction of ``backend.writing``, now (taking the
    head lock now) in one ``backend.on`` took over."""
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
    txn.append_audit(values)


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


def audited_state(txn: Txn, task_id: str, call_row_id: int) -> str | None:
    """The state the newest transition entry of the call moved it to; None if none.

    Walks the call's entries newest first (the ``call_row_id, id`` index) and stops at
    its newest transition: right before a claim that is the last few entries.
    """
    rows = txn.run(
        "audited_state",
        lambda: select(_EVENTS.c.to_state)
        .where(
            _EVENTS.c.task_id == bindparam("task_id"),
            _EVENTS.c.call_row_id == bindparam("call_row_id"),
            _EVENTS.c.to_state.is_not(None),
            or_(_EVENTS.c.from_state.is_(None), _EVENTS.c.from_state != _EVENTS.c.to_state),
        )
        .order_by(_EVENTS.c.id.desc())
        # Literal: an int would be a parameter the statement is never given (SQLite's
        # compiler also adds an OFFSET parameter to a LIMIT unless one is set).
        .limit(literal_column("1"))
        .offset(literal_column("0")),
        {"task_id": task_id, "call_row_id": call_row_id},
    ).rows
    return str(rows[0][0]) if rows else None


# ------------------------------------------------------------------- verification
# In their own module (the longest part of the trail's code); named here too, and
# imported on first use: a command that appends an entry (``agent-gate approve``)
# has no use for the verifier.

if TYPE_CHECKING:
    from agent_gate.ledger.trail_verify import ChainProblem, ChainReport, verify
    from agent_gate.ledger.txn import Txn

__getattr__, __dir__ = exports(__name__, {
    "ChainProblem": "agent_gate.ledger.trail_verify",
    "ChainReport": "agent_gate.ledger.trail_verify",
    "verify": "agent_gate.ledger.trail_verify",
}, globals())
