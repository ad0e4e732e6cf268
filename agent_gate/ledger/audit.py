"""Appending to the audit trail, always inside the transaction that changed state,
and linking every entry into one hash chain.

A transition and its audit event commit together or not at all, so the trail can
never miss a transition nor describe one that did not happen. Details are bounded
JSON of ids, codes and hashes; callers never pass argument values here (redacted
stand-ins at most). ``append`` is the only writer of ``audit_events``.

One chain under concurrent writers
==================================

Each entry's hash covers its predecessor's (``agent_gate.ledger.chain``). Linking
needs "read the newest link, write the next one" to be atomic across processes,
so the newest link lives in the one-row table ``audit_chain`` and every append
locks that row (``dialect.for_update``: ``SELECT ... FOR UPDATE`` on PostgreSQL;
on SQLite every write transaction already holds the database write lock from its
``BEGIN IMMEDIATE``). A second writer waits for the first to commit and then reads
the link the first one wrote, so two entries can never share a predecessor (no
fork) and ``seq`` has no gaps: a rolled-back transaction rolls back its entries
and its move of the head together.

The head lock is the last lock a write transaction takes: a transaction opened
with ``staged(conn)`` collects its events and ``flush`` links them right before
commit. A transaction that holds the head never waits for any other row, so the
head cannot take part in a deadlock, and it is held only for the few statements
of the flush. (It does serialize the commits of all writers of one ledger: that is
the price of one chain, and it is small next to an fsync per commit.)

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
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    bindparam,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from agent_gate.ledger.chain import GENESIS, as_utc, entry_hash
from agent_gate.ledger.dialect import for_update
from agent_gate.ledger.models import AUDIT_CHAIN, AUDIT_EVENTS, TOOL_CALLS
from agent_gate.ledger.prepared import prepare
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
    "staged",
    "verify",
]

MAX_DETAIL_CHARS = 2000
_EVENTS = AUDIT_EVENTS
_HEAD = AUDIT_CHAIN
_STAGE_KEY = "agent_gate_audit_stage"
_HEAD_ID = 1
_CALLS = TOOL_CALLS


def _is_transition(from_state: str | None, to_state: str | None) -> bool:
    """Whether an entry records a change of a call's state: ``received`` (from
    nothing) or an arrow of the state machine, none of which ends where it began.
    Audit-only entries (seen again, approval granted...) repeat one state."""
    return to_state is not None and from_state != to_state


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
    hash: str = ""
    tool: str | None = None
    """The call's tool, when the entry was read with it (``pages.audit_page``)."""


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
    stage: list[dict[str, Any]] | None = conn.info.get(_STAGE_KEY)
    if stage is not None:
        stage.append(values)
    else:
        _link(conn, [values])


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


def open_stage(conn: Connection) -> dict[str, Any] | None:
    """``staged`` without the context manager (``flows.write`` runs three per call):
    start collecting ``conn``'s events. Returns what ``close_stage`` needs, or None
    when a stage is open already (nested: the outer one flushes)."""
    # Held from the start: after a connection is lost inside the block, asking the
    # connection for its ``info`` again raises PendingRollbackError, which would hide
    # the real error (the lost connection) from the caller.
    info = conn.info
    if info.get(_STAGE_KEY) is not None:
        return None
    info[_STAGE_KEY] = []
    return info


def close_stage(stage: dict[str, Any]) -> None:
    """Stop collecting (after ``flush``, or when the transaction failed)."""
    stage.pop(_STAGE_KEY, None)


def flush(conn: Connection) -> None:
    """Link the staged events into the chain (takes the head lock)."""
    stage: list[dict[str, Any]] = conn.info.get(_STAGE_KEY) or []
    if stage:
        pending = list(stage)
        stage.clear()
        _link(conn, pending)


_ENTRY_COLUMNS = ("at", "task_id", "call_row_id", "call_id", "event", "from_state",
                  "to_state", "actor", "detail", "seq", "prev_hash", "hash")


