"""The audit trail as the webhooks' durable outbox: each endpoint's cursor, and the
entries a person should hear about.

An entry is in the trail once its transition committed (the same transaction), so
nothing that happened can be missing from it; a notifier reads after its cursor,
delivers, and only then moves the cursor (``advance``): a crash between the two
sends an entry again, never skips one. Entries become events here, as plain values
carrying ids, the tool and rule ids only: never argument values.

The signed checkpoints (``audit_checkpoints.note``) are the outbox of the HTTP
witnesses the same way: a witness's cursor (``witness_cursor``) is the id of the last
checkpoint it acknowledged, and ``signed_after`` reads the ones it has not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, func, insert, select, update

from agent_gate.ledger.audit import AuditRecord
from agent_gate.ledger.backend import begin_read, begin_write
from agent_gate.ledger.models import AUDIT_CHECKPOINTS, WEBHOOK_CURSORS
from agent_gate.ledger.reasons import ReasonCode
from agent_gate.ledger.views.pages import AuditQuery, audit_page, settled

__all__ = [
    "EVENT_KINDS",
    "Notice",
    "advance",
    "cursor",
    "entries_after",
    "notice_of",
    "notices_after",
    "signed_after",
    "wanted",
    "witness_cursor",
]

_TABLE = WEBHOOK_CURSORS
EVENT_KINDS = ("awaiting_approval", "escalated", "in_doubt", "resolved")
"""What a webhook may subscribe to: a call starts waiting for a person, is escalated
(its approval deadline passed and only a role may answer it now), becomes in doubt,
or is resolved (approved, denied, or settled out of doubt)."""
_ESCALATED = ReasonCode.APPROVAL_ESCALATED.value


@dataclass(frozen=True, slots=True)
class Notice:
    """One audit entry a person should hear about (``kind``), without any argument."""

    seq: int
    kind: str
    task_id: str
    call_id: str | None
    tool: str | None
    state: str | None
    rule_ids: tuple[str, ...]
    actor: str | None
    at: datetime
    role: str | None = None
    """An escalation's role: only its holders may answer the call now."""

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.seq, "type": f"call.{self.kind}", "task_id": self.task_id,
               "call_id": self.call_id, "tool": self.tool, "state": self.state,
               "rule_ids": list(self.rule_ids), "actor": self.actor,
               "at": self.at.isoformat()}
        if self.kind == "escalated":
            out["role"] = self.role
        return out


def wanted(notice: Notice, events: tuple[str, ...], roles: tuple[str, ...] = ()) -> bool:
    """Whether a route subscribed to ``events`` hears ``notice``; ``roles`` narrows its
    escalations to those roles (empty: every role), so a team hears of the calls only
    it may answer now."""
    if notice.kind not in events:
        return False
    return notice.kind != "escalated" or not roles or notice.role in roles


def notice_of(e: AuditRecord) -> Notice | None:
    """The event an entry means for people, or None (most entries mean none)."""
    moved = e.to_state is not None and e.from_state != e.to_state
    detail = e.detail or {}
    rules, role = detail.get("rule_ids") or (), None
    if e.event == _ESCALATED:  # still waiting, for the role alone (``ledger.sweep``)
        kind, found = "escalated", detail.get("role")
        role = found if isinstance(found, str) else None
        rules = (detail["rule"],) if detail.get("rule") else ()  # the one it names
    elif moved and e.to_state in ("awaiting_approval", "in_doubt"):
        kind = e.to_state
    elif e.event == "approval_granted" or (
            moved and e.from_state in ("awaiting_approval", "in_doubt")
            and not (e.from_state == "awaiting_approval" and e.to_state == "authorized")):
        kind = "resolved"  # an approval, a denial, or a call settled out of doubt
    else:
        return None
    return Notice(e.seq, kind, e.task_id, e.call_id, e.tool, e.to_state,
                  tuple(str(r) for r in rules), e.actor, e.at, role)


def cursor(engine: Engine, name: str) -> int:
    """The endpoint's cursor; a new endpoint starts at the trail's head (it hears
    what happens from now on, not the ledger's history)."""
    with begin_write(engine) as conn:
        seq = conn.execute(select(_TABLE.c.seq).where(_TABLE.c.name == name)).scalar()
        if seq is not None:
            return int(seq)
        last = audit_page(conn, AuditQuery(limit=1, newest=True))
        head = last[0].seq if last else 0
        conn.execute(insert(_TABLE).values(name=name, seq=head, updated_at=datetime.now(UTC)))
        return head


def entries_after(engine: Engine, seq: int, limit: int = 200) -> list[AuditRecord]:
    """The trail's entries after ``seq``, one page, never past an entry a transaction
    still holds (what every follower of the outbox reads)."""
    upto = settled(engine)  # before the snapshot: everything up to it is in it
    with begin_read(engine) as conn:
        return audit_page(conn, AuditQuery(after=seq, limit=limit, upto=upto))


def notices_after(engine: Engine, seq: int, limit: int = 200) -> tuple[list[Notice], int]:
    """The notices after ``seq`` in one page, and the last seq that page read."""
    page = entries_after(engine, seq, limit)
    notices = [n for n in (notice_of(e) for e in page) if n is not None]
    return notices, (page[-1].seq if page else seq)


def advance(engine: Engine, name: str, seq: int) -> None:
    """Move the endpoint's cursor to ``seq`` (never back)."""
    with begin_write(engine) as conn:
        conn.execute(update(_TABLE).where(_TABLE.c.name == name, _TABLE.c.seq < seq)
                     .values(seq=seq, updated_at=datetime.now(UTC)))


def witness_cursor(engine: Engine, name: str) -> int:
    """A witness's cursor over the signed checkpoints; a new witness starts just before
    the newest one (it is handed that one, then every later one; not the history)."""
    with begin_write(engine) as conn:
        seq = conn.execute(select(_TABLE.c.seq).where(_TABLE.c.name == name)).scalar()
        if seq is not None:
            return int(seq)
        cps = AUDIT_CHECKPOINTS.c
        newest = conn.execute(select(func.max(cps.id)).where(cps.note.is_not(None))).scalar()
        start = int(newest) - 1 if newest else 0
        conn.execute(insert(_TABLE).values(name=name, seq=start, updated_at=datetime.now(UTC)))
        return start


def signed_after(engine: Engine, seq: int, limit: int = 100) -> list[tuple[int, str]]:
    """The signed checkpoints after ``seq``, oldest first: ``(id, note)``."""
    cps = AUDIT_CHECKPOINTS.c
    with begin_read(engine) as conn:
        rows = conn.execute(select(cps.id, cps.note).where(cps.id > seq, cps.note.is_not(None))
                            .order_by(cps.id).limit(limit)).all()
    return [(int(i), str(note)) for i, note in rows]
