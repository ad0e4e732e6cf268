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

__all__ = ["AuditEvent", "Base", "TaskRow", "ToolCallRow", "metadata"]

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


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


metadata = Base.metadata


class TaskRow(Base):
    """One agent task: the unit a call id is unique within, and what ``recover`` sweeps."""

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(ID_LEN), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    provider: Mapped[str | None] = mapped_column(String(64))
    terminal: Mapped[str | None] = mapped_column(String(64))
    """How the last response of the task ended (``completed``, ``truncated``...)."""
    terminal_reason: Mapped[str | None] = mapped_column(String(500))


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
    tool: Mapped[str] = mapped_column(String(200))
    effect: Mapped[str] = mapped_column(String(16))
    idempotency: Mapped[str] = mapped_column(String(16))
    args_hash: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[str | None] = mapped_column(Text)
    """Canonical JSON of the arguments, kept so that recovery, approval and resume can
    run the call without the stream; NULL when they never formed a JSON object."""

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


class AuditEvent(Base):
    """Append-only history: every transition, and every time a call was seen again."""

    __tablename__ = "audit_events"
    __table_args__ = (Index(None, "task_id", "id"),)

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
