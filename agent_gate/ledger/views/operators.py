"""Operators: who may answer calls through ``agent-gate serve``, kept in the ledger.

A token is 256 random bits, printed once when the operator is added; the ledger
keeps only its SHA-256, so reading the database (a backup, a replica) lets nobody
in, and a token is looked up by its hash and then compared in constant time. A plain
hash is enough: the token has 256 bits of entropy, there is nothing to guess.

What an operator did, allowed or refused, is appended to the audit chain under
``operator:NAME`` (``record_action``), in the same chain as every transition, so the
trail says who tried what even when the answer was no.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import Engine, delete, insert, select

from agent_gate.errors import OperatorRefused
from agent_gate.ledger import audit
from agent_gate.ledger.backend import begin_read, writing
from agent_gate.ledger.models import OPERATORS
from agent_gate.ledger.states import CallState

__all__ = [
    "ALL_TOOLS",
    "OPERATORS_TASK",
    "TOKEN_PREFIX",
    "Operator",
    "OperatorRight",
    "Operators",
    "actor_of",
    "parse_tools",
    "token_digest",
]

_TABLE = OPERATORS
ALL_TOOLS = "*"
TOKEN_PREFIX = "agop_"
"""Tokens start with this, so a secret scanner (and a person) can tell one apart."""
OPERATORS_TASK = "(operators)"
"""The audit ``task_id`` of operator events that concern no task (added, removed,
a refused login): the trail's column is never empty."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")


class OperatorRight(StrEnum):
    """What an operator may be allowed to do to a tool's calls."""

    APPROVE = "approve"
    """Approve or deny a call that waits for approval."""
    RESOLVE = "resolve"
    """Settle a call left in doubt."""


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator as the ledger keeps them: never the token."""

    name: str
    approve: tuple[str, ...]
    resolve: tuple[str, ...]
    created_at: datetime

    def may(self, right: OperatorRight, tool: str) -> bool:
        tools = self.approve if right is OperatorRight.APPROVE else self.resolve
        return ALL_TOOLS in tools or tool in tools

    def tools_by_state(self) -> tuple[tuple[CallState, tuple[str, ...] | None], ...]:
        """The tools whose calls they may answer, by the state a call waits in (None:
        every tool): ``approve`` for a call awaiting approval, ``resolve`` for one in
        doubt. ``InboxQuery.tools_by_state``: each state narrowed by its own right."""
        return tuple((state, None if ALL_TOOLS in tools else tuple(sorted(tools)))
                     for state, tools in ((CallState.AWAITING_APPROVAL, self.approve),
                                          (CallState.IN_DOUBT, self.resolve)))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "approve": list(self.approve),
                "resolve": list(self.resolve), "created_at": self.created_at.isoformat()}


def actor_of(name: str) -> str:
    """The audit ``actor`` of an operator's actions."""
    return f"operator:{name}"


def parse_tools(text: str | None) -> tuple[str, ...]:
    """``"a,b"`` -> ``("a", "b")``; ``"*"`` for all; None or blank: none."""
    if text is None:
        return ()
    tools = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    return (ALL_TOOLS,) if ALL_TOOLS in tools else tools


def token_digest(token: str) -> str:
    """What the ledger keeps of a token (its SHA-256), and what a session is bound to."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _operator(row: Any) -> Operator:
    created = row.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    return Operator(row.name, tuple(json.loads(row.approve_tools)),
                    tuple(json.loads(row.resolve_tools)), created)


class Operators:
    """The operators of one ledger: add, list, remove, and who a token is."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def add(
        self, name: str, *, approve: Iterable[str] = (), resolve: Iterable[str] = (),
        actor: str = "cli",
    ) -> tuple[Operator, str]:
        """Record a new operator; returns them and their token (shown this once)."""
        if not _NAME.fullmatch(name):
            raise OperatorRefused(
                f"operator name {name[:40]!r} is not 1-100 letters, digits or ._@- "
                "(starting with a letter or digit)")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = datetime.now(UTC)
        values = {"name": name, "token_hash": token_digest(token),
                  "approve_tools": json.dumps(list(approve)),
                  "resolve_tools": json.dumps(list(resolve)), "created_at": now}
        with writing(self.engine) as txn:
            exists = txn.execute(select(_TABLE.c.id).where(_TABLE.c.name == name)).first()
            if exists is not None:
                raise OperatorRefused(f"operator {name!r} exists already; remove them first")
            txn.execute(insert(_TABLE).values(values))
            audit.append(txn, task_id=OPERATORS_TASK, event="operator_added", actor=actor,
                         detail={"operator": name, "approve": list(approve),
                                 "resolve": list(resolve)}, at=now)
        return Operator(name, tuple(approve), tuple(resolve), now), token

    def list(self) -> list[Operator]:
        with begin_read(self.engine) as conn:
            rows = conn.execute(select(_TABLE).order_by(_TABLE.c.name)).all()
        return [_operator(r) for r in rows]

    def remove(self, name: str, *, actor: str = "cli") -> bool:
        """Remove an operator (their token stops working at once); False if none."""
        with writing(self.engine) as txn:
            gone = txn.execute(delete(_TABLE).where(_TABLE.c.name == name)).rowcount
            if gone:
                audit.append(txn, task_id=OPERATORS_TASK, event="operator_removed",
                             actor=actor, detail={"operator": name})
        return bool(gone)

    def authenticate(self, token: str) -> Operator | None:
        """The operator whose token this is, or None."""
        return self.holder(token_digest(token))

    def holder(self, digest: str) -> Operator | None:
        """The operator whose current token has this digest (``token_digest``), or None:
        a session kept under a digest dies when its operator is removed or re-added."""
        with begin_read(self.engine) as conn:
            row = conn.execute(select(_TABLE).where(_TABLE.c.token_hash == digest)).first()
        if row is None or not hmac.compare_digest(row.token_hash, digest):
            return None
        return _operator(row)

    def record_action(
        self, *, actor: str, event: str, allowed: bool, task_id: str | None = None,
        call_id: str | None = None, detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append what an operator (or an unknown client) did to the audit chain.

        ``event`` names the action (``approve``, ``login``...); the entry's event is
        ``operator_<event>`` with ``allowed`` in its detail. Never argument values.
        """
        with writing(self.engine) as txn:
            row_id = None
            if task_id is not None and call_id is not None:
                rec = txn.read_call(task_id=task_id, call_id=call_id)
                row_id = rec.row_id if rec is not None else None
            audit.append(txn, task_id=task_id or OPERATORS_TASK, call_row_id=row_id,
                         call_id=call_id, event=f"operator_{event}", actor=actor,
                         detail={"allowed": allowed, **(detail or {})})
