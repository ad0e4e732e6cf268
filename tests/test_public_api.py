"""The curated top level (issue 15): what ``from agent_gate import ...`` offers is a
decision, not an accident; changing it means changing this list on purpose."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import agent_gate
from agent_gate._lazy import exports_of

PUBLIC = {
    # the gate
    "Gate", "CallOptions", "RunOptions", "Outcome", "RunResult", "Blocker",
    "render_tool_result", "current_call", "Authorizer", "Decision", "Verdict", "ReasonCode",
    # tools
    "ToolRegistry", "ToolSpec", "CallInfo", "Effect", "Idempotency", "Reconciled",
    "Reconciliation",
    # policy and the ledger
    "Policy", "PolicyAuthorizer", "Principal", "TaskScope", "Ledger", "CallState",
    # streams
    "ToolCall", "Terminal", "accumulator", "DispatchMode", "ServerSentEvent", "SSEDecoder",
    "run_live", "arun_live",
    # what the gate refuses, by family
    "AgentGateError", "GateUsageError", "OutcomeUnknown", "NotInDoubt", "AmbiguousCall",
    "ApprovalRefused", "NotAwaitingApproval", "AnswerMismatch", "TaskContextConflict",
    "ArgumentsInvalid", "PolicyError", "LedgerConfigError", "SealKeyMissing", "AccumulatorError",
    "SSEError", "ProviderError", "StreamError",
}


def test_the_top_level_is_exactly_the_curated_list() -> None:
    assert set(agent_gate.__all__) == PUBLIC
    assert sorted(agent_gate.__all__) == agent_gate.__all__  # one place, kept sorted


def test_every_public_name_resolves_and_is_documented() -> None:
    for name in agent_gate.__all__:
        value = getattr(agent_gate, name)
        assert getattr(value, "__doc__", None), f"agent_gate.{name} has no docstring"
    assert set(dir(agent_gate)) >= PUBLIC


def test_every_error_is_an_agent_gate_error() -> None:
    errors = [getattr(agent_gate, n) for n in PUBLIC if n.endswith(("Error", "Refused"))]
    errors += [agent_gate.OutcomeUnknown, agent_gate.NotInDoubt, agent_gate.AmbiguousCall,
               agent_gate.NotAwaitingApproval, agent_gate.TaskContextConflict,
               agent_gate.ArgumentsInvalid, agent_gate.SealKeyMissing]
    assert all(issubclass(e, agent_gate.AgentGateError) for e in errors)


def test_importing_the_package_or_its_decoder_stays_light() -> None:
    # The CLI's help and a bare SSE decoder must not pay for the ledger's stack.
    code = (
        "import sys, agent_gate, agent_gate.sse; "
        "heavy = [m for m in ('sqlalchemy', 'pydantic', 'jsonschema') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_error_tree_in_the_docstring_is_the_class_tree() -> None:
    import inspect
    import re

    import agent_gate.errors as errors

    drawn: dict[str, str] = {}  # class -> parent, as the docstring draws it
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        match = re.match(r"^    ([│ ]*)(?:[├└]── )?([A-Z][A-Za-z]+)\b", line)
        if not match or not (match.group(2).endswith(("Error", "Exceeded", "Timeout"))
                             or match.group(2) in vars(errors)):
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        drawn[match.group(2)] = stack[-1][1] if stack else ""
        stack.append((depth, match.group(2)))
    defined = {
        name: cls.__mro__[1].__name__ if name != "AgentGateError" else ""
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and issubclass(cls, BaseException)
        and cls.__module__ == errors.__name__
    }
    assert drawn == defined


def test_decision_has_one_meaning() -> None:
    # A custom Authorizer's answer is agent_gate.Decision; what a policy file decides is a
    # PolicyDecision: one name, one concept (issue 15).
    import agent_gate.policy as policy

    assert agent_gate.Decision.__module__ == "agent_gate.gate.decide"
    assert not hasattr(policy, "Decision")
    assert policy.PolicyDecision.__name__ == "PolicyDecision"
    assert agent_gate.Verdict is policy.Verdict  # one enum for what a decision says
    assert agent_gate.Verdict.__module__ == "agent_gate.policy.values"
    assert policy.DecisionEffect is policy.Verdict  # its old name, kept for callers
    # What the trail recorded of a decision is a DecisionRecord, not a second
    # PolicyDecision (issue 31).
    from agent_gate.ledger.views import details

    assert not hasattr(details, "PolicyDecision") and details.DecisionRecord


def test_each_public_name_is_imported_once_and_listed_once(tmp_path: Path) -> None:
    """``agent_gate/__init__.py`` names each public name in its typed imports and in
    ``__all__``, and nowhere else (issue 31: the name -> module table is read off the
    imports); the two lists may not differ."""
    source = Path(agent_gate.__file__).read_text("utf-8")
    for name in PUBLIC:
        assert len(re.findall(rf"\b{name}\b", source)) == 2, name
    drifted = tmp_path / "drifted.py"
    drifted.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from agent_gate.errors import GateUsageError\n"
        "__all__ = ['GateUsageError', 'NotInDoubt']\n", "utf-8")
    namespace: dict[str, object] = {"__all__": ["GateUsageError", "NotInDoubt"]}
    getattr_, _ = exports_of("drifted", str(drifted), namespace)
    with pytest.raises(ImportError, match=r"only in __all__ \['NotInDoubt'\]"):
        getattr_("GateUsageError")
    namespace["__all__"] = ["GateUsageError"]
    assert getattr_("GateUsageError") is agent_gate.GateUsageError
