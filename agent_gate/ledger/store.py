"""The ledger: tool-call rows changed only by committed compare-and-set transitions.

Each method here is one short write transaction (or one read). A transition names
the row *and the state and version the caller last saw*; if another process moved
the row in between, nothing is written and the caller gets the row as it now is
(``Transition.won`` is False). The arrows themselves come from
``agent_gate.ledger.states``; this module only applies them.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

from sqlalchemy import BigInteger, Connection, Engine, Table, bindparam, func, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.elements import ColumnElement

from agent_gate.errors import AgentGateError
from agent_gate.ledger import approvals, audit, quota
from agent_gate.ledger.approvals import NotAwaitingApproval
from agent_gate.ledger.canonical import canonical_json, sha256_hex
from agent_gate.ledger.dialect import (
    DEFAULT_BUSY_TIMEOUT,
    begin_read,
    begin_write,
    create_ledger_engine,
    db_now_ms,
    for_update,
    insert_ignore,
    insert_returning,
    release_idle,
    require_ledger_file,
    resolve_url,
)
from agent_gate.ledger.migrate import ensure_schema
from agent_gate.ledger.models import TaskRow, ToolCallRow
from agent_gate.ledger.prepared import prepare, result_processors
from agent_gate.ledger.privacy import bound
from agent_gate.ledger.states import TERMINAL, CallState, Event, next_state

__all__ = [
    "CallRecord",
    "DbNowPlus",
    "Guard",
    "Ledger",
    "NewCall",
    "Ruling",
    "StoredResult",
    "TaskContextConflict",
    "TaskRecord",
    "TaskSummary",
    "Transition",
]

T = ToolCallRow
# The mapped classes' tables, typed as the Core ``Table`` they are.
_CALLS = cast(Table, ToolCallRow.__table__)
_TASKS = cast(Table, TaskRow.__table__)
MAX_REASON_CHARS = 900
STATE_NOT_IN_AUDIT = "state_not_in_audit"
"""Reason code (and audit event) of a claim refused because the row's state is not
the one its audit trail last recorded."""
_COLUMNS = tuple(_CALLS.c)
_COLUMN_NAMES = tuple(c.name for c in _COLUMNS)
_PROCESSORS: dict[str, tuple[tuple[int, Callable[[Any], Any]], ...]] = {}
_FIELD_ORDER = (
    "id", "task_id", "call_id", "idem_key", "tool", "effect", "idempotency", "args_hash",
    "arguments", "sealed_arguments", "policy_hash", "rule_ids", "state", "version",
    "attempt", "lease_owner", "lease_expires_ms", "result", "result_sha256",
    "result_bytes", "error", "reason_code", "reason", "created_at", "updated_at",
    "started_at", "finished_at",
)
"""The ``tool_calls`` columns in the order ``_record`` unpacks a driver's row."""
if _COLUMN_NAMES != _FIELD_ORDER:  # pragma: no cover - checked at import, like states
    raise AssertionError("tool_calls columns changed: update store._FIELD_ORDER/_record")


def _processed(dialect: Dialect, values: Sequence[Any]) -> list[Any]:
    """A ``tool_calls`` row from the driver, converted as Core would have returned it.

    Only the columns whose type has a result processor for this dialect are touched
    (SQLite's datetimes): a row is converted four times per gate call.
    """
    processors = _PROCESSORS.get(dialect.name)
    if processors is None:
        processors = _PROCESSORS.setdefault(
            dialect.name,
            tuple(
                (i, process)
                for i, process in enumerate(result_processors(dialect, _COLUMNS))
                if process is not None
            ),
        )
    row = list(values)
    if len(row) != len(_COLUMNS):
        raise ValueError(f"a tool_calls row has {len(_COLUMNS)} columns, not {len(row)}")
    for i, process in processors:
        value = row[i]
        if value is not None:
            row[i] = process(value)
    return row


