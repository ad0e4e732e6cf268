"""Operators: the people ``agent-gate serve`` lets in, and what each may decide.

- ``operators``: one row per operator, with the SHA-256 of their token (never the
  token), the tools they may approve or deny and the tools whose in-doubt calls they
  may resolve (JSON lists; ``*`` for every tool);
- ``webhook_cursors``: per webhook endpoint, the last audit ``seq`` delivered. The
  audit trail is the durable outbox (each entry commits with its transition); an
  endpoint's cursor moves only after its receiver acknowledged, so a crash
  re-sends, never loses.

Revision ID: 0004_operators
Revises: 0003_call_trace
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_operators"
down_revision: str | Sequence[str] | None = "0003_call_trace"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "operators",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("approve_tools", sa.Text(), nullable=False),
        sa.Column("resolve_tools", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_operators"),
        sa.UniqueConstraint("name", name="uq_operators_name"),
        sa.UniqueConstraint("token_hash", name="uq_operators_token_hash"),
    )
    op.create_table(
        "webhook_cursors",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_webhook_cursors"),
    )


def downgrade() -> None:
    op.drop_table("webhook_cursors")
    op.drop_table("operators")
