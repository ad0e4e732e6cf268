"""Grants: one approval that covers more calls of a tool in a task, counted in the ledger.

A grant is given with an approval (``answers.approve`` with an option the policy
offers) and is bound to the task, the tool, the policy's hash, an expiry measured by
the database's clock and a number of calls. A call the policy sends to a person is
looked up against the task's live grants in the transaction that decides it, and a
grant that covers it is *spent* there: one conditional ``UPDATE ... SET used_calls =
used_calls + 1 WHERE id = ? AND revoked_at IS NULL AND used_calls < max_calls AND
expires_ms > now`` (``spend``). Whoever's update matched spent it; two workers
racing for the last call cannot both match, whatever they read before, because the
row's own update is the check. A call that needs no approval never reads this table.

Each call a grant authorized is recorded (``approval_grant_uses``), so that a claim
that re-checks the call later finds it authorized by that grant rather than asking a
person again or spending the grant twice; a revoked grant covers nothing more, not
even those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, or_, select, update

from agent_gate.errors import GateUsageError
from agent_gate.ledger import audit
from agent_gate.ledger.backend import reading, writing
from agent_gate.ledger.chain import as_utc
from agent_gate.ledger.models import APPROVAL_GRANT_USES, APPROVAL_GRANTS
from agent_gate.ledger.sql import db_now_ms

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from agent_gate.ledger.txn import Txn

__all__ = ["GrantRecord", "covering", "give", "listed", "live", "revoke", "spend"]

_G = APPROVAL_GRANTS
_U = APPROVAL_GRANT_USES


@dataclass(frozen=True, slots=True)
class GrantRecord:
    """One grant as stored, with the database's clock when it was read."""

    id: int
    task_id: str
    tool: str
    policy_hash: str
    option: str
    rule_ids: tuple[str, ...]
    max_calls: int | None
    used_calls: int
    expires_ms: int | None
    approval_id: int
    granted_by: str
    granted_at: datetime
    revoked_at: datetime | None
    revoked_by: str | None
    read_at_ms: int

    @property
    def expires_at(self) -> datetime | None:
        if self.expires_ms is None:
            return None
        return datetime.fromtimestamp(self.expires_ms / 1000, UTC)

    @property
    def expired(self) -> bool:
        return self.expires_ms is not None and self.expires_ms <= self.read_at_ms

    @property
    def spent(self) -> bool:
        return self.max_calls is not None and self.used_calls >= self.max_calls

    @property
    def status(self) -> str:
        """``active``, or why it covers no more calls."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expired:
            return "expired"
        return "used up" if self.spent else "active"

    def to_dict(self) -> dict[str, Any]:
        return {
            "grant_id": self.id, "task_id": self.task_id, "tool": self.tool,
            "policy_hash": self.policy_hash, "option": self.option,
            "rule_ids": list(self.rule_ids), "max_calls": self.max_calls,
            "used_calls": self.used_calls,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "approval_id": self.approval_id, "granted_by": self.granted_by,
            "granted_at": self.granted_at.isoformat(),
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "revoked_by": self.revoked_by, "status": self.status,
        }


def _record(row: Any) -> GrantRecord:
    revoked = row["revoked_at"]
    return GrantRecord(
        id=row["id"], task_id=row["task_id"], tool=row["tool"],
        policy_hash=row["policy_hash"], option=row["option"],
        rule_ids=tuple(json.loads(row["rule_ids"])), max_calls=row["max_calls"],
        used_calls=row["used_calls"], expires_ms=row["expires_ms"],
        approval_id=row["approval_id"], granted_by=row["granted_by"],
        granted_at=as_utc(row["granted_at"]),
        revoked_at=as_utc(revoked) if revoked is not None else None,
        revoked_by=row["revoked_by"], read_at_ms=int(row["db_now_ms"]),
    )


def _select() -> Any:
    return select(_G, db_now_ms().label("db_now_ms"))


def _usable() -> tuple[Any, ...]:
    """The conditions of a grant that still covers a call, by the database's clock."""
    return (
        _G.c.revoked_at.is_(None),
        or_(_G.c.max_calls.is_(None), _G.c.used_calls < _G.c.max_calls),
        or_(_G.c.expires_ms.is_(None), _G.c.expires_ms > db_now_ms()),
    )


