"""The ledger's tables, as SQLAlchemy models.

These classes describe the schema for code and for ``alembic check``; they never
create it. The schema is created and changed only by the Alembic revisions in
``migrations/``, and a test compares the two so they cannot drift apart.

Types are chosen to mean the same on SQLite and PostgreSQL: strings with explicit
lengths, JSON stored as text (the ledger compares hashes, not JSON values), lease
expiry as integer milliseconds since the epoch so that "expired" is one integer
comparison in SQL on every dialect.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "ApprovalRow",
    "AuditCheckpoint",
    "AuditCheckpointHead",
    "AuditEvent",
    "AuditHead",
    "Base",
    "OperatorRow",
    "QuotaCharge",
    "TaskRow",
    "ToolCallRow",
    "WebhookCursor",
    "metadata",
]

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LEN = 255
"""Task ids and provider call ids are caller-chosen strings; 255 covers every
provider's id format with room to spare."""

TOOL_NAME_LEN = 200
"""Characters of a tool name the ledger keeps (``tool_calls.tool``)."""


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


metadata = Base.metadata


class TaskRow(Base):
    """One agent task: the unit a call id is unique within, and what ``recover`` sweeps."""

    __tablename__ = "tasks"
    __table_args__ = (Index(None, "updated_at", "id"),)  # listings, newest first

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    provider: Mapped[str | None] = mapped_column(String(64))
    terminal: Mapped[str | None] = mapped_column(String(64))
    """How the last response of the task ended (``completed``, ``truncated``...)."""
    terminal_reason: Mapped[str | None] = mapped_column(String(500))
    principal: Mapped[str | None] = mapped_column(Text)
    """Canonical JSON of the ``Principal`` the task acts for, fixed when first given, so
    that a resume without the application decides exactly as the application would."""
    scope: Mapped[str | None] = mapped_column(Text)
    """Canonical JSON of the task's ``TaskScope`` (name, tools, attributes), likewise."""


class ToolCallRow(Base):
    """One tool call and its side-effect state; see ``agent_gate.ledger.states``."""

    __tablename__ = "tool_calls"
    __table_args__ = (
        UniqueConstraint("task_id", "call_id"),
        UniqueConstraint("task_id", "idem_key"),
        Index(None, "task_id", "state"),
        Index(None, "state", "lease_expires_ms"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(
        String(ID_LEN), ForeignKey("tasks.id", ondelete="RESTRICT")
    )
    call_id: Mapped[str] = mapped_column(String(ID_LEN))
    """The provider's call id, as the stream carried it."""
    idem_key: Mapped[str] = mapped_column(String(300))
    """``call:<call id>`` by default, ``dedupe:<tool>:<hash>`` for tools that declare
    argument names; unique within the task, so a second row for the same write cannot
    be inserted even by a racing process."""
    tool: Mapped[str] = mapped_column(String(TOOL_NAME_LEN))
    effect: Mapped[str] = mapped_column(String(16))
    idempotency: Mapped[str] = mapped_column(String(16))
    args_hash: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[str | None] = mapped_column(Text)
    """Canonical JSON of the arguments, kept so that recovery, approval and resume can
    run the call without the stream; NULL when they never formed a JSON object. Fields
    the policy redacts appear here only as their redacted stand-ins; the whole object is
    then in ``sealed_arguments`` (see ``agent_gate.ledger.seal``)."""
    sealed_arguments: Mapped[str | None] = mapped_column(Text)
    """The full arguments encrypted with the operator's seal key (AES-256-GCM, bound to
    this row's task, call id and argument hash); NULL when nothing was redacted."""
    policy_hash: Mapped[str | None] = mapped_column(String(80))
    """Hash of the policy that decided the call (an approval must name the same one)."""
    rule_ids: Mapped[str | None] = mapped_column(Text)
    """JSON list of the rule ids that decided the call."""

    state: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_expires_ms: Mapped[int | None] = mapped_column(BigInteger)

    result: Mapped[str | None] = mapped_column(Text)
    """JSON of what the tool returned; NULL with ``result_sha256`` set when too large."""
    result_sha256: Mapped[str | None] = mapped_column(String(64))
    result_bytes: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    """JSON ``{"type", "message"}``, bounded and scrubbed (``ledger.privacy``)."""
    reason_code: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(String(1000))

    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    trace_id: Mapped[str | None] = mapped_column(String(32))
    """The OpenTelemetry trace the call was first seen in (32 hex digits), so that an
    operator goes from the call to its trace; NULL without a sampled trace."""
    span_id: Mapped[str | None] = mapped_column(String(16))
    """The call's own span in that trace (16 hex digits): what a resume links to."""


class AuditEvent(Base):
    """Append-only history: every transition, and every time a call was seen again."""

    __tablename__ = "audit_events"
    __table_args__ = (
        Index(None, "task_id", "id"),
        Index(None, "call_row_id", "id"),
        UniqueConstraint("task_id", "seq"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    call_row_id: Mapped[int | None] = mapped_column(
        Integer, ForeignKey("tool_calls.id", ondelete="RESTRICT")
    )
    call_id: Mapped[str | None] = mapped_column(String(ID_LEN))
    event: Mapped[str] = mapped_column(String(64))
    from_state: Mapped[str | None] = mapped_column(String(32))
    to_state: Mapped[str | None] = mapped_column(String(32))
    actor: Mapped[str | None] = mapped_column(String(200))
    detail: Mapped[str | None] = mapped_column(Text)
    """Bounded JSON of ids, codes and hashes: never argument values."""
    seq: Mapped[int] = mapped_column(BigInteger)
    """Position in the task's audit hash chain: 1, 2, 3... with no gaps per task."""
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    """SHA-256 over this entry's fields and ``prev_hash`` (``agent_gate.ledger.chain``)."""


class AuditHead(Base):
    """The last link of one task's audit hash chain, locked by every append to the task.

    Appending reads the task's row under a row lock (``FOR UPDATE`` on PostgreSQL;
    the database write lock on SQLite), links the new events to it and moves it on,
    in the transaction that writes them. Two writers of one task therefore can never
    link to the same predecessor, and writers of different tasks never wait for each
    other. It also records how long the task's chain is, so that deleting its newest
    entries is noticed.
    """

    __tablename__ = "audit_heads"

    task_id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(64))


class AuditCheckpoint(Base):
    """One checkpoint: a root hash over every task's head, linked to the previous one.

    ``id`` is the checkpoint's position (1, 2, 3... without gaps; two writers racing
    for the same position collide on the key). Only the heads that changed since the
    previous checkpoint are stored (``audit_checkpoint_heads``): the full set at
    checkpoint N is every head stored at N or before, newest per task.
    """

    __tablename__ = "audit_checkpoints"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    tasks: Mapped[int] = mapped_column(BigInteger)
    """How many task heads the root binds."""
    root: Mapped[str] = mapped_column(String(64))
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))
    legacy_seq: Mapped[int | None] = mapped_column(BigInteger)
    """On the checkpoint the upgrade to per-task chains wrote: the old global chain's
    head (its length), so anchors exported before the upgrade are still recognised."""
    legacy_hash: Mapped[str | None] = mapped_column(String(64))
    legacy_last_id: Mapped[int | None] = mapped_column(Integer)
    """``audit_events.id`` of the old global chain's newest entry."""


class AuditCheckpointHead(Base):
    """A task head a checkpoint binds that differs from the previous checkpoint's."""

    __tablename__ = "audit_checkpoint_heads"
    __table_args__ = (Index(None, "task_id", "checkpoint_id"),)

    checkpoint_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("audit_checkpoints.id", ondelete="RESTRICT"), primary_key=True
    )
    task_id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    hash: Mapped[str] = mapped_column(String(64))


