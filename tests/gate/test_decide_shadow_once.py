"""A shadow decision is counted (metrics, log) once per committed decision, after
its transaction committed: not for a decision whose transaction failed (the caller
sends the call again and it is decided anew), and not for the intake of a call
another gate recorded first (the loser's intake runs again and finds it)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.authorize import PolicyAuthorizer
from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import pg_fast

ENFORCED = """\
version: 1
tools:
  post:
    effect: write
    idempotency: none
    rules: [{id: posts, effect: allow}]
"""
DRAFT = """\
version: 1
tools:
  post:
    effect: write
    idempotency: none
    rules: [{id: draft-no-posts, effect: deny}]
"""


def _observer() -> tuple[Any, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from agent_gate.telemetry.otel import OtelObserver

    reader = InMemoryMetricReader()
    return OtelObserver(TracerProvider(), MeterProvider(metric_readers=[reader])), reader


def _shadow_counted(reader: Any) -> int:
    data = reader.get_metrics_data()
    if data is None:
        return 0
    return sum(
        int(point.value)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "agent_gate.policy.shadow_decisions"
        for point in metric.data.data_points
    )


def _tools(ran: list[str]) -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write", idempotency="none", name="post")
    def post(text: str) -> str:
        ran.append(text)
        return "posted"

    return tools


def _post(gate: Gate, task: str, call_id: str) -> Any:
    return gate.execute(task, {"call_id": call_id, "name": "post",
                               "arguments": {"text": call_id}})


@pytest.mark.backends("postgresql")
def test_an_intake_run_again_counts_its_shadow_decision_once(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gates ``a`` and ``b`` race the same calls; each intake is pipelined under a
    guessed row id, and the loser's runs again (``pg_fast``'s retry) and finds the
    call recorded. Every call is decided once, so the shadow metric summed over both
    gates is the number of calls, and each audit entry records the shadow verdict."""
    (tmp_path / "p.yaml").write_text(ENFORCED, encoding="utf-8")
    (tmp_path / "draft.yaml").write_text(DRAFT, encoding="utf-8")
    retried: list[bool] = []
    real = pg_fast.PgPipelineTxn.retry

    def retry(self: pg_fast.PgPipelineTxn, error: BaseException) -> bool:
        again = real(self, error)
        retried.append(again)
        return again

    monkeypatch.setattr(pg_fast.PgPipelineTxn, "retry", retry)
    ran: list[str] = []
    rounds = 10
    readers = []
    gates = []
    for _ in range(2):
        observer, reader = _observer()
        readers.append(reader)
        policy = PolicyAuthorizer(tmp_path / "p.yaml", shadow_policy=tmp_path / "draft.yaml")
        gates.append(Gate(_tools(ran), Ledger(db_url), policy=policy, telemetry=observer))
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker(gate: Gate, name: str) -> None:
        try:
            for n in range(rounds):
                # a call of its own first: the engine keeps spare ids and a kept
                # connection, so the raced intake below is guessed and pipelined
                assert _post(gate, f"own-{name}", f"{name}{n}").state is CallState.SUCCEEDED
                barrier.wait(timeout=60)
                _post(gate, "shared", f"c{n}")
        except BaseException as error:  # reported below
            errors.append(error)
            barrier.abort()

    try:
        threads = [threading.Thread(target=worker, args=(g, n))
                   for g, n in zip(gates, "ab", strict=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    finally:
        for gate in gates:
            gate.close()
    assert not errors, errors
    assert any(retried), "no intake ran a second time: the race was not on the guessed path"
    assert sorted(ran) == sorted([f"c{n}" for n in range(rounds)]
                                 + [f"{x}{n}" for x in "ab" for n in range(rounds)])
    assert sum(_shadow_counted(reader) for reader in readers) == 3 * rounds
    with Ledger(db_url) as ledger:
        decided = [e for e in ledger.audit("shared") if e.to_state == "authorized"]
        assert ledger.verify_audit().problem is None
    assert len(decided) == rounds
    assert all(e.detail["shadow"]["verdict"] == "deny" for e in decided)


@pytest.mark.backends("postgresql")
def test_a_decision_whose_transaction_failed_is_counted_when_it_commits(
    db_url: str, tmp_path: Path
) -> None:
    """The intake of ``c1`` decides (the draft would deny it), then waits for the
    task's audit chain head, which another session holds: its lock times out and
    nothing of the intake commits. Sent again once the head is free, ``c1`` is
    decided and committed: one decision, one shadow decision counted."""
    import sqlalchemy

    (tmp_path / "p.yaml").write_text(ENFORCED, encoding="utf-8")
    (tmp_path / "draft.yaml").write_text(DRAFT, encoding="utf-8")
    observer, reader = _observer()
    policy = PolicyAuthorizer(tmp_path / "p.yaml", shadow_policy=tmp_path / "draft.yaml")
    ran: list[str] = []
    holder = sqlalchemy.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    with Gate(_tools(ran), Ledger(db_url, busy_timeout=0.5), policy=policy,
              telemetry=observer) as gate:
        assert _post(gate, "t", "c0").state is CallState.SUCCEEDED
        assert _shadow_counted(reader) == 1
        with holder.connect() as conn, conn.begin():
            conn.execute(sqlalchemy.text(
                "SELECT seq FROM audit_heads WHERE task_id = 't' FOR UPDATE")).all()
            with pytest.raises(sqlalchemy.exc.OperationalError):
                _post(gate, "t", "c1")
        assert gate.ledger.get("t", "c1") is None  # nothing of it committed
        assert _post(gate, "t", "c1").state is CallState.SUCCEEDED
    holder.dispose()
    assert ran == ["c0", "c1"]
    assert _shadow_counted(reader) == 2
