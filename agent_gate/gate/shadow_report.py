"""Where shadow rules would have decided otherwise: read back from the audit trail.

A rule marked ``mode: shadow`` (or a whole ``shadow_policy``) is evaluated on every
call and its would-be decision is recorded in the call's decision entry
(``detail.shadow``: verdict, rule ids, policy hash, whether it differs), never
enforced. ``shadow_report`` reads those entries (read-only, as ``backtest`` does) and
lists every call where the would-be verdict differs from the enforced one, by
transition and by the shadow decision's rules, with the call ids.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from agent_gate.gate.backtest import CallRef, read_only_engine
from agent_gate.ledger.models import AUDIT_EVENTS, TOOL_CALLS
from agent_gate.ledger.states import CallState
from agent_gate.policy import Verdict

__all__ = ["ShadowDiff", "ShadowReport", "shadow_report"]

_VERDICTS = frozenset(v.value for v in Verdict)


@dataclass(frozen=True, slots=True)
class ShadowDiff:
    """A call whose shadow decision differs from the one enforced."""

    call: CallRef
    enforced: Verdict
    shadow: Verdict
    enforced_rules: tuple[str, ...]
    shadow_rules: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {**self.call.to_dict(), "enforced": self.enforced.value,
                "shadow": self.shadow.value, "enforced_rules": list(self.enforced_rules),
                "shadow_rules": list(self.shadow_rules)}


@dataclass(frozen=True, slots=True)
class ShadowReport:
    """Calls decided with a shadow evaluation, and those where it differed."""

    shadowed: int
    diffs: tuple[ShadowDiff, ...]

    def by_transition(self) -> dict[tuple[Verdict, Verdict], list[ShadowDiff]]:
        found: dict[tuple[Verdict, Verdict], list[ShadowDiff]] = defaultdict(list)
        for diff in self.diffs:
            found[(diff.enforced, diff.shadow)].append(diff)
        return dict(sorted(found.items(), key=lambda kv: -len(kv[1])))

    def by_rule(self) -> dict[str, list[ShadowDiff]]:
        found: dict[str, list[ShadowDiff]] = defaultdict(list)
        for diff in self.diffs:
            for rule_id in diff.shadow_rules or ("-",):
                found[rule_id].append(diff)
        return dict(sorted(found.items(), key=lambda kv: -len(kv[1])))

    def to_dict(self) -> dict[str, Any]:
        return {
            "shadowed": self.shadowed,
            "differ": len(self.diffs),
            "transitions": [
                {"enforced": e.value, "shadow": s.value, "count": len(items),
                 "calls": [d.call.to_dict() for d in items]}
                for (e, s), items in self.by_transition().items()
            ],
            "rules": [
                {"rule_id": rule_id, "count": len(items), "calls": [d.to_dict() for d in items]}
                for rule_id, items in self.by_rule().items()
            ],
        }


def shadow_report(
    url: str, *, since: datetime | None = None, task: str | None = None
) -> ShadowReport:
    """Every call's first decision that carries a shadow evaluation, compared."""
    stmt = (
        select(AUDIT_EVENTS.c.call_row_id, AUDIT_EVENTS.c.detail, TOOL_CALLS.c.task_id,
               TOOL_CALLS.c.call_id, TOOL_CALLS.c.tool, TOOL_CALLS.c.created_at)
        .join(TOOL_CALLS, TOOL_CALLS.c.id == AUDIT_EVENTS.c.call_row_id)
        .where(AUDIT_EVENTS.c.from_state == CallState.RECEIVED.value)
        .where(AUDIT_EVENTS.c.to_state != CallState.RECEIVED.value)
        .where(AUDIT_EVENTS.c.detail.like('%"shadow":%'))
        .order_by(AUDIT_EVENTS.c.id)
    )
    if since is not None:
        stmt = stmt.where(TOOL_CALLS.c.created_at >= since)
    if task is not None:
        stmt = stmt.where(TOOL_CALLS.c.task_id == task)
    engine = read_only_engine(url)
    seen: set[int] = set()
    diffs: list[ShadowDiff] = []
    try:
        with engine.connect() as conn:
            for row_id, text, task_id, call_id, tool, at in conn.execute(stmt):
                detail = json.loads(text) if text else {}
                shadow = detail.get("shadow")
                if row_id in seen or not isinstance(shadow, dict):
                    continue
                seen.add(row_id)
                enforced, would = detail.get("verdict"), shadow.get("verdict")
                if enforced == would or enforced not in _VERDICTS or would not in _VERDICTS:
                    continue
                when = at if at.tzinfo else at.replace(tzinfo=UTC)
                diffs.append(ShadowDiff(
                    CallRef(task_id, call_id, row_id, tool, when), Verdict(enforced),
                    Verdict(would), tuple(detail.get("rule_ids") or ()),
                    tuple(shadow.get("rule_ids") or ()),
                ))
    finally:
        engine.dispose()
    return ShadowReport(shadowed=len(seen), diffs=tuple(diffs))