class ApprovalRow(Base):
    """A person's answer to a call that waits for approval.

    An approval is bound to the call's argument hash, to the hash of the policy it was
    given under and to an expiry; it is consumed (``consumed_at``) in the transaction
    that moves the call to ``executing``, and only then. A denial is recorded here too.
    """

    __tablename__ = "approvals"
    __table_args__ = (Index(None, "call_row_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    call_row_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tool_calls.id", ondelete="RESTRICT")
    )
    task_id: Mapped[str] = mapped_column(String(ID_LEN))
    call_id: Mapped[str] = mapped_column(String(ID_LEN))
    verdict: Mapped[str] = mapped_column(String(16))
    """``approved`` or ``denied``."""
    args_hash: Mapped[str] = mapped_column(String(64))
    policy_hash: Mapped[str | None] = mapped_column(String(80))
    decided_by: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str | None] = mapped_column(String(1000))
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_ms: Mapped[int | None] = mapped_column(BigInteger)
    consumed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    consumed_attempt: Mapped[int | None] = mapped_column(Integer)


class QuotaCharge(Base):
    """What one authorized call added to one per-task counter of the policy's limits.

    Charged in the transaction that authorizes the call, never refunded: a call that
    reached ``authorized`` counts even if it later failed or is in doubt, because
    nobody can prove it did not spend the budget. Amounts are decimal strings, summed
    exactly in Python.
    """

    __tablename__ = "quota_charges"
    __table_args__ = (
        UniqueConstraint("call_row_id", "counter"),
        Index(None, "task_id", "counter"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(
        String(ID_LEN), ForeignKey("tasks.id", ondelete="RESTRICT")
    )
    call_row_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("tool_calls.id", ondelete="RESTRICT")
    )
    counter: Mapped[str] = mapped_column(String(300))
    amount: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class OperatorRow(Base):
    """A person ``agent-gate serve`` lets in, and the tools they may decide.

    Only the SHA-256 of the token is kept: the token itself is printed once, when
    the operator is added, and a copy of the database lets nobody in. The tool lists
    are JSON arrays of names, ``["*"]`` for every tool.
    """

    __tablename__ = "operators"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    approve_tools: Mapped[str] = mapped_column(Text)
    resolve_tools: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class WebhookCursor(Base):
    """How far one webhook endpoint has been sent the audit trail (its last ``seq``).

    The trail is the outbox: every entry commits with the transition it records. The
    cursor moves only after the receiver acknowledged, so delivery is at least once.
    """

    __tablename__ = "webhook_cursors"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