def _link(conn: Connection, entries: list[dict[str, Any]]) -> None:
    # Every transaction that changes a call ends here, so the three statements are
    # compiled once and run on the driver (``agent_gate.ledger.prepared``).
    head = prepare(
        conn,
        "audit_head",
        lambda: for_update(
            conn, select(_HEAD.c.seq, _HEAD.c.hash).where(_HEAD.c.id == bindparam("id"))
        ),
    ).run(conn, {"id": _HEAD_ID}).rows
    if not head:
        # Only a database upgraded without the 0002 revision's seed row: refuse
        # rather than start a second chain.
        raise RuntimeError("the audit chain head row is missing; run `agent-gate db upgrade`")
    seq, prev = int(head[0][0]), str(head[0][1])
    add = prepare(
        conn,
        "audit_insert",
        lambda: insert(_EVENTS).values(
            {k: bindparam(k, type_=_EVENTS.c[k].type) for k in _ENTRY_COLUMNS}
        ),
    )
    for values in entries:  # each dict is append's own: completed in place
        seq += 1
        digest = entry_hash(seq=seq, prev_hash=prev, **values)
        values["seq"], values["prev_hash"], values["hash"] = seq, prev, digest
        add.run(conn, values)
        prev = digest
    prepare(
        conn,
        "audit_move_head",
        lambda: update(_HEAD)
        # Not "id": Core reserves a column's name for the SET clause of an UPDATE.
        .where(_HEAD.c.id == bindparam("head_id"))
        .values(seq=bindparam("seq", type_=_HEAD.c.seq.type),
                hash=bindparam("hash", type_=_HEAD.c.hash.type)),
    ).run(conn, {"head_id": _HEAD_ID, "seq": seq, "hash": prev})


def record_of(row: Mapping[str, Any]) -> AuditRecord:
    detail = row["detail"]
    return from_row(
        AuditRecord, row, at=as_utc(row["at"]), detail=json.loads(detail) if detail else None,
        tool=row.get("tool"),
    )


def read(
    conn: Connection,
    *,
    task_id: str | None = None,
    call_row_id: int | None = None,
    call_id: str | None = None,
) -> list[AuditRecord]:
    stmt = select(_EVENTS).order_by(_EVENTS.c.seq)
    if task_id is not None:
        stmt = stmt.where(_EVENTS.c.task_id == task_id)
    if call_row_id is not None:
        stmt = stmt.where(_EVENTS.c.call_row_id == call_row_id)
    if call_id is not None:
        stmt = stmt.where(_EVENTS.c.call_id == call_id)
    return [record_of(row) for row in conn.execute(stmt).mappings()]


def audited_state(conn: Connection, task_id: str, call_row_id: int) -> str | None:
    """The state the newest transition entry of the call moved it to; None if none.

    Walks the task's entries newest first (the ``task_id, id`` index) and stops at the
    call's newest transition: right before a claim that is the last few entries.
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


@dataclass(frozen=True, slots=True)
class ChainProblem:
    """The first place where the stored chain is not the chain that was written."""

    kind: str
    """``edited``, ``deleted``, ``reordered``, ``anchor``, or ``state_rewritten`` (a
    call's row is not in the state its trail last recorded)."""
    seq: int
    """The chain position where the problem shows."""
    row_id: int | None
    """``audit_events.id`` of the entry named (None when the entry is gone)."""
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seq": self.seq, "row_id": self.row_id,
                "message": self.message}


@dataclass(frozen=True, slots=True)
class ChainReport:
    entries: int
    head_seq: int
    head_hash: str
    problem: ChainProblem | None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "entries": self.entries,
            "head": {"seq": self.head_seq, "hash": self.head_hash},
            "problem": self.problem.to_dict() if self.problem else None,
        }


