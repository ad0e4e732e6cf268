"""New calls and their tasks: the one insert of a ``tool_calls`` row.

A call is recorded once, as ``received``, under its (task, call id) and its dedupe
key; seeing it again returns the stored row. Its task row is created on first use
and bound to the principal and scope it was started with, which never change
afterwards (``TaskContextConflict``). A caller may decide the new call in the same
transaction (one commit instead of two): the decision goes through
``flows.apply_ruling`` like every other arrow, and a ruling that authorizes a call
about to run carries its claim (``Ruling.claim``) into that same commit.

Nothing in the transaction reads the rows the decision's and the claim's arrows
leave (``Txn.compare_and_set``'s ``unread``), and the arrows follow the insert
before anything else (``Txn.insert_call``'s ``decided``): a backend may write them
with the insert and read the rows with the commit. The transaction runs through
``backend.transact``, which runs it once more when a backend's own guess failed
(nothing of the first run committed).

A call ``audit archive`` pruned is never recorded again: the database refuses its
insert (``pruned``: a trigger on ``tool_calls``), nothing of the transaction commits,
and only then is its tombstone read, to answer with the outcome it had. The common
path asks nothing about tombstones (a read there was a PostgreSQL round trip).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, update
from sqlalchemy.exc import IntegrityError

from agent_gate.ledger import audit
from agent_gate.ledger.backend import reading, transact
from agent_gate.ledger.flows import apply, apply_ruling
from agent_gate.ledger.pruned import refused, tombstone
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.records import (
    TASKS,
    CallRecord,
    NewCall,
    Ruling,
    TaskContextConflict,
    new_call_row,
)
from agent_gate.ledger.states import CallState, Event
from agent_gate.ledger.txn import Lost, Txn
from agent_gate.plainjson import sha256_hex

__all__ = ["ensure_task", "record"]

_RECEIVED = CallState.RECEIVED.value


def _context_detail(principal: str | None, scope: str | None) -> dict[str, Any] | None:
    """Hashes of the principal and scope a task is bound to (their JSON is on the task)."""
    info: dict[str, Any] = {}
    if principal is not None:
        info["principal_sha256"] = sha256_hex(principal)
    if scope is not None:
        info["scope_sha256"] = sha256_hex(scope)
    return info or None


def ensure_task(
    txn: Txn,
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
    if txn.insert_ignore(TASKS, values):
        audit.append(
            txn, task_id=task_id, event="task_created", at=now,
            detail=_context_detail(principal, scope),
        )
        return
    if principal is None and scope is None:
        return
    stored_principal, stored_scope = txn.task_context(task_id, lock=True)
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
        txn.execute(update(TASKS).where(TASKS.c.id == task_id).values(**bind))
        audit.append(
            txn, task_id=task_id, event="task_bound", at=now,
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
    call_known: bool = False,
) -> tuple[CallRecord, bool]:
    """``Ledger.record``: insert the call as ``received`` unless already there, and
    with ``decide`` apply its decision in the same transaction. ``task_known``: the
    task row is known to exist bound to this principal and scope (skip ``ensure_task``).
    ``call_known``: this ledger recorded the call before (a replay, most likely): its
    row is read first, before the insert the backend would guess new (its arrows folded
    in), which would fail on the stored row and cost a rolled-back attempt (on
    PostgreSQL, two of a replay's six round trips)."""
    now = datetime.now(UTC)

    def body(txn: Txn) -> tuple[CallRecord, bool]:
        return _record(txn, new, now, provider=provider, actor=actor, decide=decide,
                       lock=lock, task_known=task_known, call_known=call_known)

    try:
        txn, (rec, inserted) = transact(engine, body)
    except IntegrityError as error:
        if not refused(error):
            raise
        return _archived(engine, new), False
    except Lost:  # pragma: no cover - the row is ours until commit
        raise RuntimeError("a ledger row changed under its insert") from None
    return txn.committed(rec), inserted


def _record(
    txn: Txn,
    new: NewCall,
    now: datetime,
    *,
    provider: str | None,
    actor: str | None,
    decide: Callable[[LedgerTxn, CallRecord], Ruling | None] | None,
    lock: bool,
    task_known: bool,
    call_known: bool = False,
) -> tuple[CallRecord, bool]:
    """One intake transaction. A call this ledger recorded before is read first: seen
    again, its row is the answer, and nothing is tried that would only conflict."""
    if call_known:
        found = txn.read_call(task_id=new.task_id, call_id=new.call_id)
        if found is not None:
            return found, False
    if not task_known:
        ensure_task(txn, new.task_id, provider, new.principal, new.scope)
    if decide is not None and lock:
        txn.lock_task(new.task_id)
    values = {
        **new_call_row(new),  # every NewCall field to the column of its name
        "state": _RECEIVED,
        "version": 0,
        "attempt": 0,
        "created_at": now,
        "updated_at": now,
    }
    rec, inserted = txn.insert_call(values, decided=decide is not None)
    if rec is None:
        rec = txn.read_call(task_id=new.task_id, call_id=new.call_id)
    if rec is None:
        rec = txn.read_call(task_id=new.task_id, idem_key=new.idem_key)
    if rec is None:  # pragma: no cover - a row we could not insert must exist
        raise RuntimeError("ledger row vanished during insert")
    if not inserted:
        return rec, False
    info: dict[str, Any] = {"tool": new.tool, "args_hash": new.args_hash,
                            "idem_key": new.idem_key}
    if new.sealed_arguments is not None:
        # The redacted form, never the values: what the policy lets the trail keep.
        info["arguments"] = dict(new.arguments or {})
    audit.append(
        txn, task_id=new.task_id, call_row_id=rec.row_id, call_id=new.call_id,
        event="received", to_state=_RECEIVED, actor=actor, detail=info, at=now,
    )
    ruling = decide(LedgerTxn(txn), rec) if decide is not None else None
    if ruling is not None and ruling.event is not None:
        try:
            rec = apply_ruling(txn, rec, ruling, actor=actor, unread=True)
            if ruling.claim is not None and rec.state is CallState.AUTHORIZED:
                # Runs at once: claimed in this commit (two commits a call).
                claimed = apply(txn, rec, Event.CLAIM, actor=actor, lease=ruling.claim,
                                unread=True)
                if claimed is None:
                    raise Lost
                rec = claimed
        except Lost:  # pragma: no cover - the row is ours until commit
            raise RuntimeError(f"ledger row {rec.row_id} changed under its insert") from None
    return rec, True


def _archived(engine: Engine, new: NewCall) -> CallRecord:
    """The pruned call the database refused to record again, as it was archived (read
    in a transaction of its own: the refused one is rolled back)."""
    with reading(engine) as txn:
        kept = tombstone(txn.run, new.task_id, new.call_id, new.idem_key)
    if kept is None:  # pragma: no cover - a tombstone is never deleted
        raise RuntimeError(f"call {new.call_id!r} was refused as archived, but has no tombstone")
    return kept
