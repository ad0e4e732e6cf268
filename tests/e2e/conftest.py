"""End-to-end fixtures: real loopback HTTP, a real ledger file, tools that leave traces.

Nothing here is mocked. The local server (``agent_gate.stream_server``) serves
recorded provider transcripts over real sockets and breaks them on request; the
transport reads them with a real httpx client; the gate records every call in a
SQLite ledger; the tools append one line per execution to a file. Tests then
assert what a user would check: lines in that file, states in the ledger.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import httpx
import pytest
from ledger_templates import NewSqliteLedger  # tests/, on sys.path via tests/conftest.py

from agent_gate import (
    CallInfo,
    CallState,
    Decision,
    Effect,
    Gate,
    Outcome,
    ToolRegistry,
    ToolSpec,
    Verdict,
)
from agent_gate.demo.transcript import CALLS as DEMO_CALLS
from agent_gate.demo.transcript import demo_transcript
from agent_gate.gate.live import LiveResult, run_live
from agent_gate.stream_server import StreamServer, Transcript, TranscriptEvent
from agent_gate.transport import ReconnectPolicy

HERE = Path(__file__).parent
TRANSCRIPTS = HERE.parent / "transcripts"

FAST = ReconnectPolicy(initial_delay=0.005, max_delay=0.05, max_attempts=5, max_reconnects=50)
"""Reconnect quickly: the tests cut connections on purpose, hundreds of times."""


@dataclass(frozen=True)
class Case:
    """One recorded response and what a correct pipeline must do with it."""

    name: str
    provider: str
    transcript: Transcript
    complete: dict[str, tuple[str, dict[str, Any]]]
    """call id -> (tool, arguments), for every call the transcript completes."""

    @property
    def id(self) -> str:
        return self.name

    @property
    def sparse(self) -> bool:
        """Ids on some events only: a resume replays events the client already had."""
        return any(e.id is None for e in self.transcript.events)


def _expected_calls(provider_dir: str, name: str) -> dict[str, tuple[str, dict[str, Any]]]:
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    path = TRANSCRIPTS / provider_dir / f"{name}.expected.jsonl"
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row.get("status") == "complete":
            calls[row["call_id"]] = (row["name"], row["arguments"])
    return calls


def recorded(provider: str, name: str, **kwargs: Any) -> Case:
    directory = provider.replace("-", "_")
    return Case(
        f"{directory}/{name}",
        provider,
        Transcript.from_file(TRANSCRIPTS / directory / f"{name}.sse", **kwargs),
        _expected_calls(directory, name),
    )


def sparse_ids(case: Case, every: int = 3) -> Case:
    """The same stream with an id on every ``every``-th event only, the others
    inheriting it: a resume then replays events the client already had, and in a
    protocol without sequence numbers only the event ids can tell them apart."""
    events = [
        TranscriptEvent(e.data, e.event, f"ck-{i // every}" if i % every == 0 else None)
        for i, e in enumerate(case.transcript.events)
    ]
    return Case(f"{case.name}+sparse_ids", case.provider, Transcript(events), case.complete)


def demo_case() -> Case:
    return Case(
        "demo/four_calls_sparse_ids",
        "openai-responses",
        demo_transcript(),
        {c.call_id: (c.name, c.arguments) for c in DEMO_CALLS},
    )


def cases() -> list[Case]:
    """Parallel tool calls in every protocol, plus the demo's sparse-id stream."""
    return [
        recorded("openai-responses", "parallel_calls"),
        recorded("openai-chat", "parallel_calls"),
        recorded("anthropic", "parallel_tool_use"),
        sparse_ids(recorded("anthropic", "parallel_tool_use")),
        recorded("gemini", "parallel_calls"),
        demo_case(),
    ]


class TestPolicy:
    """A small authorizer so that "allowed" means something in these tests.

    ``delete_file`` is denied, mail to ``partner.org`` waits for approval,
    everything else is allowed. (The YAML policy language has its own tests.)
    """

    __test__ = False

    def authorize(self, task_id: str, call: CallInfo, spec: ToolSpec) -> Decision:
        if call.tool == "delete_file":
            return Decision(Verdict.DENY, "deleting is never allowed here")
        to = (call.arguments or {}).get("to", "")
        if call.tool == "send_email" and str(to).endswith("@partner.org"):
            return Decision(Verdict.APPROVE, "mail to partners is read first")
        return Decision(Verdict.ALLOW, "allowed")