def _record(dialect: Dialect, values: Sequence[Any]) -> CallRecord:
    """``CallRecord.from_row`` for a row from the driver, built by position."""
    (row_id, task_id, call_id, idem_key, tool, effect, idempotency, args_hash, arguments,
     sealed_arguments, policy_hash, rule_ids, state, version, attempt, lease_owner,
     lease_expires_ms, result, result_sha256, result_bytes, error, reason_code, reason,
     created_at, updated_at, started_at, finished_at) = _processed(dialect, values)
    # _loads and _utc inlined: four records per gate call.
    return CallRecord(
        row_id=row_id,
        task_id=task_id,
        call_id=call_id,
        idem_key=idem_key,
        tool=tool,
        effect=effect,
        idempotency=idempotency,
        args_hash=args_hash,
        arguments=None if arguments is None else _decode(arguments),
        state=_STATES.get(state) or CallState(state),
        version=version,
        attempt=attempt,
        lease_owner=lease_owner,
        lease_expires_ms=lease_expires_ms,
        result=None if result is None else _decode(result),
        result_sha256=result_sha256,
        result_bytes=result_bytes,
        result_omitted=result is None and result_sha256 is not None,
        error=None if error is None else _decode(error),
        reason_code=reason_code,
        reason=reason,
        created_at=(
            datetime.now(UTC) if created_at is None
            else created_at if created_at.tzinfo else created_at.replace(tzinfo=UTC)
        ),
        updated_at=(
            datetime.now(UTC) if updated_at is None
            else updated_at if updated_at.tzinfo else updated_at.replace(tzinfo=UTC)
        ),
        started_at=(
            None if started_at is None
            else started_at if started_at.tzinfo else started_at.replace(tzinfo=UTC)
        ),
        finished_at=(
            None if finished_at is None
            else finished_at if finished_at.tzinfo else finished_at.replace(tzinfo=UTC)
        ),
        sealed_arguments=sealed_arguments,
        policy_hash=policy_hash,
        rule_ids=() if rule_ids is None else tuple(_decode(rule_ids) or ()),
    )


_STATES: dict[str, CallState] = {state.value: state for state in CallState}
# The hot paths read a member's value as ``_value_`` (a plain attribute; ``.value`` is
# a property of ``Enum``, and hashing a member calls ``Enum.__hash__`` in Python).
_RECEIVED = CallState.RECEIVED.value
_TERMINAL_VALUES = frozenset(state.value for state in TERMINAL)


@dataclass(frozen=True, slots=True)
class DbNowPlus:
    """A column value of "the database clock plus ``ms``": lease expiries are measured
    by the database's clock (``dialect.db_now_ms``), never a worker's."""

    ms: int


@dataclass(frozen=True, slots=True)
class Guard:
    """Conditions a transition's compare-and-set must also still match.

    ``owner``: the call is still leased to ``lease_owner`` (only the worker that ran
    the tool reports its outcome; None matches a row without an owner).
    ``lease_expired``: its lease has run out by the database clock right now (a
    lease renewed a moment ago is never stolen).
    """

    owner: bool = False
    lease_owner: str | None = None
    lease_expired: bool = False


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


_decode = json.JSONDecoder().decode
"""``json.loads`` for text, without its per-call type checks and keyword handling."""


def _loads(text: str | None) -> Any:
    return _decode(text) if text is not None else None


class TaskContextConflict(AgentGateError):
    """A task was given another principal or scope than the one it was started with.

    A task's principal and scope are fixed when first given: quotas, approvals and
    resumes of the task are all judged for them, so they cannot change half-way.
    """


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
    sealed_arguments: str | None = None
    """The full arguments, sealed (``agent_gate.ledger.seal``), when ``arguments`` holds
    redacted stand-ins; None when nothing was redacted."""
    policy_hash: str | None = None
    rule_ids: tuple[str, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CallRecord:
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
            sealed_arguments=row["sealed_arguments"],
            policy_hash=row["policy_hash"],
            rule_ids=tuple(_loads(row["rule_ids"]) or ()),
        )


