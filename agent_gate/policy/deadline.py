"""An approve rule's deadline: ``approval: {timeout: 30m, then: deny | {escalate: ROLE}}``.

Why a deadline lives in the policy and is kept by the ledger: "deny when nobody
answers in 30 minutes" is a rule about the call, decided when the call is sent to a
person, so the rule that sent it names it. The ledger then arms it by its own clock
(``ledger.deadlines``) and a sweeper acts on it; no worker's clock and no policy is
needed when it runs out. These models only say what the file may hold.

* ``timeout``: a whole number of seconds, minutes, hours or days (``90s``, ``30m``,
  ``2h``, ``1d``), from one second to 366 days;
* ``then``: ``deny`` (the default): the call is rejected with reason
  ``approval_timeout``; or ``{escalate: ROLE}``: from then on only operators whose
  ``operators:`` entry holds ROLE may answer it (so ROLE must be held by someone).

When several approve rules with a deadline decided one call, the earliest deadline
counts (the strictest rule wins, as deny beats approve).

The models (``Duration``, ``Escalate``) sit below ``policy.model`` in
``policy.scalars`` and ``policy.approval_model``; the functions here read a whole
document, so they sit above it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agent_gate.policy.approval_model import Escalate
from agent_gate.policy.model import PolicyDocument
from agent_gate.policy.scalars import MAX_TIMEOUT_SECONDS, Duration, seconds_of

__all__ = ["MAX_TIMEOUT_SECONDS", "DeadlineTerms", "Duration", "Escalate", "deadline_problems",
           "deadlines_of", "earliest", "seconds_of"]


@dataclass(frozen=True, slots=True)
class DeadlineTerms:
    """What a call sent to a person is armed with: after ``timeout_ms`` by the ledger's
    clock, ``then`` (``deny`` or ``escalate``, to ``role``); ``rule_id`` names the rule."""

    rule_id: str
    timeout_ms: int
    then: Literal["deny", "escalate"]
    role: str | None = None


def deadlines_of(document: PolicyDocument) -> Mapping[str, DeadlineTerms]:
    """Every rule id with a deadline, and its terms (rule ids are unique in a file)."""
    rules = [*document.rules, *(r for tool in document.tools.values() for r in tool.rules)]
    out: dict[str, DeadlineTerms] = {}
    for rule in rules:
        spec = rule.approval
        if spec is None or spec.timeout_ms is None or rule.mode == "shadow":
            continue
        role = spec.escalate_to
        out[rule.id] = DeadlineTerms(rule.id, spec.timeout_ms,
                                     "escalate" if role is not None else "deny", role)
    return out


def earliest(terms: Mapping[str, DeadlineTerms], rule_ids: Iterable[str]) -> DeadlineTerms | None:
    """The deadline of the rules that decided a call: the earliest one (ties: a deny)."""
    found = [terms[r] for r in rule_ids if r in terms]
    if not found:
        return None
    return min(found, key=lambda t: (t.timeout_ms, t.then != "deny", t.rule_id))


def deadline_problems(document: PolicyDocument) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """An escalation to a role no operator holds would leave the call answerable by
    nobody: a load error at the rule's ``escalate``."""
    held = {role for entry in document.operators.values() for role in entry.roles}
    located: list[tuple[tuple[str | int, ...], Any]] = [
        (("rules", i), r) for i, r in enumerate(document.rules)]
    located += [(("tools", name, "rules", i), r) for name, tool in document.tools.items()
                for i, r in enumerate(tool.rules)]
    for loc, rule in located:
        role = rule.approval.escalate_to if rule.approval is not None else None
        if role is not None and role not in held:
            yield ((*loc, "approval", "then", "escalate"),
                   f"no operator holds role {role!r} (give one in 'operators:'), so an "
                   "escalated call could be answered by nobody")
