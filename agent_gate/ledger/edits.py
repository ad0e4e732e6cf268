"""Edit then approve, in the ledger: a waiting call's new version and its approval,
committed together, the old version kept.

Why one transaction: the edit (``awaiting_approval --EDIT--> awaiting_approval``, the
row's arguments, seal and hash replaced) and the editor's approval bound to the new
hash either both commit or neither does. A crash after the commit leaves a call that
waits with a usable approval, as any approved call does; the claim that uses it re-reads
the row, recomputes the hash from the stored arguments and consumes the approval in the
transaction that moves it to ``executing``: at most once, as before. A crash before it
leaves the call as it was.

The version an edit replaced is kept in ``approval_edits`` exactly as the row held it
(sealed fields only as stand-ins and inside their seal), with who edited, which fields
and both hashes; the audit entry of the arrow names the fields and hashes, never a value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, insert, select

from agent_gate.ledger.answers import approved, judged_ms, waiting_call
from agent_gate.ledger.approvals import ApprovalRecord
from agent_gate.ledger.flows import apply_or_lose, shown_args_refusal, write
from agent_gate.ledger.models import APPROVAL_EDITS
from agent_gate.ledger.records import CallRecord
from agent_gate.ledger.states import Event
from agent_gate.plainjson import canonical_json

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from agent_gate.ledger.txn import Txn

__all__ = ["EditRecord", "NewVersion", "edit_and_approve", "edits_of", "edits_of_calls"]


@dataclass(frozen=True, slots=True)
class NewVersion:
    """An edited call's arguments as its row will hold them (made by ``gate.edit``)."""

    arguments: Mapping[str, Any]
    """As stored: fields the policy redacts as their stand-ins."""
    sealed_arguments: str | None
    args_hash: str
    fields: tuple[str, ...]
    """The argument paths the edit changed."""


@dataclass(frozen=True, slots=True)
class EditRecord:
    """One edit as stored: who, when, which fields, the hashes before and after."""

    id: int
    edited_by: str
    edited_at: datetime
    fields: tuple[str, ...]
    old_args_hash: str
    new_args_hash: str
    old_arguments: dict[str, Any] | None
    approval_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"edit_id": self.id, "by": self.edited_by, "at": self.edited_at.isoformat(),
                "fields": list(self.fields), "old_args_hash": self.old_args_hash,
                "new_args_hash": self.new_args_hash, "old_arguments": self.old_arguments,
                "approval_id": self.approval_id}


def edit_and_approve(
    engine: Engine,
    rec: CallRecord,
    new: NewVersion,
    *,
    by: str,
    reason: str | None,
    ttl_ms: int | None,
    policy_hash: str | None,
    shown_hash: str | None,
) -> tuple[ApprovalRecord, CallRecord]:
    """The edit's arrow and the editor's approval of the new version, in one transaction.

    ``rec`` is the row the new version was made from; ``shown_hash`` the hash of the
    arguments the editor was shown. Either one no longer the row's: ``AnswerMismatch``
    (audited, nothing else changes); the call no longer waiting: ``NotAwaitingApproval``;
    ``ttl_ms`` not an approval's lifetime: ``GateUsageError`` (``answers.lifetime_ms``).
    """
    judged_ms(ttl_ms)
    actor = f"operator:{by}"
    with write(engine) as txn:
        current = waiting_call(txn, rec)
        refused = shown_args_refusal(txn, current, shown_hash, answer="edit", actor=actor)
        if refused is None:
            refused = shown_args_refusal(txn, current, rec.args_hash, answer="edit",
                                         actor=actor)
        if refused is None:
            given, edited = _committed(txn, current, new, by=by, reason=reason,
                                       ttl_ms=ttl_ms, policy_hash=policy_hash)
    if refused is not None:
        raise refused  # after the commit: the refusal stays in the trail
    return given, edited


def _committed(
    txn: Txn, current: CallRecord, new: NewVersion, *, by: str, reason: str | None,
    ttl_ms: int | None, policy_hash: str | None,
) -> tuple[ApprovalRecord, CallRecord]:
    fields = tuple(dict.fromkeys((*current.edited, *new.fields)))
    edited = apply_or_lose(
        txn, current, Event.EDIT, actor=f"operator:{by}", code=current.reason_code,
        reason=current.reason,
        changes={"arguments": canonical_json(dict(new.arguments)),
                 "sealed_arguments": new.sealed_arguments, "args_hash": new.args_hash,
                 "edited": json.dumps(list(fields))},
        detail={"fields": list(new.fields), "old_args_hash": current.args_hash,
                "new_args_hash": new.args_hash},
    )
    given, _ = approved(txn, edited, by=by, reason=reason, expires_ms=None, ttl_ms=ttl_ms,
                        policy_hash=policy_hash, fresh=True)
    txn.execute(insert(APPROVAL_EDITS).values(
        call_row_id=current.row_id, task_id=current.task_id, call_id=current.call_id,
        approval_id=given.id, edited_by=by, fields=json.dumps(list(new.fields)),
        old_args_hash=current.args_hash, new_args_hash=new.args_hash,
        old_arguments=(canonical_json(current.arguments)
                       if current.arguments is not None else None),
        old_sealed_arguments=current.sealed_arguments, edited_at=datetime.now(UTC),
    ))
    return given, edited


def edits_of(conn: Connection, call_row_id: int) -> tuple[EditRecord, ...]:
    """Every edit of the call, oldest first (``edits_of_calls`` for one call)."""
    return edits_of_calls(conn, (call_row_id,))[call_row_id]


def edits_of_calls(conn: Connection, call_row_ids: Sequence[int]
                   ) -> dict[int, tuple[EditRecord, ...]]:
    """Every edit of each call, oldest first, in one statement for a page of calls (the
    call pages read edits this way: one read per edited call grew a page's statements
    with its edits); a call with none maps to ``()``."""
    if not call_row_ids:
        return {}
    e = APPROVAL_EDITS.c
    out: dict[int, list[EditRecord]] = {i: [] for i in call_row_ids}
    rows = conn.execute(
        select(e.call_row_id, e.id, e.edited_by, e.edited_at, e.fields, e.old_args_hash,
               e.new_args_hash, e.old_arguments, e.approval_id)
        .where(e.call_row_id.in_(list(call_row_ids))).order_by(e.id)
    ).mappings()
    for r in rows:
        out[int(r["call_row_id"])].append(EditRecord(
            id=r["id"], edited_by=r["edited_by"], edited_at=_aware(r["edited_at"]),
            fields=tuple(json.loads(r["fields"])), old_args_hash=r["old_args_hash"],
            new_args_hash=r["new_args_hash"],
            old_arguments=json.loads(r["old_arguments"]) if r["old_arguments"] else None,
            approval_id=r["approval_id"],
        ))
    return {i: tuple(found) for i, found in out.items()}


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
