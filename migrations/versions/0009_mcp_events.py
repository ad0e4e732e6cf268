"""The MCP proxy's event store: ``mcp_events``.

``agent-gate mcp proxy --listen`` kept each Streamable HTTP stream's events in memory,
in one store for every client session, under ids counted 1, 2, 3...: a client that
resumed with another session's ``Last-Event-ID`` (or a guessed one) was sent that
session's results. The events now live here, each row under its session, with a
random event id that is only ever looked up together with the session's id; being in
the ledger's database, they outlive the proxy's process, so a client resumes its
stream after a restart (``integrations.mcp.events``).

Nothing else reads or writes the table; it is pruned oldest first past a total size
and an age (``ledger.mcp_events``).

Revision ID: 0009_mcp_events
Revises: 0008_fewer_write_indexes
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_mcp_events"
down_revision: str | Sequence[str] | None = "0008_fewer_write_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "mcp_events",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("stream_id", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_mcp_events"),
        sa.UniqueConstraint("event_id", name="uq_mcp_events_event_id"),
    )
    op.create_index("ix_mcp_events_session_id_stream_id_seq", "mcp_events",
                    ["session_id", "stream_id", "seq"])
    op.create_index("ix_mcp_events_created_ms", "mcp_events", ["created_ms"])


def downgrade() -> None:
    op.drop_index("ix_mcp_events_created_ms", table_name="mcp_events")
    op.drop_index("ix_mcp_events_session_id_stream_id_seq", table_name="mcp_events")
    op.drop_table("mcp_events")