def give(
    txn: Txn, *, task_id: str, tool: str, policy_hash: str, option: str,
    rule_ids: tuple[str, ...], max_calls: int | None, seconds: int | None,
    approval_id: int, by: str,
) -> GrantRecord:
    """Record a grant in ``txn`` (the approval's own transaction); it expires
    ``seconds`` after the database's clock now (None: only its count ends it)."""
    expiry: Any = None if seconds is None else db_now_ms() + seconds * 1000
    result = txn.execute(insert(_G).values(
        task_id=task_id, tool=tool, policy_hash=policy_hash, option=option,
        rule_ids=json.dumps(list(rule_ids)), max_calls=max_calls, used_calls=0,
        expires_ms=expiry, approval_id=approval_id, granted_by=by,
        granted_at=datetime.now(UTC),
    ))
    key = result.inserted_primary_key
    assert key is not None
    return _record(txn.execute(_select().where(_G.c.id == key[0])).mappings().one())


def live(txn: Txn, task_id: str, tool: str, policy_hash: str) -> list[GrantRecord]:
    """The grants that may still cover a call of ``tool`` in the task, oldest first
    (what ``spend`` then checks again, in its update)."""
    rows = txn.execute(
        _select().where(_G.c.task_id == task_id, _G.c.tool == tool,
                        _G.c.policy_hash == policy_hash, *_usable()).order_by(_G.c.id)
    ).mappings()
    return [_record(r) for r in rows]


def spend(txn: Txn, grant_id: int, call_row_id: int) -> bool:
    """Count one call against the grant, in the call's own transaction: False when it
    was revoked, ran out or expired since it was read (someone else spent the last)."""
    matched = txn.execute(
        update(_G).where(_G.c.id == grant_id, *_usable())
        .values(used_calls=_G.c.used_calls + 1)
    ).rowcount
    if matched != 1:
        return False
    txn.execute(insert(_U).values(grant_id=grant_id, call_row_id=call_row_id,
                                  used_at=datetime.now(UTC)))
    return True


def covering(txn: Txn, call_row_id: int) -> GrantRecord | None:
    """The unrevoked grant that authorized this call, if one did."""
    row = txn.execute(
        _select().join(_U, _U.c.grant_id == _G.c.id)
        .where(_U.c.call_row_id == call_row_id, _G.c.revoked_at.is_(None))
        .order_by(_G.c.id.desc()).limit(1)
    ).mappings().first()
    return _record(row) if row is not None else None


def listed(engine: Engine, *, task_id: str | None = None,
           active: bool = False) -> list[GrantRecord]:
    """Grants, newest first (of one task; ``active``: only those that still cover)."""
    with reading(engine) as txn:
        stmt = _select().order_by(_G.c.id.desc())
        if task_id is not None:
            stmt = stmt.where(_G.c.task_id == task_id)
        if active:
            stmt = stmt.where(*_usable())
        return [_record(r) for r in txn.execute(stmt).mappings()]


def _one(txn: Txn, grant_id: int) -> GrantRecord | None:
    row = txn.execute(_select().where(_G.c.id == grant_id)).mappings().first()
    return _record(row) if row is not None else None


def revoke(engine: Engine, grant_id: int, *, by: str, reason: str | None = None) -> GrantRecord:
    """End a grant now: it covers no call decided after this commits. Audited in its
    task's trail under ``by``; revoking a revoked grant changes nothing."""
    with writing(engine) as txn:
        found = _one(txn, grant_id)
        if found is None:
            raise GateUsageError(f"no grant {grant_id} in the ledger")
        txn.lock_task(found.task_id)
        matched = txn.execute(
            update(_G).where(_G.c.id == grant_id, _G.c.revoked_at.is_(None))
            .values(revoked_at=datetime.now(UTC), revoked_by=by)
        ).rowcount
        if matched == 1:
            audit.append(txn, task_id=found.task_id, event="grant_revoked",
                         actor=f"operator:{by}",
                         detail={"grant_id": grant_id, "tool": found.tool,
                                 "used_calls": found.used_calls,
                                 **({"reason": reason[:300]} if reason else {})})
        now = _one(txn, grant_id)
    assert now is not None
    return now
