"""A redacted value is never stored or shown in clear: not in results, not in errors.

Tools that echo a field the policy redacts (whole, its first 12 characters, in
upper case) or raise an error quoting part of it, and a tool whose result has
fields named under ``redact_result``. The secret and every 8-character piece of
it, in any case, must appear nowhere: the database (the SQLite file with its
WAL, read as raw bytes; on PostgreSQL every row of every table), the audit trail
as ``agent-gate audit --json`` prints it, the outcomes, and each provider's
rendering of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, text
from support.calls import call

from agent_gate import CallState, Gate, Outcome, ToolRegistry, render_tool_result
from agent_gate.cli import main as cli
from agent_gate.sse import ServerSentEvent

BODY = "Wire 4417 to Quillmarsh Holdings ref ZX-88120-KQ"
TOKEN = "tok_Pz7Kq2Vw9Lm4Rx8Ty"
SECOND_TOKEN = "second-token-ABCDEFGH"
PROVIDERS = ("openai-responses", "openai-chat", "anthropic", "gemini")
SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
    "required": ["to", "body"],
}
TOOLS = ("echo", "prefix", "shout", "refuse", "mint")

POLICY = "\n".join([
    "version: 1",
    "redact: [body]",
    "tools:",
    *[
        line
        for name in TOOLS
        for line in (
            f"  {name}:",
            *(
                ["    redact_result: [token, nested.*.token]"]
                if name == "mint" else []
            ),
            "    rules:",
            f"      - id: allow-{name}",
            "        effect: allow",
        )
    ],
    "",
])


def pieces(secret: str) -> set[str]:
    """Every 8-character substring, lower-cased."""
    folded = secret.lower()
    return {folded[i : i + 8] for i in range(len(folded) - 7)}


SECRET_PIECES = pieces(BODY) | pieces(TOKEN) | pieces(SECOND_TOKEN)


def leaks(haystack: str | bytes) -> list[str]:
    folded = haystack.lower()
    if isinstance(folded, bytes):
        return sorted(p for p in SECRET_PIECES if p.encode() in folded)
    return sorted(p for p in SECRET_PIECES if p in folded)


def make_tools() -> tuple[ToolRegistry, list[str]]:
    ran: list[str] = []
    tools = ToolRegistry()

    @tools.tool(schema=SCHEMA, effect="write")
    def echo(to: str, body: str) -> dict[str, Any]:
        ran.append("echo")
        return {"sent_to": to, "echo": body, "length": len(body)}

    @tools.tool(schema=SCHEMA, effect="write")
    def prefix(to: str, body: str) -> str:
        ran.append("prefix")
        return body[:12]

    @tools.tool(schema=SCHEMA, effect="write")
    def shout(to: str, body: str) -> dict[str, Any]:
        ran.append("shout")
        return {"said": [body.upper()], "to": to}

    @tools.tool(schema=SCHEMA, effect="write")
    def refuse(to: str, body: str) -> None:
        ran.append("refuse")
        raise ValueError(f"upstream refused the payload starting {body[3:15]!r} for {to}")

    @tools.tool(schema=SCHEMA, effect="write")
    def mint(to: str, body: str) -> dict[str, Any]:
        ran.append("mint")
        return {
            "token": TOKEN,
            "status": "ok",
            "hint": f"use {TOKEN.upper()} next time",
            "nested": [{"token": SECOND_TOKEN, "kept": "visible"}],
        }

    return tools, ran


def renderings(outcomes: Iterable[Outcome]) -> str:
    out = []
    for o in outcomes:
        out.append(o.tool_output())
        out.append(json.dumps([o.result, o.error, o.reason], ensure_ascii=False))
        out.extend(json.dumps(render_tool_result(o, p), ensure_ascii=False) for p in PROVIDERS)
        out.extend(
            json.dumps(f(), ensure_ascii=False)
            for f in (o.to_openai_responses, o.to_openai_chat, o.to_anthropic, o.to_gemini)
        )
    return "\n".join(out)


def sqlite_bytes(url: str) -> bytes:
    base = Path(url.removeprefix("sqlite:///"))
    files = [p for p in base.parent.glob(base.name + "*") if not p.name.endswith(".key")]
    assert base in files
    return b"".join(p.read_bytes() for p in files)


def database_text(url: str) -> str | bytes:
    """Everything the database holds: the raw SQLite files (WAL included), or every
    row of every table of the test's PostgreSQL schema as text."""
    if url.startswith("sqlite"):
        return sqlite_bytes(url)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = conn.execute(text(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = current_schema()"
            )).scalars().all()
            assert "tool_calls" in tables
            return "\n".join(
                str(row[0])
                for table in tables
                for row in conn.execute(text(f'SELECT CAST(t AS text) FROM "{table}" t'))
            )
    finally:
        engine.dispose()


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return path


