"""Where shadow rules would have decided otherwise: read back from the audit trail.

A rule marked ``mode: shadow`` (or a whole ``shadow_policy``) is evaluated on every
call and its would-be decision is recorded in the call's decision entry
(``detail.shadow``: verdict, rule ids, policy hash, whether it differs), never
enforced. ``shadow_report`` reads those entries (read-only, as ``backtest`` does) and
lists every call where the would-be verdict differs from the enforced one, by
transition and by the shadow decision's rules, with the call ids.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent_gate.gate.backtest import CallRef
from agent_gate.ledger.history import recorded_decisions
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
    shadowed = 0
    diffs: list[ShadowDiff] = []
    for past in recorded_decisions(url, since=since, task=task, containing="shadow"):
        detail = past.detail
        shadow = detail.get("shadow")
        if not isinstance(shadow, dict):
            continue
        shadowed += 1
        enforced, would = detail.get("verdict"), shadow.get("verdict")
        if enforced == would or enforced not in _VERDICTS or would not in _VERDICTS:
            continue
        diffs.append(ShadowDiff(
            CallRef(past.task_id, past.call_id, past.row_id, past.tool, past.created_at),
            Verdict(enforced), Verdict(would), tuple(detail.get("rule_ids") or ()),
            tuple(shadow.get("rule_ids") or ()),
        ))
    return ShadowReport(shadowed=shadowed, diffs=tuple(diffs))
