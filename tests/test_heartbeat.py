"""The lease keeper: one thread renews every running call's lease until released.

Real threads and short intervals; every wait is a bounded poll, never a timing
assertion.
"""

from __future__ import annotations

import threading
from collections import Counter

from waiting import wait_until

from agent_gate.heartbeat import LeaseKeeper


def keeper_threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name)


def test_every_held_lease_is_renewed_on_one_thread_until_released() -> None:
    renewed: Counter[str] = Counter()
    keeper: LeaseKeeper[str] = LeaseKeeper(
        lambda c: renewed.update([c]) or True, 0.01, name="test-lease-one"
    )
    releases = {c: keeper.hold(c) for c in ("a", "b", "c")}
    wait_until(lambda: all(renewed[c] >= 3 for c in "abc"))
    assert keeper_threads("test-lease-one") == 1
    releases["b"]()
    wait_until(lambda: keeper.held == 2)
    after = renewed["b"]
    wait_until(lambda: renewed["a"] >= after + 5)
    assert renewed["b"] <= after + 1  # at most one renewal was already in flight
    releases["a"](), releases["c"]()
    assert keeper.held == 0


def test_a_lease_reported_lost_is_dropped_and_a_failing_renewal_is_retried() -> None:
    calls: Counter[str] = Counter()

    def renew(claim: str) -> bool:
        calls[claim] += 1
        if claim == "flaky" and calls[claim] < 3:
            raise OSError("database unreachable")
        return claim != "lost"

    keeper: LeaseKeeper[str] = LeaseKeeper(renew, 0.01, name="test-lease")
    release_flaky = keeper.hold("flaky")
    keeper.hold("lost")
    wait_until(lambda: calls["flaky"] >= 5)
    wait_until(lambda: keeper.held == 1)  # "lost" was dropped after its answer
    assert calls["lost"] == 1
    release_flaky()


def test_the_thread_exits_when_idle_and_the_next_hold_starts_it_again() -> None:
    renewed: Counter[str] = Counter()
    keeper: LeaseKeeper[str] = LeaseKeeper(
        lambda c: renewed.update([c]) or True, 0.01, idle=0.05, name="test-lease-idle"
    )
    keeper.hold("a")()
    wait_until(lambda: keeper_threads("test-lease-idle") == 0)
    release = keeper.hold("b")
    wait_until(lambda: renewed["b"] >= 2)
    release()