def allowed(case: Case) -> set[str]:
    """The complete calls TestPolicy lets run without a person."""
    policy = TestPolicy()
    out: set[str] = set()
    for call_id, (tool, arguments) in case.complete.items():
        info = CallInfo("t", call_id, tool, arguments, "k", 0)
        if policy.authorize("t", info, None).verdict is Verdict.ALLOW:  # type: ignore[arg-type]
            out.add(call_id)
    return out


def reads(case: Case, registry: ToolRegistry) -> set[str]:
    """Complete calls of read tools: the gate may run them before the response ends."""
    return {
        call_id
        for call_id, (tool, _) in case.complete.items()
        if registry[tool].spec.effect is Effect.READ
    }


@pytest.fixture(scope="session")
def client() -> Iterator[httpx.Client]:
    """One client for the whole session: building one loads the CA bundle (~60 ms).
    Each stream still opens its own connections (the server closes every one)."""
    with httpx.Client(timeout=httpx.Timeout(5.0)) as c:
        yield c


@pytest.fixture
def e2e_tools() -> Iterator[ModuleType]:
    sys.path.insert(0, str(HERE))
    try:
        import e2e_tools

        yield e2e_tools
    finally:
        sys.path.remove(str(HERE))


@pytest.fixture
def effects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "effects.log"
    monkeypatch.setenv("AG_E2E_EFFECTS", str(path))
    return path


@pytest.fixture
def db_url(tmp_path: Path, new_sqlite_ledger: NewSqliteLedger) -> str:
    # Made here (a copy of the process's migrated template, tests/ledger_templates.py):
    # code under test never creates a ledger unasked.
    return new_sqlite_ledger(tmp_path / "ledger.db")


@pytest.fixture
def gate(e2e_tools: ModuleType, effects: Path, db_url: str) -> Iterator[Gate]:
    with Gate(e2e_tools.tools, db_url, policy=TestPolicy()) as g:
        yield g


class Live(Protocol):
    def __call__(
        self, gate: Gate, server: StreamServer, case: Case, task_id: str, **kwargs: Any
    ) -> LiveResult: ...


@pytest.fixture
def live(client: httpx.Client) -> Live:
    """``run_live`` of a case's transcript served as ``/streams/s``, reconnecting fast."""

    def run(
        gate: Gate, server: StreamServer, case: Case, task_id: str, **kwargs: Any
    ) -> LiveResult:
        kwargs.setdefault("reconnect", FAST)
        kwargs.setdefault("client", client)
        return run_live(
            gate, server.stream_url("s"), provider=case.provider, task_id=task_id, **kwargs
        )

    return run


def ledger_states(gate: Gate, task_id: str) -> dict[str, CallState]:
    return {o.call_id: o.state for o in gate.calls(task_id)}


def check_at_most_once(
    result: LiveResult, gate: Gate, task_id: str, case: Case, runs: dict[str, int]
) -> set[str]:
    """The invariants every run must keep, whatever the network did; returns what ran.

    * no call ran twice; a call ran iff the ledger says ``succeeded``;
    * only complete, allowed calls ran;
    * a write ran only if the response completed (reads may run on their own
      completion signal, before the end);
    * when the response completed, every complete allowed call ran.
    """
    states = ledger_states(gate, task_id)
    ran = {call_id for call_id, n in runs.items() if n > 0}
    assert all(n == 1 for n in runs.values()), f"executed more than once: {runs}"
    assert ran == {c for c, s in states.items() if s is CallState.SUCCEEDED}
    assert ran <= allowed(case)
    completed = result.terminal is not None and result.terminal.succeeded
    if not completed:
        assert ran <= reads(case, gate.tools), f"a write ran; the response ended {result.terminal}"
    else:
        assert ran == allowed(case)
    for call_id, state in states.items():
        if call_id not in case.complete:
            assert state in (CallState.INCOMPLETE, CallState.REJECTED), (call_id, state)
    return ran


def outcome_map(outcomes: tuple[Outcome, ...] | list[Outcome]) -> dict[str, Outcome]:
    return {o.call_id: o for o in outcomes}