def verify(conn: Connection, *, anchor: tuple[int, str] | None = None) -> ChainReport:
    """Walk the whole chain in one snapshot and name the first entry that is wrong.

    Entries are read in insertion order (``id``, which the head lock makes the same
    as chain order). An entry whose stored hash is not the hash of its stored fields
    was *edited*; a ``seq`` that does not follow its predecessor's means entries were
    *deleted* (a jump forward) or *reordered* (anything else); an entry whose
    ``prev_hash`` is not its predecessor's hash means its predecessor was deleted or
    replaced. ``anchor`` (seq, hash), a head printed earlier and kept elsewhere, must
    still be in the chain: that catches a chain rewritten from some point on. Then
    every call's row must be in the state its newest transition entry recorded
    (``state_rewritten``, naming the first such call and how many there are).
    """
    head = conn.execute(select(_HEAD.c.seq, _HEAD.c.hash).where(_HEAD.c.id == _HEAD_ID)).first()
    head_seq, head_hash = (int(head.seq), str(head.hash)) if head else (0, GENESIS)
    expected_seq, prev = 1, GENESIS
    count = 0
    problem: ChainProblem | None = None
    anchored = anchor is None or anchor == (0, GENESIS)
    audited: dict[int, str] = {}
    rows = conn.execute(select(_EVENTS).order_by(_EVENTS.c.id)).mappings()
    for row in rows:
        count += 1
        if row["call_row_id"] is not None and _is_transition(row["from_state"],
                                                              row["to_state"]):
            audited[int(row["call_row_id"])] = row["to_state"]
        seq, row_id = int(row["seq"]), int(row["id"])
        fields = {k: row[k] for k in ("at", "task_id", "call_row_id", "call_id", "event",
                                      "from_state", "to_state", "actor", "detail")}
        recomputed = entry_hash(seq=seq, prev_hash=row["prev_hash"], **fields)
        if recomputed != row["hash"] and seq != expected_seq and entry_hash(
            seq=expected_seq, prev_hash=row["prev_hash"], **fields
        ) == row["hash"]:
            problem = ChainProblem(
                "reordered", expected_seq, row_id,
                f"audit entry #{expected_seq} (row {row_id}, event {row['event']!r}) was "
                f"moved to position #{seq}: the entries were reordered",
            )
            break
        if recomputed != row["hash"]:
            problem = ChainProblem(
                "edited", seq, row_id,
                f"audit entry #{seq} (row {row_id}, event {row['event']!r}) was edited: "
                "its fields no longer match its hash",
            )
            break
        if seq != expected_seq:
            if seq > expected_seq:
                missing = (f"#{expected_seq}" if seq == expected_seq + 1
                           else f"#{expected_seq}..#{seq - 1}")
                problem = ChainProblem(
                    "deleted", expected_seq, None,
                    f"audit entry {missing} was deleted: the chain jumps from "
                    f"#{expected_seq - 1} to #{seq} (row {row_id})",
                )
            else:
                problem = ChainProblem(
                    "reordered", seq, row_id,
                    f"audit entry #{seq} (row {row_id}) is out of order: expected "
                    f"#{expected_seq} at this place",
                )
            break
        if row["prev_hash"] != prev:
            problem = ChainProblem(
                "deleted", seq, row_id,
                f"audit entry #{seq} (row {row_id}) does not link to the entry before it: "
                f"entry #{seq - 1} was replaced or deleted",
            )
            break
        if anchor is not None and anchor == (seq, row["hash"]):
            anchored = True
        expected_seq, prev = seq + 1, row["hash"]
    if problem is None and (expected_seq - 1, prev) != (head_seq, head_hash):
        if head_seq >= expected_seq:
            problem = ChainProblem(
                "deleted", expected_seq, None,
                f"audit entries #{expected_seq}..#{head_seq} were deleted: the chain ends at "
                f"#{expected_seq - 1} but its head records #{head_seq}",
            )
        else:
            problem = ChainProblem(
                "edited", head_seq, None,
                f"the chain head records #{head_seq} but the entries run to "
                f"#{expected_seq - 1}: the head or the newest entries were altered",
            )
    if problem is None and not anchored:
        assert anchor is not None
        problem = ChainProblem(
            "anchor", anchor[0], None,
            f"the anchor #{anchor[0]} {anchor[1][:16]}… is not in the chain: the chain was "
            "rewritten at or before that entry",
        )
    if problem is None:
        problem = _state_problem(conn, audited, expected_seq - 1)
    return ChainReport(count, head_seq, head_hash, problem)


def _state_problem(conn: Connection, audited: dict[int, str], seq: int) -> ChainProblem | None:
    """The first call whose row state is not the state its trail last recorded."""
    wrong: list[tuple[int, str, str, str, str | None]] = []
    calls = conn.execute(
        select(_CALLS.c.id, _CALLS.c.task_id, _CALLS.c.call_id, _CALLS.c.state)
        .order_by(_CALLS.c.id)
    )
    for row_id, task_id, call_id, state in calls:
        trail = audited.get(int(row_id))
        if trail != state:
            wrong.append((int(row_id), task_id, call_id, state, trail))
    if not wrong:
        return None
    row_id, task_id, call_id, state, trail = wrong[0]
    more = f" ({len(wrong) - 1} more calls like it)" if len(wrong) > 1 else ""
    recorded = (f"its audit trail last recorded {trail!r}" if trail is not None
                else "its audit trail has no transition for it")
    return ChainProblem(
        "state_rewritten", seq, None,
        f"call {call_id!r} of task {task_id!r} (tool_calls row {row_id}) is {state!r} but "
        f"{recorded}: its state was rewritten outside agent-gate{more}",
    )
