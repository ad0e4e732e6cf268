"""A reconnect storm: many live runs of one task, cut at random points, some at once.

Each run gets its own server whose script cuts its connections one to three
times at random places (after an event, inside one, at a byte; abruptly or with
a clean end; with random chunking), then serves faithfully. Runs go in waves of
concurrent workers, each with its own gate on one shared SQLite ledger, all for
the same task. Whatever the interleaving, each complete allowed call must run
exactly once over the whole storm, no complete call may be missing from any
run's report, and nothing the policy holds or denies may run.

Bounded: a fixed number of runs, every cut rule fires once, every reconnect and
every thread join has a limit. The seed is fixed so a failure can be replayed.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from agent_gate import CallState, Gate
from agent_gate.gate.live import LiveResult, run_live
from agent_gate.stream_server import CutMode, Fault, FaultRule, StreamServer, Transcript

from .conftest import FAST, Case, TestPolicy, allowed, cases

SEED = 20260601
WAVES = 6
WORKERS = 4
STORM_CASES = [c for c in cases() if c.sparse]
"""Sparse-id streams: every resume makes the server resend events the client had."""


def random_plan(rng: random.Random, transcript: Transcript) -> list[FaultRule]:
    n = len(transcript)
    size = len(transcript.encoded()[0])
    rules: list[FaultRule] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(["after", "inside", "byte"])
        cut = {
            "after": {"cut_after_events": rng.randint(1, n - 1)},
            "inside": {"cut_inside_event": rng.randint(0, n - 1)},
            "byte": {"cut_at_byte": rng.randint(1, size - 1)},
        }[kind]
        chunks = {}
        if rng.random() < 0.5:
            chunks = {"chunk_min": 1, "chunk_max": rng.randint(2, 64), "seed": rng.randint(0, 99)}
        mode = rng.choice([CutMode.ABORT, CutMode.CLEAN])
        rules.append(FaultRule(Fault(cut=mode, **cut, **chunks), times=1))  # type: ignore[arg-type]
    return rules


@pytest.mark.parametrize("case", STORM_CASES, ids=lambda c: c.id)
def test_a_reconnect_storm_runs_every_complete_allowed_call_exactly_once(
    case: Case, e2e_tools: ModuleType, effects: Path, db_url: str
) -> None:
    rng = random.Random(f"{SEED}:{case.name}")
    results: list[tuple[int, LiveResult]] = []
    errors: list[tuple[int, BaseException]] = []
    lock = threading.Lock()
    plans = [random_plan(rng, case.transcript) for _ in range(WAVES * WORKERS)]

    def worker(index: int, client: httpx.Client) -> None:
        try:
            with (
                StreamServer({"s": case.transcript}, faults=plans[index], join_timeout=2.0) as srv,
                Gate(e2e_tools.tools, db_url, policy=TestPolicy()) as gate,
            ):
                result = run_live(
                    gate,
                    srv.stream_url("s"),
                    provider=case.provider,
                    task_id="storm",
                    client=client,
                    reconnect=FAST,
                )
            with lock:
                results.append((index, result))
        except BaseException as exc:  # reported below with the run's index
            with lock:
                errors.append((index, exc))

    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        for wave in range(WAVES):
            threads = [
                threading.Thread(target=worker, args=(wave * WORKERS + i, client), daemon=True)
                for i in range(WORKERS)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert not any(t.is_alive() for t in threads), f"wave {wave} did not finish"

    assert not errors, f"runs failed (seed {SEED}): {errors}"
    assert len(results) == WAVES * WORKERS
    for index, result in results:
        context = f"run {index} (seed {SEED}, plan {plans[index]})"
        assert result.stream_error is None, context
        assert str(result.terminal) == "completed", context
        assert result.reconnects, context
        assert not result.run.anomalies, context
        # No complete call is missing from any run's report.
        assert {o.call_id for o in result.outcomes} == set(case.complete), context

    # Exactly once over the whole storm, and only what the policy allows.
    runs = e2e_tools.executions(effects, "storm")
    assert dict(runs) == {call_id: 1 for call_id in allowed(case)}
    with Gate(e2e_tools.tools, db_url, policy=TestPolicy()) as gate:
        states = {o.call_id: o.state for o in gate.calls("storm")}
    assert set(states) == set(case.complete)
    for call_id, state in states.items():
        if call_id in allowed(case):
            assert state is CallState.SUCCEEDED
        else:
            assert state in (CallState.REJECTED, CallState.AWAITING_APPROVAL)
    # Across the storm, exactly one run executed each allowed call; the rest read it.
    fresh = [
        o.call_id
        for _, r in results
        for o in r.outcomes
        if not o.replayed and o.state is CallState.SUCCEEDED
    ]
    assert sorted(fresh) == sorted(allowed(case))
