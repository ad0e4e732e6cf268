"""Every operator on a path argument judges one value: its resolved, absolute form.

Before, ``path_under`` resolved the path while ``matches`` / ``in`` read the raw
string, so ``x.audit.jsonl/.``, ``x.audit.jsonl/``, ``a//b``, ``./a/../b`` and an
in-root symlink to a denied file passed a deny written on the real name, and a
tool that normalizes the path (``pathlib`` does) deleted the file anyway.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.policy import (
    BUILTIN_BAD_PATH,
    Policy,
    PolicyDecision,
    Principal,
    Truth,
    Verdict,
)


def delete_policy(root: Path) -> Policy:
    """``delete_file`` as in policies/example.yaml, plus a deny on a protected folder."""
    real_root = os.path.realpath(root)
    rules: list[dict[str, Any]] = [
        {"id": "delete-in-workspace", "effect": "allow",
         "when": [{"arg": "path", "path_under": str(root)}]},
        {"id": "delete-outside-workspace", "effect": "deny",
         "when": [{"not": {"arg": "path", "path_under": str(root)}}]},
        {"id": "delete-keeps-audit-files", "effect": "deny",
         "when": [{"arg": "path", "matches": r".*\.audit\.jsonl"}]},
        {"id": "delete-keeps-protected", "effect": "deny",
         "when": [{"arg": "path", "matches": re.escape(real_root) + "/protected/[^/]+"}]},
        {"id": "delete-keeps-the-ledger", "effect": "deny",
         "when": [{"arg": "path", "in": [f"{real_root}/ledger.db"]}]},
    ]
    doc = {"version": 1, "tools": {"delete_file": {"effect": "destructive", "rules": rules}}}
    return Policy.from_text(yaml.safe_dump(doc, sort_keys=False), source="delete.yaml")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspace"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "protected").mkdir()
    (workspace / "x.audit.jsonl").write_text("audit")
    (workspace / "protected" / "keys.txt").write_text("k")
    (workspace / "ledger.db").write_text("db")
    (workspace / "sub" / "report.csv").write_text("r")
    (workspace / "innocent.txt").symlink_to(workspace / "x.audit.jsonl")
    (workspace / "shortcut").symlink_to("protected", target_is_directory=True)
    return workspace


def decide(policy: Policy, path: object) -> PolicyDecision:
    return policy.evaluate("delete_file", {"path": path})


def test_a_plain_file_in_the_workspace_is_still_allowed(root: Path) -> None:
    decision = decide(delete_policy(root), f"{root}/sub/report.csv")
    assert decision.effect is Verdict.ALLOW
    assert decision.rule_ids == ("delete-in-workspace",)


@pytest.mark.parametrize(
    ("spelling", "rule"),
    [
        ("{root}/x.audit.jsonl/.", "delete-keeps-audit-files"),
        ("{root}/x.audit.jsonl/", "delete-keeps-audit-files"),
        ("{root}/x.audit.jsonl//", "delete-keeps-audit-files"),
        ("{root}/protected//keys.txt", "delete-keeps-protected"),
        ("{root}//protected/keys.txt", "delete-keeps-protected"),
        ("{root}/./sub/../protected/keys.txt", "delete-keeps-protected"),
        ("{root}/sub/./../ledger.db", "delete-keeps-the-ledger"),
        ("{root}/innocent.txt", "delete-keeps-audit-files"),  # in-root symlink to the file
        ("{root}/shortcut/keys.txt", "delete-keeps-protected"),  # in-root directory symlink
    ],
)
def test_every_spelling_of_a_denied_file_is_denied(root: Path, spelling: str, rule: str) -> None:
    value = spelling.format(root=root)
    decision = decide(delete_policy(root), value)
    assert decision.effect is Verdict.DENY
    assert decision.rule_ids == (rule,)
    # The explanation says what was judged without quoting the argument.
    trace = {t.id: t for t in decision.rules}[rule]
    assert trace.truth is Truth.TRUE and "(resolved path)" in trace.detail
    assert value not in " ".join(decision.reasons) + decision.explain()


def test_a_symlink_to_a_denied_file_is_denied_whatever_its_own_name(root: Path) -> None:
    link = root / "sub" / "notes.audit.jsonl"
    link.symlink_to(root / "sub" / "report.csv")
    # The link's name matches the audit pattern but it leads to report.csv, which is
    # what the policy judges; deleting the link is then allowed, the target is not.
    assert decide(delete_policy(root), str(link)).effect is Verdict.ALLOW
    assert decide(delete_policy(root), str(root / "innocent.txt")).effect is Verdict.DENY


def test_a_value_that_cannot_be_resolved_is_never_allowed(root: Path) -> None:
    """Only an allow rule tests the path here, so an error there alone would not deny."""
    doc = {
        "version": 1,
        "tools": {
            "delete_file": {
                "rules": [
                    {"id": "in-workspace", "effect": "allow",
                     "when": [{"arg": "path", "path_under": str(root)}]},
                    {"id": "admins", "effect": "allow",
                     "when": [{"principal": "attributes.admin", "equals": True}]},
                ]
            }
        },
    }
    policy = Policy.from_text(yaml.safe_dump(doc), source="p.yaml")
    loop = root / "loop"
    loop.symlink_to(loop)
    admin = Principal(id="a", attributes={"admin": True})
    for value in ("relative/x", f"{root}/\x00x", "/" + "a" * 5000, str(loop), 7):
        decision = policy.evaluate("delete_file", {"path": value}, principal=admin)
        assert decision.effect is Verdict.DENY, value
        assert decision.rule_ids == (BUILTIN_BAD_PATH,)
        assert "arg 'path'" in decision.reasons[0]
    # Without the argument nothing is a bad path: the admin rule decides.
    assert policy.evaluate("delete_file", {}, principal=admin).effect is Verdict.ALLOW


def test_paths_in_a_list_are_resolved_too(root: Path) -> None:
    each = {"arg": "paths", "each": {"path_under": str(root)}}
    deny = {"arg": "paths", "some": {"matches": r".*\.audit\.jsonl"}}
    doc = {"version": 1, "tools": {"rm": {"rules": [
        {"id": "all-in", "effect": "allow", "when": [each]},
        {"id": "no-audit", "effect": "deny", "when": [deny]},
    ]}}}
    policy = Policy.from_text(yaml.safe_dump(doc, sort_keys=False), source="p.yaml")
    ok = policy.evaluate("rm", {"paths": [f"{root}/sub/report.csv"]})
    assert ok.effect is Verdict.ALLOW
    sneaky = policy.evaluate("rm", {"paths": [f"{root}/sub/report.csv", f"{root}/innocent.txt"]})
    assert sneaky.effect is Verdict.DENY and sneaky.rule_ids == ("no-audit",)


def test_a_rule_for_every_tool_sees_the_path_only_where_the_tool_says_so(root: Path) -> None:
    """A global ``matches`` judges the resolved path for a tool whose rules make the
    argument a path, and the raw string for a tool whose rules do not."""
    doc = {
        "version": 1,
        "rules": [{"id": "no-audit", "effect": "deny",
                   "when": [{"arg": "path", "matches": r".*\.audit\.jsonl"}]}],
        "tools": {
            "delete_file": {"rules": [{"id": "in", "effect": "allow",
                                       "when": [{"arg": "path", "path_under": str(root)}]}]},
            "note": {"rules": [{"id": "any", "effect": "allow"}]},
        },
    }
    policy = Policy.from_text(yaml.safe_dump(doc, sort_keys=False), source="p.yaml")
    link = f"{root}/innocent.txt"
    assert policy.evaluate("delete_file", {"path": link}).effect is Verdict.DENY
    assert policy.evaluate("note", {"path": link}).effect is Verdict.ALLOW
    assert policy.evaluate("note", {"path": "relative"}).effect is Verdict.ALLOW


def test_the_gate_never_runs_a_denied_delete(root: Path, tmp_path: Path) -> None:
    policy = delete_policy(root)
    deleted: list[str] = []
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"path": {"type": "string"}},
                        "required": ["path"]}, effect="destructive", idempotency="natural")
    def delete_file(path: str) -> str:
        deleted.append(path)
        Path(path).unlink()  # pathlib drops '.', '//' and the trailing slash
        return "deleted"

    spellings = [f"{root}/x.audit.jsonl/.", f"{root}/x.audit.jsonl/", f"{root}/innocent.txt",
                 f"{root}/./sub/../protected/keys.txt", f"{root}/protected//keys.txt"]
    with Gate(tools, f"sqlite:///{tmp_path / 'ledger.db'}", policy=policy, create=True) as gate:
        for index, path in enumerate(spellings):
            outcome = gate.execute("t", {"call_id": f"c{index}", "name": "delete_file",
                                         "arguments": {"path": path}})
            assert outcome.state is CallState.REJECTED, path
        allowed = gate.execute("t", {"call_id": "ok", "name": "delete_file",
                                     "arguments": {"path": f"{root}/sub/report.csv"}})
        assert allowed.state is CallState.SUCCEEDED
    assert deleted == [f"{root}/sub/report.csv"]
    assert (root / "x.audit.jsonl").read_text() == "audit"
    assert (root / "protected" / "keys.txt").exists()
