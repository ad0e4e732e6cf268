"""The ledger: tool-call rows changed only by committed compare-and-set transitions.

Each method here is one short write transaction (or one read). A transition names
the row *and the state and version the caller last saw*; if another process moved
the row in between, nothing is written and the caller gets the row as it now is
(``Transition.won`` is False). The arrows themselves come from
``agent_gate.ledger.states``; this module only applies them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, Engine, Table, select, update
from sqlalchemy.engine import RowMapping

from agent_gate.ledger import audit
from agent_gate.ledger.canonical import canonical_json, sha256_hex
from agent_gate.ledger.dialect import (
    DEFAULT_BUSY_TIMEOUT,
    begin_read,
    begin_write,
    create_ledger_engine,
    insert_ignore,
    resolve_url,
)
from agent_gate.ledger.lease import now_ms
from agent_gate.ledger.migrate import ensure_schema
from agent_gate.ledger.models import TaskRow, ToolCallRow
from agent_gate.ledger.privacy import bound
from agent_gate.ledger.states import CallState, Event, next_state

__all__ = ["CallRecord", "Ledger", "NewCall", "StoredResult", "TaskRecord", "Transition"]

T = ToolCallRow
# The mapped classes' tables, typed as the Core ``Table`` they are.
_CALLS = cast(Table, ToolCallRow.__table__)
_TASKS = cast(Table, TaskRow.__table__)
MAX_REASON_CHARS = 900


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _loads(text: str | None) -> Any:
    return json.loads(text) if text is not None else None


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A snapshot of one ``tool_calls`` row; ``state`` and ``version`` are what a
    transition must name to apply."""

    row_id: int
    task_id: str
    call_id: str
    idem_key: str
    tool: str
    effect: str
    idempotency: str
    args_hash: str
    arguments: dict[str, Any] | None
    state: CallState
    version: int
    attempt: int
    lease_owner: str | None
    lease_expires_ms: int | None
    result: Any
    result_sha256: str | None
    result_bytes: int | None
    result_omitted: bool
    """The tool's result was too large to keep: only its hash and size were stored."""
    error: dict[str, Any] | None
    reason_code: str | None
    reason: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def from_row(cls, row: RowMapping) -> CallRecord:
        return cls(
            row_id=row["id"],
            task_id=row["task_id"],
            call_id=row["call_id"],
            idem_key=row["idem_key"],
            tool=row["tool"],
            effect=row["effect"],
            idempotency=row["idempotency"],
            args_hash=row["args_hash"],
            arguments=_loads(row["arguments"]),
            state=CallState(row["state"]),
            version=row["version"],
            attempt=row["attempt"],
            lease_owner=row["lease_owner"],
            lease_expires_ms=row["lease_expires_ms"],
            result=_loads(row["result"]),
            result_sha256=row["result_sha256"],
            result_bytes=row["result_bytes"],
            result_omitted=row["result"] is None and row["result_sha256"] is not None,
            error=_loads(row["error"]),
            reason_code=row["reason_code"],
            reason=row["reason"],
            created_at=_utc(row["created_at"]) or datetime.now(UTC),
            updated_at=_utc(row["updated_at"]) or datetime.now(UTC),
            started_at=_utc(row["started_at"]),
            finished_at=_utc(row["finished_at"]),
        )


