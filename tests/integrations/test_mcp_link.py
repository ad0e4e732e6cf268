"""The proxy's link to its upstream, in process: the restart backoff's bounds, and a link to a
command that cannot serve failing with one sentence (the slow, whole-process versions are in
``test_mcp_red_team_upstream.py``)."""

from __future__ import annotations

import itertools
import sys

import anyio
import pytest

from agent_gate.errors import UpstreamUnavailable
from agent_gate.integrations.mcp.link import Backoff, Link
from agent_gate.integrations.mcp.wire import Deliveries, Sent, key_of


def test_the_backoff_doubles_to_its_bound_and_jitter_only_shortens() -> None:
    backoff = Backoff(first=0.1, most=5.0, jitter=0.25)
    for _ in range(50):
        delays = list(itertools.islice(backoff.delays(), 12))
        nominal = [min(0.1 * 2**i, 5.0) for i in range(12)]
        assert all(n * 0.75 <= d <= n for d, n in zip(delays, nominal, strict=True))
    assert list(itertools.islice(Backoff(jitter=0.0).delays(), 8)) == [
        0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]


def test_a_request_is_sent_only_once_a_transport_says_so() -> None:
    wire = Deliveries()
    request = {"method": "tools/call", "params": {
        "name": "t", "_meta": {"agent-gate/idempotency-key": "k"}}}
    assert key_of(request) == "k" and key_of({"method": "tools/list"}) is None
    wire.expect("k")
    assert wire.take("k") is Sent.NOT_SENT  # nobody wrote it
    wire.expect("k")
    wire.mark("k", Sent.SENT)
    assert wire.take("k") is Sent.SENT
    assert wire.take("never-expected") is Sent.SENT  # unknown: may have been delivered


@pytest.mark.parametrize(("command", "said"), [
    (("agent-gate-no-such-command",), "cannot start the upstream 'agent-gate-no-such-command'"),
    ((sys.executable, "-c", "raise SystemExit(3)"), "closed the connection before it answered"),
    ((sys.executable, "-c", "import time; time.sleep(60)"), "did not answer initialize within"),
])
def test_a_command_that_cannot_serve_fails_the_first_connection_in_one_sentence(
    command: tuple[str, ...], said: str,
) -> None:
    link = Link(command, start_timeout=2.0)

    async def main() -> None:
        with pytest.raises(UpstreamUnavailable) as caught:
            await link.run()
        assert said in str(caught.value) and "\n" not in str(caught.value)
        assert link.session is None

    anyio.run(main)
