"""Reconnect delays and limits validation: pure arithmetic, seeded randomness."""

from __future__ import annotations

import random

import pytest

from agent_gate.sse import ServerSentEvent
from agent_gate.transport import ReconnectPolicy, StreamLimits


def test_delay_grows_exponentially_until_the_cap_without_jitter() -> None:
    policy = ReconnectPolicy(initial_delay=0.1, multiplier=2.0, max_delay=1.0, jitter=0.0)
    rng = random.Random(0)
    delays = [policy.delay(n, retry_ms=None, rng=rng) for n in range(1, 8)]
    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_jitter_stays_within_its_band_and_below_the_cap() -> None:
    policy = ReconnectPolicy(initial_delay=0.5, max_delay=2.0, jitter=0.5)
    rng = random.Random(1234)
    for attempt in range(1, 30):
        raw = min(0.5 * 2.0 ** (attempt - 1), 2.0)
        d = policy.delay(attempt, retry_ms=None, rng=rng)
        assert raw * 0.5 <= d <= raw
    # jitter actually varies the delay (a constant would defeat its purpose)
    samples = {policy.delay(3, retry_ms=None, rng=rng) for _ in range(20)}
    assert len(samples) > 1


def test_server_retry_is_the_base_and_is_capped() -> None:
    policy = ReconnectPolicy(initial_delay=5.0, max_delay=0.3, jitter=0.0)
    rng = random.Random(0)
    assert policy.delay(1, retry_ms=100, rng=rng) == pytest.approx(0.1)
    assert policy.delay(2, retry_ms=100, rng=rng) == pytest.approx(0.2)
    # a hostile retry: 999999999 never stalls the client beyond the cap
    assert policy.delay(1, retry_ms=999_999_999, rng=rng) == pytest.approx(0.3)


def test_retry_after_is_honoured_exactly_within_the_cap() -> None:
    policy = ReconnectPolicy(max_delay=2.0, jitter=0.9)
    rng = random.Random(0)
    assert policy.delay(1, retry_ms=None, retry_after=1.5, rng=rng) == 1.5
    assert policy.delay(4, retry_ms=10, retry_after=120.0, rng=rng) == 2.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": -1},
        {"initial_delay": -0.1},
        {"multiplier": 0.5},
        {"jitter": 1.5},
    ],
)
def test_policy_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ReconnectPolicy(**kwargs)  # type: ignore[arg-type]


def test_attempt_numbers_are_one_based() -> None:
    with pytest.raises(ValueError):
        ReconnectPolicy().delay(0, retry_ms=None, rng=random.Random(0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_line_bytes": 0},
        {"max_event_bytes": -1},
        {"idle_timeout": 0},
        {"progress_timeout": -2.0},
        {"max_error_body_bytes": -1},
    ],
)
def test_limits_reject_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StreamLimits(**kwargs)  # type: ignore[arg-type]


def test_heartbeat_types_are_configurable() -> None:
    limits = StreamLimits(heartbeat_events=frozenset({"ping", "keepalive"}))
    assert limits.is_heartbeat(ServerSentEvent("keepalive", "", ""))
    assert limits.is_heartbeat(ServerSentEvent("ping", "{}", ""))
    assert not limits.is_heartbeat(ServerSentEvent("message", "ping", ""))