@dataclass(frozen=True, slots=True)
class TaskRecord:
    id: str
    provider: str | None
    terminal: str | None
    terminal_reason: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class NewCall:
    """What the gate knows of a call the first time it is seen."""

    task_id: str
    call_id: str
    idem_key: str
    tool: str
    effect: str
    idempotency: str
    args_hash: str
    arguments: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Transition:
    """The outcome of a compare-and-set: whether it applied, and the row as it is now."""

    won: bool
    record: CallRecord


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A tool result as the ledger keeps it: JSON text, or only its hash when too big."""

    text: str | None
    sha256: str
    size: int

    @classmethod
    def encode(cls, value: Any, max_bytes: int) -> StoredResult:
        text = canonical_json(value)
        size = len(text.encode("utf-8"))
        return cls(text if size <= max_bytes else None, sha256_hex(text), size)


class Ledger:
    """Durable record of every tool call; the only writer of ``tool_calls``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        auto_upgrade: bool | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        engine: Engine | None = None,
    ) -> None:
        self.url = resolve_url(url) if engine is None else str(engine.url)
        self.engine = engine or create_ledger_engine(self.url, busy_timeout=busy_timeout)
        ensure_schema(self.engine, auto_upgrade=auto_upgrade)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads

    @staticmethod
    def _one(conn: Connection, *where: ColumnElement[bool]) -> CallRecord | None:
        row = conn.execute(select(T.__table__).where(*where)).mappings().first()
        return CallRecord.from_row(row) if row is not None else None

    def get(self, task_id: str, call_id: str) -> CallRecord | None:
        with begin_read(self.engine) as conn:
            return self._one(conn, T.task_id == task_id, T.call_id == call_id)

    def get_by_key(self, task_id: str, idem_key: str) -> CallRecord | None:
        with begin_read(self.engine) as conn:
            return self._one(conn, T.task_id == task_id, T.idem_key == idem_key)

    def get_row(self, row_id: int) -> CallRecord | None:
        with begin_read(self.engine) as conn:
            return self._one(conn, T.id == row_id)

    def find(self, call_id: str, task_id: str | None = None) -> list[CallRecord]:
        """Rows with this provider call id, in any task unless one is named."""
        where = [T.call_id == call_id]
        if task_id is not None:
            where.append(T.task_id == task_id)
        with begin_read(self.engine) as conn:
            rows = conn.execute(select(T.__table__).where(*where).order_by(T.id)).mappings()
            return [CallRecord.from_row(r) for r in rows]

    def calls(
        self, task_id: str | None = None, states: Iterable[CallState] | None = None
    ) -> list[CallRecord]:
        stmt = select(T.__table__).order_by(T.id)
        if task_id is not None:
            stmt = stmt.where(T.task_id == task_id)
        if states is not None:
            stmt = stmt.where(T.state.in_([s.value for s in states]))
        with begin_read(self.engine) as conn:
            return [CallRecord.from_row(r) for r in conn.execute(stmt).mappings()]

    def task(self, task_id: str) -> TaskRecord | None:
        with begin_read(self.engine) as conn:
            row = conn.execute(
                select(TaskRow.__table__).where(TaskRow.id == task_id)
            ).mappings().first()
        if row is None:
            return None
        return TaskRecord(
            id=row["id"],
            provider=row["provider"],
            terminal=row["terminal"],
            terminal_reason=row["terminal_reason"],
            created_at=_utc(row["created_at"]) or datetime.now(UTC),
            updated_at=_utc(row["updated_at"]) or datetime.now(UTC),
        )

    def audit(
        self, task_id: str | None = None, call_row_id: int | None = None
    ) -> list[audit.AuditRecord]:
        with begin_read(self.engine) as conn:
            return audit.read(conn, task_id=task_id, call_row_id=call_row_id)

    # ----------------------------------------------------------------- writes

    def _ensure_task(self, conn: Connection, task_id: str, provider: str | None) -> None:
        now = datetime.now(UTC)
        values = {"id": task_id, "created_at": now, "updated_at": now, "provider": provider}
        if insert_ignore(conn, _TASKS, values):
            audit.append(conn, task_id=task_id, event="task_created", at=now)

    def ensure_task(self, task_id: str, provider: str | None = None) -> None:
        with begin_write(self.engine) as conn:
            self._ensure_task(conn, task_id, provider)

    def record(
        self, new: NewCall, *, provider: str | None = None, actor: str | None = None
    ) -> tuple[CallRecord, bool]:
        """Insert the call as ``received`` unless its call id or key is already there.

        Returns the row that holds the call id, or else the row that holds the key
        (another call id with the same dedupe key), and whether this call inserted it.
        """
        now = datetime.now(UTC)
        with begin_write(self.engine) as conn:
            self._ensure_task(conn, new.task_id, provider)
            inserted = insert_ignore(
                conn,
                _CALLS,
                {
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
                    "state": CallState.RECEIVED.value,
                    "version": 0,
                    "attempt": 0,
                    "created_at": now,
                    "updated_at": now,
                },
            )
            rec = self._one(conn, T.task_id == new.task_id, T.call_id == new.call_id)
            if rec is None:
                rec = self._one(conn, T.task_id == new.task_id, T.idem_key == new.idem_key)
            if rec is None:  # pragma: no cover - a row we could not insert must exist
                raise RuntimeError("ledger row vanished during insert")
            if inserted:
                audit.append(
                    conn,
                    task_id=new.task_id,
                    call_row_id=rec.row_id,
                    call_id=new.call_id,
                    event="received",
                    to_state=CallState.RECEIVED.value,
                    actor=actor,
                    detail={"tool": new.tool, "args_hash": new.args_hash,
                            "idem_key": new.idem_key},
                    at=now,
                )
        return rec, inserted

    def transition(
        self,
        rec: CallRecord,
        event: Event,
        *,
        actor: str | None = None,
        code: str | None = None,
        reason: str | None = None,
        changes: Mapping[str, Any] | None = None,
        guard: Sequence[ColumnElement[bool]] = (),
        detail: Mapping[str, Any] | None = None,
        within: Callable[[Connection, CallRecord], None] | None = None,
    ) -> Transition:
        """Apply ``event`` to ``rec`` iff the row is still at ``rec.state``/``rec.version``.

        ``guard`` adds conditions (lease owner, lease expired) that must also still
        hold. The audit event is written in the same transaction, only if it applied.
        ``within`` runs in that transaction too, after the update applied and with
        the updated row: bookkeeping that must commit with the transition or not at
        all (a quota counted, an approval consumed). If it raises, nothing commits.
        """
        target = next_state(rec.state, event)
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "state": target.value,
            "version": rec.version + 1,
            "updated_at": now,
            "reason_code": code,
            "reason": bound(reason, MAX_REASON_CHARS) if reason is not None else None,
        }
        if target is not CallState.EXECUTING:
            values["lease_owner"] = None
            values["lease_expires_ms"] = None
        if target.terminal:
            values["finished_at"] = now
        values.update(changes or {})
        stmt = (
            update(T)
            .where(T.id == rec.row_id, T.state == rec.state.value, T.version == rec.version, *guard)
            .values(**values)
        )
        with begin_write(self.engine) as conn:
            won = conn.execute(stmt).rowcount == 1
            if won:
                info: dict[str, Any] = {"version": rec.version + 1}
                if code:
                    info["code"] = code
                if values.get("attempt") is not None:
                    info["attempt"] = values["attempt"]
                info.update(detail or {})
                audit.append(
                    conn,
                    task_id=rec.task_id,
                    call_row_id=rec.row_id,
                    call_id=rec.call_id,
                    event=event.value,
                    from_state=rec.state.value,
                    to_state=target.value,
                    actor=actor,
                    detail=info,
                    at=now,
                )
            current = self._one(conn, T.id == rec.row_id)
            if current is None:  # pragma: no cover - rows are never deleted
                raise RuntimeError(f"ledger row {rec.row_id} vanished")
            if won and within is not None:
                within(conn, current)
        return Transition(won, current)

    # Named transitions whose extra columns must always travel together.

    def claim(
        self,
        rec: CallRecord,
        *,
        owner: str,
        lease_ms: int,
        within: Callable[[Connection, CallRecord], None] | None = None,
    ) -> Transition:
        """``authorized -> executing``: a new attempt, leased to ``owner``.

        ``within`` as for ``transition``: e.g. consuming an approval, so that an
        approval is used by exactly the attempt that commits ``executing``.
        """
        now = now_ms()
        return self.transition(
            rec,
            Event.CLAIM,
            actor=owner,
            within=within,
            changes={
                "attempt": rec.attempt + 1,
                "lease_owner": owner,
                "lease_expires_ms": now + lease_ms,
                "started_at": datetime.now(UTC),
                "finished_at": None,
                "result": None,
                "result_sha256": None,
                "result_bytes": None,
                "error": None,
            },
        )

    def renew(self, rec: CallRecord, *, owner: str, lease_ms: int) -> bool:
        """Push the lease expiry out while the tool runs; not a transition.

        Matches on the claimed version, so a renewal can never revive a call that
        was judged lost in the meantime.
        """
        stmt = (
            update(T)
            .where(
                T.id == rec.row_id,
                T.state == CallState.EXECUTING.value,
                T.version == rec.version,
                T.lease_owner == owner,
            )
            .values(lease_expires_ms=now_ms() + lease_ms)
        )
        with begin_write(self.engine) as conn:
            return conn.execute(stmt).rowcount == 1

    def finish(
        self,
        rec: CallRecord,
        event: Event,
        *,
        actor: str | None,
        result: StoredResult | None = None,
        error: Mapping[str, Any] | None = None,
        code: str | None = None,
        reason: str | None = None,
        lease_owner: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> Transition:
        """Any transition that stores an outcome: SUCCEED, FAIL, LOSE, SETTLE_*.

        With ``lease_owner``, it applies only while that owner still holds the lease:
        the worker that ran the tool reports, nobody else in its name.
        """
        guard = [T.lease_owner == lease_owner] if lease_owner is not None else []
        changes: dict[str, Any] = {}
        info = dict(detail or {})
        if result is not None:
            changes.update(result=result.text, result_sha256=result.sha256,
                           result_bytes=result.size)
            info["result_sha256"] = result.sha256
        if error is not None:
            changes["error"] = canonical_json(dict(error))
            info["error_type"] = error.get("type")
        return self.transition(
            rec, event, actor=actor, code=code, reason=reason, changes=changes, guard=guard,
            detail=info,
        )

    def lose_if_abandoned(
        self, rec: CallRecord, *, actor: str, expired_only: bool, code: str, reason: str
    ) -> Transition:
        """``executing -> in_doubt`` for a call whose owner is gone.

        The guard re-checks, inside the update, that the same owner still holds it
        and (when judged by time) that the lease is still expired, so a lease renewed
        a moment ago is never stolen.
        """
        guard: list[ColumnElement[bool]] = [T.lease_owner == rec.lease_owner]
        if expired_only:
            guard.append(T.lease_expires_ms < now_ms())
        return self.transition(
            rec, Event.LOSE, actor=actor, code=code, reason=reason, guard=guard,
            detail={"owner": rec.lease_owner, "attempt": rec.attempt},
        )

    def note(
        self,
        rec: CallRecord,
        event: str,
        *,
        actor: str | None = None,
        call_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """An audit-only event: the call was seen again, conflicted, was reported."""
        with begin_write(self.engine) as conn:
            audit.append(
                conn,
                task_id=rec.task_id,
                call_row_id=rec.row_id,
                call_id=call_id or rec.call_id,
                event=event,
                from_state=rec.state.value,
                to_state=rec.state.value,
                actor=actor,
                detail=detail,
            )

    def record_terminal(self, task_id: str, terminal: str, reason: str | None = None) -> None:
        """Remember how the task's latest response ended, for operators."""
        now = datetime.now(UTC)
        with begin_write(self.engine) as conn:
            self._ensure_task(conn, task_id, None)
            conn.execute(
                update(TaskRow)
                .where(TaskRow.id == task_id)
                .values(terminal=terminal, terminal_reason=reason, updated_at=now)
            )
            audit.append(
                conn, task_id=task_id, event="response_ended",
                detail={"terminal": terminal, **({"reason": reason} if reason else {})}, at=now,
            )
