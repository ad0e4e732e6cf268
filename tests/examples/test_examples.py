"""Every example in ``examples/`` runs, and does what its docstring says.

The examples are run as a user runs them (their ``main``, or the script in its
own process for the crash example, which itself starts a worker that dies) and
checked by their side effects: lines in their outbox files and states in their
ledgers.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from agent_gate.ledger import CallState, Ledger

EXAMPLES = Path(__file__).parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def states(db: str, task_id: str) -> dict[str, CallState]:
    with Ledger(db) as ledger:
        return {rec.call_id: rec.state for rec in ledger.calls(task_id)}


def test_wrapping_a_dispatcher_with_a_policy_file(db: str, tmp_path: Path) -> None:
    example = load("wrap_dispatcher")
    outbox = tmp_path / "outbox.jsonl"
    report = example.main(["--db", db, "--outbox", str(outbox)])
    assert report["first"] == [
        ("call_wX7pQ2mLs9BdK4vN", "succeeded", False),
        ("call_Hn3sV8qTz1RfY6cJ", "succeeded", False),
    ]
    assert [replayed for _, _, replayed in report["again"]] == [True, True]
    assert report["held"] == ("call_external_1", "awaiting_approval")
    # The dispatcher really sent one mail: the allowed one, once.
    assert report["sent"] == [{"to": "camille@example.com", "subject": "Lunch on Friday"}]
    assert states(db, "wrap-example")["call_external_1"] is CallState.AWAITING_APPROVAL


def test_the_sdks_typed_events_go_to_the_gate_as_they_are(db: str) -> None:
    example = load("sdk_events")
    # The events are the SDKs' own objects, not text.
    assert all(type(e).__module__.startswith("openai.types.") for e in example.openai_events())
    assert all(
        type(e).__module__.startswith("anthropic.types.") for e in example.anthropic_events()
    )
    report = example.main(["--db", db])
    assert report["openai-responses"] == {
        "terminal": "completed",
        "states": {"call_sdk_openai_1": "succeeded"},
    }
    assert report["anthropic"] == {
        "terminal": "incomplete:max_tokens",
        "states": {"toolu_sdk_anthropic_2": "incomplete", "toolu_sdk_anthropic_1": "incomplete"},
    }
    assert report["sent"] == [{"task": "sdk-openai-responses", "to": "ops@example.com"}]


@pytest.mark.parametrize("reconcile", [True, False], ids=["reconcile_hook", "operator"])
def test_resuming_after_a_crash_inside_a_write(
    db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reconcile: bool
) -> None:
    outbox = tmp_path / "outbox.jsonl"
    monkeypatch.setenv("AGENT_GATE_EXAMPLE_OUTBOX", str(outbox))
    example = load("resume_after_crash")
    report = example.main(["--db", db, *([] if reconcile else ["--no-reconcile"])])
    assert report["worker_status"] == 9
    weather, email = "call_wX7pQ2mLs9BdK4vN", "call_Hn3sV8qTz1RfY6cJ"
    assert report["before"] == {weather: "succeeded", email: "executing"}
    assert report["resumed"] == {email: "succeeded" if reconcile else "in_doubt"}
    assert report["again"] == {weather: ("succeeded", True), email: ("succeeded", True)}
    assert len(report["sent"]) == 1  # sent before the crash, never again
    assert states(db, "crash-example") == {weather: CallState.SUCCEEDED,
                                           email: CallState.SUCCEEDED}


@pytest.mark.slow  # the example crashes its own process and starts again: ~7 s on 2 cores
def test_the_crash_example_as_a_script(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path),
           "AGENT_GATE_EXAMPLE_OUTBOX": str(tmp_path / "outbox.jsonl")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "resume_after_crash.py"), "--db",
         f"sqlite:///{tmp_path / 'ledger.db'}"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "the reconcile hook found that the write happened" in done.stdout
    assert done.stdout.rstrip().endswith("mails in the outbox: 1")


@pytest.mark.parametrize(
    ("example", "package"),
    [("with_pydantic_ai", "pydantic_ai"), ("with_langgraph", "langgraph"),
     ("with_openai_agents", "agents")],
)
def test_an_agent_framework_example(example: str, package: str, db: str) -> None:
    """Each payment made once, the large one after an approval given the framework's
    way, the blocked one never, and the audit chain intact."""
    pytest.importorskip(package)
    report = load(example).main(["--db", db])
    assert report["paid"] == [("acme", 40), ("globex", 500)]
    assert report["states"] == {
        "call-small": "succeeded", "call-large": "succeeded", "call-blocked": "rejected",
    }
    assert report["audit_ok"] is True


def test_an_agent_loop_sends_the_turn_back_and_gets_the_answer(db: str) -> None:
    report = load("agent_loop").main(["--db", db])
    first, second = report["requests"]
    assert [i.get("type", i.get("role")) for i in first["input"]] == ["user"]
    # The second request carries the first turn as it streamed (its reasoning item
    # with the encrypted state, its text, both calls) and one output per call.
    sent = second["input"]
    assert [i.get("type", i.get("role")) for i in sent] == [
        "user", "reasoning", "message", "function_call", "function_call",
        "function_call_output", "function_call_output",
    ]
    assert sent[1]["encrypted_content"] == "opaque-reasoning-state"
    assert [i["call_id"] for i in sent[5:]] == ["call_lisbon", "call_porto"]
    assert report["texts"] == [
        "Let me check both cities.", "It is 21 °C in Lisbon and 18 °C in Porto.",
    ]
    assert report["ran"] == ["Lisbon", "Porto"]
    assert states(db, "agent-loop") == {
        "call_lisbon": CallState.SUCCEEDED, "call_porto": CallState.SUCCEEDED,
    }


@pytest.mark.slow  # two processes, the first killed mid-workflow: ~10 s on 2 cores
@pytest.mark.parametrize(
    ("example", "package", "final"),
    [("with_dbos_openai_agents", "dbos_openai_agents", "paid acme"),
     ("with_dbos_pydantic_ai", "pydantic_ai.durable_exec.dbos", "tool said: paid 40 to acme")],
)
def test_an_agent_on_dbos_recovered_after_a_crash_pays_once(
    example: str, package: str, final: str, db: str
) -> None:
    """The recovered workflow replays the model's recorded answer, so the payment call
    reaches the gate again, by its call id; the gate answers it from the ledger."""
    pytest.importorskip(package)
    report = load(example).main(["--db", db])
    assert report["first_status"] == -9  # SIGKILLed before DBOS recorded the next step
    assert report["final"] == final
    assert report["asked_again"] is True
    assert report["states"] == {"call-pay-acme": "succeeded"} and report["runs"] == 1
    assert report["paid"] == [{"to": "acme", "amount": 40}]


def test_a_dbos_workflow_waits_for_a_person_and_pays_once(db: str) -> None:
    pytest.importorskip("dbos")
    report = load("with_dbos").main(["--db", db])
    assert report["first"] == ["dbos-step-1: succeeded", "dbos-step-2: succeeded"]
    assert report["again"] == report["first"]  # DBOS's records: nothing runs again
    assert report["paid"] == [("acme", 40), ("globex", 500)]
    assert report["states"] == {"dbos-step-1": "succeeded", "dbos-step-2": "succeeded"}
