"""Appending to the audit trail, always inside the transaction that changed state.

A transition and its audit event commit together or not at all, so the trail can
never miss a transition nor describe one that did not happen. Details are bounded
JSON of ids, codes and hashes; callers never pass argument values here. The single
``append`` function is where a hash chain over the events belongs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, insert, select

from agent_gate.ledger.models import AuditEvent
from agent_gate.ledger.privacy import bound

__all__ = ["MAX_DETAIL_CHARS", "AuditRecord", "append", "read"]

MAX_DETAIL_CHARS = 2000


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
    text = None
    if detail:
        text = json.dumps(dict(detail), sort_keys=True, separators=(",", ":"), default=str)
        if len(text) > MAX_DETAIL_CHARS:
            text = json.dumps({"truncated": bound(text, MAX_DETAIL_CHARS)})
    conn.execute(
        insert(AuditEvent).values(
            at=at or datetime.now(UTC),
            task_id=task_id,
            call_row_id=call_row_id,
            call_id=call_id,
            event=event,
            from_state=from_state,
            to_state=to_state,
            actor=actor,
            detail=text,
        )
    )


def read(
    conn: Connection, *, task_id: str | None = None, call_row_id: int | None = None
) -> list[AuditRecord]:
    stmt = select(AuditEvent.__table__).order_by(AuditEvent.id)
    if task_id is not None:
        stmt = stmt.where(AuditEvent.task_id == task_id)
    if call_row_id is not None:
        stmt = stmt.where(AuditEvent.call_row_id == call_row_id)
    out: list[AuditRecord] = []
    for row in conn.execute(stmt).mappings():
        at = row["at"]
        out.append(
            AuditRecord(
                id=row["id"],
                at=at if at.tzinfo else at.replace(tzinfo=UTC),
                task_id=row["task_id"],
                call_row_id=row["call_row_id"],
                call_id=row["call_id"],
                event=row["event"],
                from_state=row["from_state"],
                to_state=row["to_state"],
                actor=row["actor"],
                detail=json.loads(row["detail"]) if row["detail"] else None,
            )
        )
    return out