@pytest.fixture
def gate_parts(
    db_url: str, policy_file: Path, seal_key_env: str
) -> Iterator[tuple[Gate, list[str]]]:
    tools, ran = make_tools()
    with Gate(tools, db_url, policy=policy_file) as gate:
        yield gate, ran


def test_results_and_errors_never_hold_a_redacted_value(
    db_url: str, gate_parts: tuple[Gate, list[str]], policy_file: Path
) -> None:
    gate, ran = gate_parts
    fresh = [gate.execute("t", call(name, name, to="ana@example.com", body=BODY)) for name in TOOLS]
    assert [o.state for o in fresh] == [CallState.SUCCEEDED] * 3 + [
        CallState.FAILED, CallState.SUCCEEDED]
    assert ran == list(TOOLS)
    # Read the database while it is open (the SQLite WAL not yet checkpointed).
    stored = database_text(db_url)
    replayed = [gate.execute("t", call(name, name, to="ana@example.com", body=BODY))
                for name in TOOLS] + gate.calls("t")
    assert all(o.replayed for o in replayed) and ran == list(TOOLS)

    assert leaks(renderings(fresh + replayed)) == []
    assert leaks(stored) == []
    out = CliRunner().invoke(cli, ["audit", "--db", db_url, "--task", "t", "--json"])
    assert out.exit_code == 0, out.output
    assert leaks(out.output) == []

    # What is left is still useful: the tool's other fields, where the value was.
    echo, prefix, shout, refuse, mint = fresh
    assert echo.result == {"sent_to": "ana@example.com", "echo": "[redacted]", "length": 48}
    assert prefix.result == "[redacted]" and prefix.tool_output() == "[redacted]"
    assert shout.result == {"said": ["[redacted]"], "to": "ana@example.com"}
    assert refuse.error is not None and refuse.error["message"] == (
        "upstream refused the payload starting '[redacted]' for <argument>"
    )
    # Result fields redacted by path are stand-ins like redacted arguments; the
    # value quoted elsewhere in the result is cut out as well.
    assert mint.result is not None
    token = mint.result["token"]
    assert token["redacted"].startswith("hmac-sha256:") and token["size"] == len(TOKEN)
    assert mint.result["nested"][0]["token"]["type"] == "string"
    assert mint.result["nested"][0]["kept"] == "visible"
    assert mint.result["hint"] == "use [redacted] next time"
    assert [o.result for o in replayed[:5]] == [o.result for o in fresh]

    gate.close()
    assert leaks(database_text(db_url)) == []  # after the checkpoint too