@dataclass(frozen=True, slots=True)
class TaskRecord:
    id: str
    provider: str | None
    terminal: str | None
    terminal_reason: str | None
    created_at: datetime
    updated_at: datetime
    principal: dict[str, Any] | None = None
    scope: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """A task and how many of its calls are in each state, for operators."""

    task: TaskRecord
    counts: Mapping[CallState, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


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
    """As they may be stored: redacted stand-ins in place of redacted fields."""
    sealed_arguments: str | None = None
    principal: str | None = None
    """Canonical JSON of the task's principal, bound to the task when first given."""
    scope: str | None = None


@dataclass(frozen=True, slots=True)
class Ruling:
    """A decision taken inside a ledger transaction (``Ledger.authorize`` /
    ``Ledger.claim_approved``): which arrow to take and what commits with it.

    ``event`` None means "no change" (the call keeps waiting, ``reason`` says why).
    ``charges`` are the quota amounts the call adds when it becomes authorized;
    ``changes`` extra columns (the deciding policy hash and rule ids); ``approval_id``
    the approval a claim consumes.
    """

    event: Event | None
    code: str | None = None
    reason: str | None = None
    detail: Mapping[str, Any] | None = None
    charges: Mapping[str, Decimal] = field(default_factory=dict)
    changes: Mapping[str, Any] = field(default_factory=dict)
    approval_id: int | None = None


class _Lost(Exception):
    """Internal: a compare-and-set inside a multi-step transaction lost; roll back."""


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
        create: bool = False,
    ) -> None:
        """Open the ledger at ``url`` (default ``$AGENT_GATE_DB``, else the embedded file).

        A SQLite file that is not there is created only with ``create=True``: a
        ledger that went missing (deleted, a wrong path, another working directory)
        is not a new one, and starting over would run every call it recorded again
        (``LedgerMissing`` says so). PostgreSQL is never created here.
        """
        self.url = resolve_url(url) if engine is None else str(engine.url)
        if engine is None:
            require_ledger_file(self.url, create=create)
        self.engine = engine or create_ledger_engine(
            self.url, busy_timeout=busy_timeout, create=create
        )
        # The SQLite connections kept between transactions (dialect.begin_write) stay
        # checked out, which keeps their engine alive: a ledger nobody closed gives
        # them back when it is collected.
        self._release = weakref.finalize(self, release_idle, self.engine)
        self._known_tasks: set[tuple[str, str | None, str | None]] = set()
        """(task, principal, scope) this ledger has committed a call under (``record``)."""
        ensure_schema(self.engine, auto_upgrade=auto_upgrade)

    def close(self) -> None:
        self._release()
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads

    @staticmethod
    def _one(conn: Connection, **where: Any) -> CallRecord | None:
        """The row whose columns equal ``where`` (a unique key), read on every call."""
        keys = tuple(sorted(where))

        def build() -> Any:
            return select(*_COLUMNS).where(
                *[_CALLS.c[k] == bindparam(k, type_=_CALLS.c[k].type) for k in keys]
            )

        rows = prepare(conn, ("call_by", keys), build).run(conn, where).rows
        return _record(conn.dialect, rows[0]) if rows else None

    def get(self, task_id: str, call_id: str) -> CallRecord | None:
        with begin_read(self.engine) as conn:
            return self._one(conn, task_id=task_id, call_id=call_id)

    def get_by_key(self, task_id: str, idem_key: str) -> CallRecord | None:
        with begin_read(self.engine) as conn:
            return self._one(conn, task_id=task_id, idem_key=idem_key)

    def get_row(self, row_id: int) -> CallRecord | None:
        with begin_read(self.engine) as conn:
            return self._one(conn, id=row_id)

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
        return _task_record(row) if row is not None else None

    def tasks(self) -> list[TaskSummary]:
        """Every task with the number of its calls in each state, newest first."""
        with begin_read(self.engine) as conn:
            rows = conn.execute(
                select(TaskRow.__table__).order_by(TaskRow.updated_at.desc(), TaskRow.id)
            ).mappings().all()
            counted = conn.execute(
                select(T.task_id, T.state, func.count()).group_by(T.task_id, T.state)
            ).all()
        counts: dict[str, dict[CallState, int]] = {}
        for task_id, state, n in counted:
            counts.setdefault(task_id, {})[CallState(state)] = int(n)
        return [TaskSummary(_task_record(r), counts.get(r["id"], {})) for r in rows]

    def audit(
        self,
        task_id: str | None = None,
        call_row_id: int | None = None,
        call_id: str | None = None,
    ) -> list[audit.AuditRecord]:
        with begin_read(self.engine) as conn:
            return audit.read(conn, task_id=task_id, call_row_id=call_row_id, call_id=call_id)

    def verify_audit(self, anchor: tuple[int, str] | None = None) -> audit.ChainReport:
        """Check the audit hash chain in one snapshot (see ``audit.verify``)."""
        with begin_read(self.engine) as conn:
            return audit.verify(conn, anchor=anchor)

    def approval(self, rec: CallRecord) -> approvals.ApprovalRecord | None:
        """The newest approval or denial given for the call."""
        with begin_read(self.engine) as conn:
            return approvals.latest(conn, rec.row_id)

    def usage(self, task_id: str) -> dict[str, Decimal]:
        """Every quota counter the task has charged, with its total."""
        with begin_read(self.engine) as conn:
            return quota.charges_of(conn, task_id)

    # ----------------------------------------------------------------- writes

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction whose audit events are linked into the chain at its end."""
        # audit.staged(conn), inlined: one context manager fewer per transaction.
        with begin_write(self.engine) as conn:
            stage = audit.open_stage(conn)
            try:
                yield conn
                if stage is not None:
                    audit.flush(conn)
            finally:
                if stage is not None:
                    audit.close_stage(stage)

    @staticmethod
    def lock_task(conn: Connection, task_id: str) -> None:
        """Serialize the writers of one task until the transaction ends.

        Deciding a call reads the task's quota usage and charges it; taking this lock
        first makes that read-decide-charge atomic per task on every backend.
        """
        prepare(
            conn,
            "lock_task",
            lambda: for_update(conn, select(_TASKS.c.id).where(_TASKS.c.id == bindparam("id"))),
        ).run(conn, {"id": task_id})

    def _ensure_task(
        self,
        conn: Connection,
        task_id: str,
        provider: str | None,
        principal: str | None = None,
        scope: str | None = None,
    ) -> None:
        now = datetime.now(UTC)
        values = {"id": task_id, "created_at": now, "updated_at": now, "provider": provider,
                  "principal": principal, "scope": scope}
        if insert_ignore(conn, _TASKS, values):
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
                select(_TASKS.c.principal, _TASKS.c.scope).where(_TASKS.c.id == bindparam("id")),
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
            conn.execute(update(TaskRow).where(TaskRow.id == task_id).values(**bind))
            audit.append(
                conn, task_id=task_id, event="task_bound", at=now,
                detail=_context_detail(bind.get("principal"), bind.get("scope")),
            )

    def ensure_task(self, task_id: str, provider: str | None = None) -> None:
        with self._write() as conn:
            self._ensure_task(conn, task_id, provider)

    def record(
        self,
        new: NewCall,
        *,
        provider: str | None = None,
        actor: str | None = None,
        decide: Callable[[Connection, CallRecord], Ruling | None] | None = None,
        lock: bool = False,
    ) -> tuple[CallRecord, bool]:
        """Insert the call as ``received`` unless its call id or key is already there.

        Returns the row that holds the call id, or else the row that holds the key
        (another call id with the same dedupe key), and whether this call inserted it.

        With ``decide``, a call this inserts is also decided in the same transaction
        (as ``authorize`` would, one commit instead of two): ``decide`` gets the new
        row and returns the ruling to apply, or None to leave it ``received``. The
        audit trail still shows ``received`` then the decision. ``lock`` takes the
        task lock first (before the insert, the order every writer keeps), for a
        ``decide`` that reads the task's quota usage.
        """
        now = datetime.now(UTC)
        context = (new.task_id, new.principal, new.scope)
        with self._write() as conn:
            if context not in self._known_tasks:
                self._ensure_task(conn, new.task_id, provider, new.principal, new.scope)
            if decide is not None and lock:
                self.lock_task(conn, new.task_id)
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
            }
            returned = insert_returning(conn, _CALLS, values)
            if returned is None:  # the dialect cannot: insert, then read the row
                inserted = insert_ignore(conn, _CALLS, values)
                rec = self._one(conn, task_id=new.task_id, call_id=new.call_id)
            else:
                inserted = bool(returned)
                rec = (
                    _record(conn.dialect, returned[0]) if inserted
                    else self._one(conn, task_id=new.task_id, call_id=new.call_id)
                )
            if rec is None:
                rec = self._one(conn, task_id=new.task_id, idem_key=new.idem_key)
            if rec is None:  # pragma: no cover - a row we could not insert must exist
                raise RuntimeError("ledger row vanished during insert")
            if inserted:
                info: dict[str, Any] = {"tool": new.tool, "args_hash": new.args_hash,
                                        "idem_key": new.idem_key}
                if new.sealed_arguments is not None:
                    # The redacted form, never the values: what the policy lets the trail keep.
                    info["arguments"] = dict(new.arguments or {})
                audit.append(
                    conn,
                    task_id=new.task_id,
                    call_row_id=rec.row_id,
                    call_id=new.call_id,
                    event="received",
                    to_state=_RECEIVED,
                    actor=actor,
                    detail=info,
                    at=now,
                )
                ruling = decide(conn, rec) if decide is not None else None
                if ruling is not None and ruling.event is not None:
                    applied = self._apply(
                        conn, rec, ruling.event, actor=actor, code=ruling.code,
                        reason=ruling.reason, changes=ruling.changes, detail=ruling.detail,
                    )
                    if applied is None:  # pragma: no cover - the row is ours until commit
                        raise RuntimeError(f"ledger row {rec.row_id} changed under its insert")
                    if ruling.event is Event.ALLOW and ruling.charges:
                        quota.charge(conn, task_id=rec.task_id, call_row_id=rec.row_id,
                                     amounts=ruling.charges)
                    rec = applied
        self._remember_task(context)
        return rec, inserted

    def _remember_task(self, context: tuple[str, str | None, str | None]) -> None:
        """Note, after its commit, that the task exists bound to this principal and scope.

        ``record`` then skips ``_ensure_task`` for the task's next calls: one statement
        fewer per call, with the same outcome, because a task row is never deleted
        (calls refer to it, ``ON DELETE RESTRICT``) and its principal and scope never
        change once set (``_ensure_task`` refuses another and only ever fills in one
        that was never given). A principal or scope not given (None) matches anything.
        """
        known = self._known_tasks
        if context not in known:
            if len(known) >= _KNOWN_TASKS_MAX:
                known.clear()
            known.add(context)

    def _apply(
        self,
        conn: Connection,
        rec: CallRecord,
        event: Event,
        *,
        actor: str | None = None,
        code: str | None = None,
        reason: str | None = None,
        changes: Mapping[str, Any] | None = None,
        guard: Guard | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> CallRecord | None:
        """One compare-and-set and its audit event in ``conn``'s transaction.

        Returns the updated row, or None when the row was no longer at
        ``rec.state``/``rec.version`` (nothing written).
        """
        target = next_state(rec.state, event)
        now = datetime.now(UTC)
        values: dict[str, Any] = {
            "state": target._value_,
            "version": rec.version + 1,
            "updated_at": now,
            "reason_code": code,
            "reason": bound(reason, MAX_REASON_CHARS) if reason is not None else None,
        }
        if target is not CallState.EXECUTING:
            values["lease_owner"] = None
            values["lease_expires_ms"] = None
        if target._value_ in _TERMINAL_VALUES:  # target.terminal, without hashing an Enum
            values["finished_at"] = now
        values.update(changes or {})
        matched, current = _compare_and_set(conn, rec, values, guard or _NO_GUARD)
        if matched != 1:
            return None
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
            event=event._value_,
            from_state=rec.state._value_,
            to_state=target._value_,
            actor=actor,
            detail=info,
            at=now,
        )
        if current is None:  # the dialect cannot RETURN from an UPDATE: read it back
            current = self._one(conn, id=rec.row_id)
        if current is None:  # pragma: no cover - rows are never deleted
            raise RuntimeError(f"ledger row {rec.row_id} vanished")
        return current

    def transition(
        self,
        rec: CallRecord,
        event: Event,
        *,
        actor: str | None = None,
        code: str | None = None,
        reason: str | None = None,
        changes: Mapping[str, Any] | None = None,
        guard: Guard | None = None,
        detail: Mapping[str, Any] | None = None,
        within: Callable[[Connection, CallRecord], None] | None = None,
        audited_only: bool = False,
    ) -> Transition:
        """Apply ``event`` to ``rec`` iff the row is still at ``rec.state``/``rec.version``.

        ``guard`` adds conditions (lease owner, lease expired) that must also still
        hold. The audit event is written in the same transaction, only if it applied.
        ``within`` runs in that transaction too, after the update applied and with
        the updated row: bookkeeping that must commit with the transition or not at
        all. If it raises, nothing commits. ``audited_only``: refuse (``won=False``) a
        row whose state its audit trail does not back (``_refuse_unaudited``).
        """
        with self._write() as conn:
            if audited_only:
                refused = self._refuse_unaudited(conn, rec, actor)
                if refused is not None:
                    return Transition(False, refused)
            current = self._apply(
                conn, rec, event, actor=actor, code=code, reason=reason, changes=changes,
                guard=guard, detail=detail,
            )
            won = current is not None
            if current is None:
                current = self._one(conn, id=rec.row_id)
                if current is None:  # pragma: no cover - rows are never deleted
                    raise RuntimeError(f"ledger row {rec.row_id} vanished")
            elif within is not None:
                within(conn, current)
        return Transition(won, current)

    def authorize(
        self,
        rec: CallRecord,
        decide: Callable[[Connection, CallRecord], Ruling],
        *,
        actor: str | None = None,
    ) -> tuple[Transition, Ruling | None]:
        """Decide a ``received`` call and apply the decision in one transaction.

        The task is locked first, so ``decide`` may read the task's quota usage and
        nobody can charge the task between that read and this commit. An ``allow``
        commits the ruling's quota charges with the transition. Returns the
        transition and the ruling (None when the row had moved on: not decided here).
        """
        try:
            with self._write() as conn:
                current = self._locked_row(conn, rec)
                ruling = decide(conn, current)
                if ruling.event is None:
                    raise ValueError("an authorization ruling must name an event")
                applied = self._apply(
                    conn, current, ruling.event, actor=actor, code=ruling.code,
                    reason=ruling.reason, changes=ruling.changes, detail=ruling.detail,
                )
                if applied is None:
                    raise _Lost
                if ruling.event is Event.ALLOW and ruling.charges:
                    quota.charge(conn, task_id=rec.task_id, call_row_id=rec.row_id,
                                 amounts=ruling.charges)
        except _Lost:
            return Transition(False, self._reread(rec)), None
        return Transition(True, applied), ruling

    def _locked_row(self, conn: Connection, rec: CallRecord) -> CallRecord:
        """Lock ``rec``'s task, then read the row: ``_Lost`` unless it is still at
        ``rec``'s state and version (someone else moved it since it was read)."""
        self.lock_task(conn, rec.task_id)
        current = self._one(conn, id=rec.row_id)
        if current is None or (current.state, current.version) != (rec.state, rec.version):
            raise _Lost
        return current

    def claim_approved(
        self,
        rec: CallRecord,
        *,
        owner: str,
        lease_ms: int,
        decide: Callable[[Connection, CallRecord], Ruling],
    ) -> tuple[Transition, Ruling | None]:
        """Use an approval: ``awaiting_approval -> authorized -> executing`` at once.

        In one transaction, with the task locked: ``decide`` checks the approval
        against the arguments, the policy and the clock and re-checks the quotas with
        the task's usage now; then its ruling is applied. ``APPROVE`` consumes the
        approval, charges the quotas and commits ``executing`` leased to ``owner``
        (so an approval is used by exactly the attempt that runs); ``DENY`` rejects
        the call (a quota ran out meanwhile); ``None`` changes nothing. A process
        that lost the race for the row gets ``won=False`` and nothing is consumed.
        """
        try:
            with self._write() as conn:
                current = self._locked_row(conn, rec)
                refused = self._refuse_unaudited(conn, current, owner)
                if refused is not None:
                    return Transition(False, refused), None
                ruling = decide(conn, current)
                if ruling.event is None:
                    return Transition(False, current), ruling
                if ruling.event is Event.DENY:
                    applied = self._apply(
                        conn, current, Event.DENY, actor=owner, code=ruling.code,
                        reason=ruling.reason, changes=ruling.changes, detail=ruling.detail,
                    )
                    if applied is None:
                        raise _Lost
                    return Transition(True, applied), ruling
                if ruling.event is not Event.APPROVE or ruling.approval_id is None:
                    raise ValueError("an approved claim needs APPROVE and the approval's id")
                authorized = self._apply(
                    conn, current, Event.APPROVE, actor=owner, code=ruling.code,
                    reason=ruling.reason, changes=ruling.changes,
                    detail={**(ruling.detail or {}), "approval_id": ruling.approval_id},
                )
                if authorized is None:
                    raise _Lost
                attempt = authorized.attempt + 1
                if not approvals.consume(conn, ruling.approval_id, attempt):
                    raise _Lost
                if ruling.charges:
                    quota.charge(conn, task_id=rec.task_id, call_row_id=rec.row_id,
                                 amounts=ruling.charges)
                executing = self._apply(
                    conn, authorized, Event.CLAIM, actor=owner,
                    changes=self._claim_changes(authorized, owner, lease_ms),
                    detail={"approval_id": ruling.approval_id},
                )
                if executing is None:  # pragma: no cover - we hold the row since APPROVE
                    raise _Lost
        except _Lost:
            return Transition(False, self._reread(rec)), None
        return Transition(True, executing), ruling

    def claim_rechecked(
        self,
        rec: CallRecord,
        *,
        owner: str,
        lease_ms: int,
        decide: Callable[[Connection, CallRecord], Ruling],
    ) -> tuple[Transition, Ruling | None]:
        """``authorized -> executing`` for a call this gate did not just decide.

        In one transaction, with the task locked: ``decide`` re-checks the row as it
        is now (its arguments against ``args_hash``, the claiming gate's policy with
        the task's usage now) and its ruling is applied: ``CLAIM`` commits
        ``executing`` leased to ``owner`` (with the ruling's columns, e.g. the policy
        that allowed it now); ``REJECT`` / ``REQUIRE_APPROVAL`` move the call there,
        audited with the ruling's reason; ``None`` changes nothing.
        """
        try:
            with self._write() as conn:
                current = self._locked_row(conn, rec)
                refused = self._refuse_unaudited(conn, current, owner)
                if refused is not None:
                    return Transition(False, refused), None
                ruling = decide(conn, current)
                if ruling.event is None:
                    return Transition(False, current), ruling
                changes = dict(ruling.changes)
                if ruling.event is Event.CLAIM:
                    changes.update(self._claim_changes(current, owner, lease_ms))
                applied = self._apply(
                    conn, current, ruling.event, actor=owner, code=ruling.code,
                    reason=ruling.reason, changes=changes, detail=ruling.detail,
                )
                if applied is None:
                    raise _Lost
        except _Lost:
            return Transition(False, self._reread(rec)), None
        return Transition(True, applied), ruling

    def approve(
        self,
        rec: CallRecord,
        *,
        by: str,
        reason: str | None = None,
        expires_ms: int | None = None,
        ttl_ms: int | None = None,
        policy_hash: str | None = None,
    ) -> tuple[approvals.ApprovalRecord, bool]:
        """Record a person's approval of a call that waits for one.

        Bound to the call's argument hash, to ``policy_hash`` (default: the hash of
        the policy that asked for the approval) and to an expiry: ``ttl_ms`` after
        the database's clock now (as leases are measured; ``approvals.ttl_problem``
        bounds it), or the absolute ``expires_ms``; neither: no expiry. The call stays
        ``awaiting_approval`` until a gate consumes the approval. Returns the
        approval that stands and whether this call created it (an unused, unexpired
        approval under the same policy is returned as it is).
        """
        if ttl_ms is not None:
            why = approvals.ttl_problem(ttl_ms / 1000)
            if why is not None:
                raise ValueError(f"ttl_ms: {why}")
        with self._write() as conn:
            self.lock_task(conn, rec.task_id)
            current = self._one(conn, id=rec.row_id)
            if current is None or current.state is not CallState.AWAITING_APPROVAL:
                state = current.state.value if current else "missing"
                raise NotAwaitingApproval(
                    f"call {rec.call_id!r} of task {rec.task_id!r} is {state}, "
                    "not awaiting approval"
                )
            bound_hash = policy_hash or current.policy_hash
            last = approvals.latest(conn, current.row_id)
            # The standing approval is returned as is only if it is this approver's:
            # another person's approval (perhaps one the policy refuses) is no answer.
            if last is not None and last.decided_by == by and approvals.problem(
                last, args_hash=current.args_hash, stored_args_hash=current.args_hash,
                policy_hash=bound_hash,
            ) is None:
                return last, False
            given = approvals.insert_answer(
                conn, call_row_id=current.row_id, task_id=current.task_id,
                call_id=current.call_id, verdict=approvals.APPROVED,
                args_hash=current.args_hash, policy_hash=bound_hash, by=by,
                reason=bound(reason, MAX_REASON_CHARS) if reason else None,
                expires_ms=expires_ms, ttl_ms=ttl_ms,
            )
            audit.append(
                conn, task_id=current.task_id, call_row_id=current.row_id,
                call_id=current.call_id, event="approval_granted",
                from_state=current.state.value, to_state=current.state.value,
                actor=f"operator:{by}",
                detail={"approval_id": given.id, "args_hash": given.args_hash,
                        "policy_hash": given.policy_hash, "expires_ms": given.expires_ms,
                        **({"reason": bound(reason, 300)} if reason else {})},
            )
        return given, True

    def deny(self, rec: CallRecord, *, by: str, reason: str | None = None) -> Transition:
        """A person denies a waiting call: ``awaiting_approval -> rejected``."""
        text = f"denied by {by}" + (f": {bound(reason, 300)}" if reason else "")

        def remember(conn: Connection, current: CallRecord) -> None:
            approvals.insert_answer(
                conn, call_row_id=current.row_id, task_id=current.task_id,
                call_id=current.call_id, verdict=approvals.DENIED,
                args_hash=current.args_hash, policy_hash=current.policy_hash, by=by,
                reason=bound(reason, MAX_REASON_CHARS) if reason else None, expires_ms=None,
            )

        if rec.state is not CallState.AWAITING_APPROVAL:
            raise NotAwaitingApproval(
                f"call {rec.call_id!r} of task {rec.task_id!r} is {rec.state.value}, "
                "not awaiting approval"
            )
        tr = self.transition(
            rec, Event.DENY, actor=f"operator:{by}", code="denied_by_operator", reason=text,
            within=remember,
        )
        if not tr.won:
            raise NotAwaitingApproval(
                f"call {rec.call_id!r} of task {rec.task_id!r} changed to "
                f"{tr.record.state.value} while being denied"
            )
        return tr

    def _reread(self, rec: CallRecord) -> CallRecord:
        current = self.get_row(rec.row_id)
        if current is None:  # pragma: no cover - rows are never deleted
            raise RuntimeError(f"ledger row {rec.row_id} vanished")
        return current

    # Named transitions whose extra columns must always travel together.

    def claim(
        self,
        rec: CallRecord,
        *,
        owner: str,
        lease_ms: int,
        within: Callable[[Connection, CallRecord], None] | None = None,
        trail_checked: bool = True,
    ) -> Transition:
        """``authorized -> executing``: a new attempt, leased to ``owner``.

        ``within`` as for ``transition``: e.g. consuming an approval, so that an
        approval is used by exactly the attempt that commits ``executing``. A row
        whose ``authorized`` its audit trail does not back (set by a raw ``UPDATE``)
        is not claimed: ``won=False``, the row keeps its state with reason
        ``state_not_in_audit``, and the refusal is audited (``_refuse_unaudited``).
        ``trail_checked=False`` skips that read for the caller that itself committed
        this very version (and its audit entry) a moment ago: the compare-and-set on
        the version is then the whole check, and the hot path keeps one statement.
        """
        return self.transition(
            rec,
            Event.CLAIM,
            actor=owner,
            within=within,
            changes=self._claim_changes(rec, owner, lease_ms),
            audited_only=trail_checked,
        )

    def _refuse_unaudited(
        self, conn: Connection, rec: CallRecord, actor: str | None
    ) -> CallRecord | None:
        """The row, marked refused, if it is still as ``rec`` saw it but its audit
        trail last recorded another state; None when the trail backs it (or the row
        moved on, and the caller's compare-and-set loses the race as usual).

        Run before a transition that leads to running the tool: a state rewritten
        outside agent-gate (a finished call put back to ``authorized``) must not run
        the tool again. One indexed read per claim.
        """
        trail = audit.audited_state(conn, rec.task_id, rec.row_id)
        if trail == rec.state._value_:
            return None
        current = self._one(conn, id=rec.row_id)
        if current is None or (current.state, current.version) != (rec.state, rec.version):
            return None
        recorded = repr(trail) if trail is not None else "no state"
        reason = (
            f"not run: the row says {current.state.value!r} but its audit trail last recorded "
            f"{recorded}; the state was changed outside agent-gate (agent-gate audit verify)"
        )
        conn.execute(
            update(_CALLS)
            .where(_CALLS.c.id == current.row_id, _CALLS.c.version == current.version,
                   _CALLS.c.state == current.state.value)
            .values(reason_code=STATE_NOT_IN_AUDIT, reason=reason)
        )
        audit.append(
            conn, task_id=current.task_id, call_row_id=current.row_id,
            call_id=current.call_id, event=STATE_NOT_IN_AUDIT,
            from_state=current.state.value, to_state=current.state.value, actor=actor,
            detail={"audited_state": trail, "version": current.version},
        )
        return self._one(conn, id=rec.row_id)

    @staticmethod
    def _claim_changes(rec: CallRecord, owner: str, lease_ms: int) -> dict[str, Any]:
        return {
            "attempt": rec.attempt + 1,
            "lease_owner": owner,
            "lease_expires_ms": DbNowPlus(lease_ms),
            "started_at": datetime.now(UTC),
            "finished_at": None,
            "result": None,
            "result_sha256": None,
            "result_bytes": None,
            "error": None,
        }

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
            .values(lease_expires_ms=db_now_ms() + lease_ms)
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
        guard = Guard(owner=True, lease_owner=lease_owner) if lease_owner is not None else None
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
        guard = Guard(owner=True, lease_owner=rec.lease_owner, lease_expired=expired_only)
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
        with self._write() as conn:
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
        with self._write() as conn:
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


