"""New calls and their tasks: the one insert of a ``tool_calls`` row.

A call is recorded once, as ``received``, under its (task, call id) and its dedupe
key; seeing it again returns the stored row. Its task row is created on first use
and bound to the principal and scope it was started with, which never change
afterwards (``TaskContextConflict``). A caller may decide the new call in the same
transaction (one commit instead of two): the decision goes through
``flows.apply_ruling`` like every other arrow, and a ruling that authorizes a call
about to run carries its claim (``Ruling.claim``) into that same commit.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, select, update

from agent_gate.ledger import audit
from agent_gate.ledger.canonical import canonical_json, sha256_hex
from agent_gate.ledger.dialect import for_update, insert_ignore, insert_returning
from agent_gate.ledger.flows import Later, Lost, apply, apply_ruling, lock_task, write
from agent_gate.ledger.pipeline import Unexpected
from agent_gate.ledger.prepared import prepare
from agent_gate.ledger.reads import call_by
from agent_gate.ledger.records import (
    CALLS,
    TASKS,
    CallRecord,
    NewCall,
    Ruling,
    TaskContextConflict,
    driver_call_record,
)
from agent_gate.ledger.states import CallState, Event
from agent_gate.ledger.txn import LedgerTxn

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
    later: list[Later] = []
    try:
        rec, inserted = _record(engine, new, now, provider=provider, actor=actor,
                                decide=decide, lock=lock, task_known=task_known,
                                later=later)
    except Unexpected:  # pragma: no cover - the row is ours until commit
        raise RuntimeError("a ledger row changed under its insert") from None
    return (later[-1].record() if later else rec), inserted


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
) -> tuple[CallRecord, bool]:
    with write(engine) as conn:
        if not task_known:
            ensure_task(conn, new.task_id, provider, new.principal, new.scope)
        if decide is not None and lock:
            lock_task(conn, new.task_id)
        values = {
            "task_id": new.task_id,
            "call_id": new.call_id,
            "idem_key": new.idem_key,
            "tool": new.tool,
            "effect": new.effect,
            "idempotency": new.idempotency,
            "args_hash": new.args_hash,
            "arguments": (
                canonical_json(dict(new.arguments)) if new.arguments is not None else None
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
                    rec = apply_ruling(conn, rec, ruling, actor=actor, later=later)
                    if ruling.claim is not None and rec.state is CallState.AUTHORIZED:
                        # Runs at once: claimed in this commit (two commits a call).
                        claimed = apply(conn, rec, Event.CLAIM, actor=actor,
                                        lease=ruling.claim, later=later)
                        if claimed is None:
                            raise Lost
                        rec = claimed
                except Lost:  # pragma: no cover - the row is ours until commit
                    raise RuntimeError(
                        f"ledger row {rec.row_id} changed under its insert"
                    ) from None
    return rec, inserted
