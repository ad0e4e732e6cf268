"""``--shadow FILE`` on ``agent-gate resume``: the draft's would-be decision of each
call the command decides lands in the call's audit entry and in ``policy
shadow-report``; what runs is the enforced policy's alone."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner
from shared_fixtures import EXAMPLE_POLICY, effect_lines
from support.calls import call

from agent_gate import CallInfo, Decision, Gate
from agent_gate.cli import main as cli
from agent_gate.ledger import CallState, Ledger
from agent_gate.tools import ToolSpec

pytestmark = pytest.mark.usefixtures("seal_key_env")

# the example policy, but weather only for city names of at most four letters
DRAFT = EXAMPLE_POLICY.read_text(encoding="utf-8").replace(
    "length: {min: 1, max: 100}", "length: {min: 1, max: 4}"
)


class PolicyServiceDown:
    """A custom authorizer whose service cannot be reached: the calls it was asked
    about stay ``received``, recorded but undecided, for a resume to decide."""

    def authorize(self, task_id: str, call: CallInfo, spec: ToolSpec) -> Decision:
        raise ConnectionError("the policy service is unreachable")


def test_resume_records_the_shadow_decision_of_each_call_it_decides(
    db_url: str, support_tools: ModuleType, effects_file: Path, tmp_path: Path
) -> None:
    assert "max: 100}" in EXAMPLE_POLICY.read_text(encoding="utf-8")  # DRAFT changes it
    (tmp_path / "draft.yaml").write_text(DRAFT, encoding="utf-8")
    with Gate(support_tools.tools, db_url, policy=PolicyServiceDown()) as gate:
        for call_id, city in (("w1", "Lisbon"), ("w2", "Oslo")):
            with pytest.raises(ConnectionError):
                gate.execute("t", call(call_id, "get_weather", city=city))
            assert gate.ledger.get("t", call_id).state is CallState.RECEIVED
    result = CliRunner().invoke(cli, [
        "resume", "t", "--tools", "support_tools", "--policy", str(EXAMPLE_POLICY),
        "--shadow", str(tmp_path / "draft.yaml"), "--db", db_url])
    assert result.exit_code == 0, result.output
    # enforced: both ran; the draft would have denied Lisbon (six letters)
    assert effect_lines(effects_file) == ["t get_weather Lisbon", "t get_weather Oslo"]
    with Ledger(db_url) as ledger:
        decided = {e.call_id: e.detail for e in ledger.audit("t")
                   if e.to_state == "authorized"}
    assert decided["w1"]["verdict"] == "allow"
    assert decided["w1"]["shadow"]["verdict"] == "deny"
    assert decided["w1"]["shadow"]["differs"] is True
    assert decided["w1"]["shadow"]["rule_ids"] == ["agent-gate:default-deny"]
    assert decided["w2"]["shadow"]["verdict"] == "allow"
    assert decided["w2"]["shadow"]["differs"] is False
    report = CliRunner().invoke(cli, ["policy", "shadow-report", "--db", db_url, "--json"])
    assert report.exit_code == 0, report.output
    data = json.loads(report.stdout)
    assert (data["shadowed"], data["differ"]) == (2, 1)
    assert [c["call_id"] for c in data["rules"][0]["calls"]] == ["w1"]


def test_resume_refuses_a_shadow_without_a_policy_or_a_draft_that_does_not_load(
    db_url: str, support_tools: ModuleType, tmp_path: Path
) -> None:
    with Gate(support_tools.tools, db_url):
        pass
    (tmp_path / "draft.yaml").write_text(DRAFT, encoding="utf-8")
    alone = CliRunner().invoke(cli, ["resume", "t", "--tools", "support_tools",
                                     "--shadow", str(tmp_path / "draft.yaml"), "--db", db_url])
    assert alone.exit_code == 2 and "--shadow needs --policy" in alone.output
    bad_draft = "version: 1\ntools:\n  x: {rules: [{id: a, efect: allow}]}\n"
    (tmp_path / "bad.yaml").write_text(bad_draft, encoding="utf-8")
    bad = CliRunner().invoke(cli, ["resume", "t", "--tools", "support_tools", "--policy",
                                   str(EXAMPLE_POLICY), "--shadow", str(tmp_path / "bad.yaml"),
                                   "--db", db_url])
    assert bad.exit_code == 1  # the draft's own located problems, no traceback
    assert f"{tmp_path / 'bad.yaml'}:3:23: tools.x.rules[0].efect: unknown key" in bad.output
    assert "Traceback" not in bad.output