def _task_record(row: Mapping[str, Any]) -> TaskRecord:
    return TaskRecord(
        id=row["id"],
        provider=row["provider"],
        terminal=row["terminal"],
        terminal_reason=row["terminal_reason"],
        created_at=_utc(row["created_at"]) or datetime.now(UTC),
        updated_at=_utc(row["updated_at"]) or datetime.now(UTC),
        principal=_loads(row["principal"]),
        scope=_loads(row["scope"]),
    )


def _context_detail(principal: str | None, scope: str | None) -> dict[str, Any] | None:
    """Hashes of the principal and scope a task is bound to (their JSON is on the task)."""
    info: dict[str, Any] = {}
    if principal is not None:
        info["principal_sha256"] = sha256_hex(principal)
    if scope is not None:
        info["scope_sha256"] = sha256_hex(scope)
    return info or None


_NO_GUARD = Guard()
_KNOWN_TASKS_MAX = 4096
"""Task contexts a ``Ledger`` remembers (``_remember_task``); forgetting costs a statement."""


def _compare_and_set(
    conn: Connection, rec: CallRecord, values: Mapping[str, Any], guard: Guard
) -> tuple[int, CallRecord | None]:
    """``UPDATE tool_calls SET values WHERE id, state, version (and guard)``.

    Returns the number of rows matched and, where the dialect can return them from
    the update (PostgreSQL; SQLite 3.35+), the row as updated: one statement fewer
    per transition. Compiled once per set of columns and guard (``prepared``): this
    runs for every transition of every call. A ``DbNowPlus`` value is computed by
    the database.
    """
    returning = conn.dialect.update_returning
    # The columns in the caller's order: a call site always sets them in one order,
    # so this names one compiled statement per site without sorting on every call.
    keys = tuple(values)
    clocked = tuple([k for k, v in values.items() if isinstance(v, DbNowPlus)])
    owner_guard = guard.owner and guard.lease_owner is not None
    no_owner = guard.owner and guard.lease_owner is None
    shape = ("cas", keys, clocked, owner_guard, no_owner, guard.lease_expired, returning)

    def build() -> Any:
        c = _CALLS.c
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
        stmt = update(_CALLS).where(*where).values(sets)
        return stmt.returning(*_COLUMNS) if returning else stmt

    params: dict[str, Any] = (
        {k: (v.ms if isinstance(v, DbNowPlus) else v) for k, v in values.items()}
        if clocked
        else dict(values)
    )
    params["w_id"] = rec.row_id
    params["w_state"] = rec.state._value_
    params["w_version"] = rec.version
    if owner_guard:
        params["w_owner"] = guard.lease_owner
    done = prepare(conn, shape, build).run(conn, params)
    if not returning:
        return done.rowcount, None
    if not done.rows:
        return 0, None
    return len(done.rows), _record(conn.dialect, done.rows[0])