def test_a_run_renders_scrubbed_results(
    gate_parts: tuple[Gate, list[str]],
) -> None:
    """Through ``Gate.run`` and a Chat Completions stream, as an agent loop uses it."""
    gate, ran = gate_parts
    arguments = json.dumps({"to": "ana@example.com", "body": BODY})
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {
            "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "shout", "arguments": arguments}}]}}]},
        {"id": "c", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    events = [ServerSentEvent("message", json.dumps(c), "") for c in chunks]
    events.append(ServerSentEvent("message", "[DONE]", ""))
    result = gate.run(events, task_id="r", provider="openai-chat")
    assert [o.state for o in result.outcomes] == [CallState.SUCCEEDED] and ran == ["shout"]
    messages = json.dumps(
        [result.tool_results(p) for p in PROVIDERS], ensure_ascii=False
    )
    assert "[redacted]" in messages and leaks(messages) == []


def test_an_unstorable_result_of_a_redacting_call_has_no_plain_digest(
    db_url: str, policy_file: Path, seal_key_env: str
) -> None:
    """A plain SHA-256 of a short echoed value would let anyone confirm a guess."""
    tools = ToolRegistry()

    @tools.tool(schema=SCHEMA, effect="write", name="echo")
    def echo(to: str, body: str) -> str:
        return body + "\udc80"

    with Gate(tools, db_url, policy=policy_file) as gate:
        outcome = gate.execute("t", call("echo", "echo", to="ana@example.com", body=BODY))
    stand_in = outcome.result["result_unstorable"]
    assert outcome.state is CallState.SUCCEEDED and outcome.code == "result_unstorable"
    assert stand_in["sha256"].startswith("hmac-sha256:")
    assert leaks(renderings([outcome])) == []


def test_redact_result_is_checked_and_hashed_like_redact() -> None:
    from agent_gate.policy import Policy, PolicyLoadError

    base = "version: 1\ntools:\n  mint:\n    rules: [{id: a, effect: allow}]\n"
    empty = base + "    redact_result: []\n"
    used = base + "    redact_result: [{path: keys.*.secret, preview: 4}]\n"
    hashes = {Policy.from_text(t, source="p.yaml").hash for t in (base, empty)}
    assert len(hashes) == 1  # an unused key leaves the hash (and its approvals) alone
    assert Policy.from_text(used, source="p.yaml").hash not in hashes
    with pytest.raises(PolicyLoadError) as caught:
        Policy.from_text(base + "    redact_result: ['keys..secret']\n", source="p.yaml")
    assert "p.yaml:5" in str(caught.value) and "empty segment" in str(caught.value)


def test_a_result_too_large_to_keep_is_not_shown_unscrubbed(
    db_url: str, policy_file: Path, seal_key_env: str
) -> None:
    """Past ``max_result_bytes`` the ledger keeps a hash; the model sees no copy either,
    so scrubbing (linear in the text) stays bounded by that size."""
    tools = ToolRegistry()

    @tools.tool(schema=SCHEMA, effect="write", name="echo")
    def echo(to: str, body: str) -> str:
        return "padding " * 200 + body

    with Gate(tools, db_url, policy=policy_file, max_result_bytes=1024) as gate:
        outcome = gate.execute("t", call("echo", "echo", to="ana@example.com", body=BODY))
        stored = database_text(db_url)
        [replayed] = gate.calls("t")
    assert outcome.state is CallState.SUCCEEDED and outcome.result is None
    assert outcome.result_omitted and "too large to keep" in outcome.tool_output()
    assert leaks(renderings([outcome, replayed])) == [] and leaks(stored) == []


def test_the_scrubber_cuts_exactly_the_pieces_a_naive_search_finds() -> None:
    """The anchored search against the definition: every 8-window of the text that is
    a piece of a value (any case), and whole values of 4 to 7 characters."""
    import random

    from agent_gate.privacy.scrub import SecretScrubber

    rng = random.Random(7)
    alphabet = "abAB -xyZ"
    for _ in range(500):
        values = ["".join(rng.choice(alphabet) for _ in range(rng.randint(4, 20)))
                  for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        value = rng.choice(values)
        a = rng.randint(0, len(value))
        piece = value[a : rng.randint(a, len(value))]
        at = rng.randint(0, len(text))
        text = text[:at] + rng.choice([piece, piece.upper()]) + text[at:]
        covered = [False] * len(text)
        folded = text.lower()
        for v in (v.lower() for v in values):
            size = 8 if len(v) >= 8 else len(v)
            windows = {v[i : i + size] for i in range(len(v) - size + 1)}
            for s in range(len(folded) - size + 1):
                if folded[s : s + size] in windows:
                    covered[s : s + size] = [True] * size
        expected, i = "", 0
        while i < len(text):
            if covered[i]:
                while i < len(text) and covered[i]:
                    i += 1
                expected += "[redacted]"
            else:
                expected, i = expected + text[i], i + 1
        assert SecretScrubber(values).scrub(text) == expected, (values, text)
