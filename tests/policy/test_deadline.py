"""``policy.deadline``: what an approve rule's ``approval: {timeout, then}`` may say,
and which deadline a call gets when several rules decided it.

The ledger arms whatever these terms say (``tests/ledger/test_deadlines.py`` runs
them out on both backends); here, the terms themselves, loaded as a user loads a
policy file: a duration that is not one, or an escalation nobody could answer, is
refused at load with its location, never at the moment the deadline passes.
"""

from __future__ import annotations

import pytest

from agent_gate.errors import PolicyLoadError
from agent_gate.policy import Policy
from agent_gate.policy.deadline import DeadlineTerms, deadlines_of, earliest, seconds_of


def _policy(approval: str, *, mode: str = "") -> str:
    return f"""version: 1
operators:
  fay: {{roles: [finance]}}
tools:
  refund:
    rules:
      - id: waits
        effect: approve{mode}
        approval: {approval}
"""


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200),
                                                ("366d", 366 * 86400)])
def test_a_timeout_arms_that_many_milliseconds(text: str, seconds: int) -> None:
    assert seconds_of(text) == seconds
    policy = Policy.from_text(_policy(f"{{timeout: {text}}}"))
    assert deadlines_of(policy.document) == {
        "waits": DeadlineTerms("waits", seconds * 1000, "deny")}


@pytest.mark.parametrize("text", ["0s", "367d", "1.5h", "'30 m'", "30", "1w", "-5m"])
def test_a_timeout_that_is_not_a_whole_duration_is_refused_at_its_line(text: str) -> None:
    with pytest.raises(PolicyLoadError) as caught:
        Policy.from_text(_policy(f"{{timeout: {text}}}"), source="p.yaml")
    assert caught.value.line == 9
    assert "timeout" in caught.value.key


def test_an_escalation_to_a_role_nobody_holds_is_refused() -> None:
    Policy.from_text(_policy("{timeout: 1h, then: {escalate: finance}}"))
    with pytest.raises(PolicyLoadError, match="no operator holds role 'legal'") as caught:
        Policy.from_text(_policy("{timeout: 1h, then: {escalate: legal}}"))
    assert caught.value.key.endswith("escalate")


def test_a_shadow_rule_arms_no_deadline() -> None:
    """A shadow rule is never enforced, so nobody's call may be denied by its clock."""
    policy = Policy.from_text(_policy("{timeout: 1h}", mode="\n        mode: shadow"))
    assert deadlines_of(policy.document) == {}


def test_escalating_terms_name_their_role() -> None:
    policy = Policy.from_text(_policy("{timeout: 1h, then: {escalate: finance}}"))
    assert deadlines_of(policy.document)["waits"] == DeadlineTerms(
        "waits", 3_600_000, "escalate", "finance")


def test_the_earliest_deadline_counts_and_a_tie_goes_to_deny() -> None:
    terms = {
        "late": DeadlineTerms("late", 7_200_000, "deny"),
        "a-escalates": DeadlineTerms("a-escalates", 60_000, "escalate", "finance"),
        "z-denies": DeadlineTerms("z-denies", 60_000, "deny"),
    }
    assert earliest(terms, ["late", "a-escalates", "z-denies"]) == terms["z-denies"]
    assert earliest(terms, ["late", "a-escalates"]) == terms["a-escalates"]
    assert earliest(terms, ["late", "not-a-deadline-rule"]) == terms["late"]
    assert earliest(terms, ["not-a-deadline-rule"]) is None
