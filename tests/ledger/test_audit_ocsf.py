"""`agent-gate audit --ocsf`: the trail as OCSF API Activity events (JSON lines) for a SIEM,
with the attributes the class requires, and no argument value."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

from click.testing import CliRunner
from shared_fixtures import EXAMPLE_POLICY

from agent_gate import Gate
from agent_gate.cli import main as cli
from agent_gate.policy import Principal

from .test_records_redacted import BODY_SECRET, CARD_SECRET, secret_calls

REQUIRED = ("class_uid", "category_uid", "activity_id", "type_uid", "time", "severity_id",
            "metadata", "actor", "api", "src_endpoint", "status_id")


def test_the_trail_as_ocsf_api_activity_events(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY,
              principal=Principal(id="u1")) as gate:
        for call in secret_calls():
            gate.execute("t", call)
        gate.deny("ext", by="alice", reason="no")
    done = CliRunner().invoke(cli, ["audit", "--ocsf", "--db", sqlite_url])
    assert done.exit_code == 0, done.output
    assert BODY_SECRET not in done.output and CARD_SECRET not in done.output
    events = [json.loads(line) for line in done.output.splitlines()]
    assert events
    for event in events:
        assert all(key in event for key in REQUIRED), sorted(set(REQUIRED) - set(event))
        assert (event["class_uid"], event["category_uid"]) == (6003, 6)
        assert event["type_uid"] == 6003 * 100 + event["activity_id"]
        assert event["metadata"]["product"]["name"] == "agent-gate"
        assert event["metadata"]["version"].startswith("1.")
    by_call = {}
    for event in events:
        for resource in event["resources"]:
            by_call.setdefault(resource["uid"], []).append(event)
    mail = by_call["mail"]
    assert mail[0]["activity_name"] == "Create" and mail[0]["unmapped"]["to_state"] == "received"
    assert mail[-1]["unmapped"]["to_state"] == "succeeded" and mail[-1]["status_id"] == 1
    assert {r["name"] for e in mail for r in e["resources"]} == {"send_email"}
    denied = by_call["ext"][-1]
    assert denied["unmapped"]["to_state"] == "rejected" and denied["status"] == "Failure"
    assert denied["actor"]["user"]["name"].endswith("alice")
    # Positions are unique: a collector drops repeats by metadata.uid.
    assert len({e["metadata"]["uid"] for e in events}) == len(events)
