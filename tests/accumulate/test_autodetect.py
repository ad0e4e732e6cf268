"""``provider="auto"``: the protocol told from the stream's first events.

Every recorded transcript, read with ``auto``, gives exactly what its own provider
gives; the CLI says what it chose; a stream no protocol claims is an error.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from agent_gate import Gate, ToolRegistry
from agent_gate.accumulate import UNRECOGNIZED_LIMIT, Accumulator, stream_calls
from agent_gate.autodetect import DetectingAccumulator, accumulator, detect
from agent_gate.cli import main as cli
from agent_gate.errors import ProtocolNotDetected
from agent_gate.sse import SSEDecoder

TRANSCRIPTS = Path(__file__).parents[1] / "transcripts"
PROVIDER_OF_DIR = {
    "openai_responses": "openai-responses",
    "openai_chat": "openai-chat",
    "anthropic": "anthropic",
    "gemini": "gemini",
}
ALL = sorted(
    (path.parent.name, path.stem)
    for path in TRANSCRIPTS.glob("*/*.sse")
    if path.parent.name in PROVIDER_OF_DIR
)


def calls_and_terminal(acc: Accumulator | DetectingAccumulator, data: bytes) -> list[str]:
    out = [
        json.dumps([c.call_id, c.name, c.status.value, c.arguments, c.reason], sort_keys=True)
        for c in stream_calls([data], acc)  # type: ignore[arg-type]
    ]
    return [*out, str(acc.terminal)]


@pytest.mark.parametrize(("folder", "name"), ALL)
def test_auto_reads_every_transcript_as_its_own_provider_does(folder: str, name: str) -> None:
    data = (TRANSCRIPTS / folder / f"{name}.sse").read_bytes()
    provider = PROVIDER_OF_DIR[folder]
    auto = accumulator("auto")
    assert calls_and_terminal(auto, data) == calls_and_terminal(Accumulator(provider), data)
    assert auto.provider == provider
    named = Accumulator(provider)
    calls_and_terminal(named, data)
    assert auto.anomalies == named.anomalies


def test_the_cli_says_what_it_detected() -> None:
    path = TRANSCRIPTS / "anthropic" / "parallel_tool_use.sse"
    auto = CliRunner().invoke(cli, ["calls", "--provider", "auto", str(path)])
    named = CliRunner().invoke(cli, ["calls", "--provider", "anthropic", str(path)])
    assert auto.exit_code == 0 == named.exit_code
    assert "provider: detected anthropic" in auto.output
    assert named.output in auto.output.replace("provider: detected anthropic\n", "")


def test_a_stream_no_protocol_claims_is_an_error() -> None:
    foreign = b"".join(b'data: {"kind": "token", "n": %d}\n\n' % n for n in range(3))
    acc = accumulator("auto")
    with pytest.raises(ProtocolNotDetected, match="could not tell the protocol"):
        list(stream_calls([foreign], acc))  # type: ignore[arg-type]
    many = foreign * 4
    acc, fed = accumulator("auto"), 0
    with pytest.raises(ProtocolNotDetected):
        for event in SSEDecoder().feed(many):
            fed += 1
            acc.feed(event)
    assert fed == UNRECOGNIZED_LIMIT
    result = CliRunner().invoke(cli, ["calls", "--provider", "auto", "-"], input=many)
    assert result.exit_code == 1 and "name the provider" in result.output


def test_a_reconnect_before_the_protocol_is_known_is_kept_in_order() -> None:
    """Events a server resends after a reconnect are replays, also when the
    reconnect came while the protocol was still being told."""
    path = TRANSCRIPTS / "openai_responses" / "single_call.sse"
    decoder = SSEDecoder()
    events = decoder.feed(path.read_bytes())
    decoder.end()
    heartbeat_first = SSEDecoder().feed(b": keep-alive\n\n")
    auto, named = accumulator("auto"), Accumulator("openai-responses")
    for acc in (auto, named):
        for event in heartbeat_first:
            acc.feed(event)
    released: dict[str, list[str]] = {"auto": [], "named": []}
    for label, acc in (("auto", auto), ("named", named)):
        for event in events[:2]:
            released[label] += [c.call_id for c in acc.feed(event)]
        acc.reconnected()
        for event in events:
            released[label] += [c.call_id for c in acc.feed(event)]
        released[label] += [c.call_id for c in acc.close()]
    assert released["auto"] == released["named"] and released["auto"]
    assert auto.stats.replayed_events == named.stats.replayed_events == 2


def test_gate_run_with_auto_runs_each_call_once(db_url: str) -> None:
    ran: Counter[str] = Counter()
    tools = ToolRegistry()
    for tool in ("get_weather", "send_email"):
        tools.register(lambda tool=tool, **_: ran.update([tool]), name=tool,
                       schema={"type": "object"})
    decoder = SSEDecoder()
    events = decoder.feed((TRANSCRIPTS / "gemini" / "parallel_calls.sse").read_bytes())
    decoder.end()
    with Gate(tools, db_url) as gate:
        first = gate.run(events, task_id="t", provider="auto")
        again = gate.run(events, task_id="t", provider="auto")
    assert first.error is None and str(first.terminal) == "completed"
    assert first.outcomes and all(o.replayed for o in again.outcomes)
    assert sum(ran.values()) == len(first.outcomes)


def test_detect_names_each_protocol_by_its_own_shape() -> None:
    assert detect({"type": "response.created"}) == "openai-responses"
    assert detect({"type": "message_start", "message": {}}) == "anthropic"
    assert detect({"object": "chat.completion.chunk", "choices": []}) == "openai-chat"
    assert detect({"candidates": []}) == "gemini"
    for undecided in ({"type": "error", "error": {}}, {"error": {"message": "x"}}, {}):
        assert detect(undecided) is None
