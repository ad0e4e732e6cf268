"""Put agent-gate in front of a tool dispatcher you already have.

Many agents already route tool calls through one function, ``dispatch(name,
arguments)``. ``ToolRegistry().wrap(dispatch, specs=...)`` keeps that function
as it is and declares, per tool, its JSON Schema and how dangerous it is; a
policy file (``support_policy.yaml`` next to this script) decides which calls
run on their own and which wait for a person. The gate then validates,
authorizes and records every complete call before your dispatcher sees it, and
answers repeats from the ledger.

Run it: ``python examples/wrap_dispatcher.py`` (add ``--db URL`` to keep the
ledger; by default it uses a fresh temporary directory and says where).
It feeds a recorded OpenAI Responses stream (``streams/openai_responses_tool_calls.sse``:
a weather lookup and a mail to camille@example.com) through the gate twice,
then hands the gate one more call, a mail to another domain, which the policy
holds for approval.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from agent_gate import Gate, ToolRegistry
from agent_gate.sse import SSEDecoder

HERE = Path(__file__).resolve().parent
POLICY = HERE / "support_policy.yaml"
STREAM = HERE / "streams" / "openai_responses_tool_calls.sse"


# --------------------------------------------------------- the code you already have


class Outbox:
    """Stands in for a mail server: every mail "sent" is one line in a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def send(self, to: str, subject: str, body: str) -> str:
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"to": to, "subject": subject}) + "\n")
        return f"queued for {to}"

    def sent(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines()]


def make_dispatch(outbox: Outbox) -> Any:
    """The agent's existing dispatcher: one function, tools by name."""

    def dispatch(name: str, arguments: dict[str, Any]) -> Any:
        if name == "get_weather":
            return {"city": arguments["city"], "temperature": 18, "unit": arguments["unit"]}
        if name == "send_email":
            return outbox.send(arguments["to"], arguments["subject"], arguments["body"])
        raise KeyError(name)

    return dispatch


# ------------------------------------------------------------ what agent-gate adds

SPECS: dict[str, dict[str, Any]] = {
    "get_weather": {
        "schema": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
        "effect": "read",
        "idempotency": "natural",
    },
    "send_email": {
        "schema": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "format": "email"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
        "effect": "write",
        "idempotency": "none",  # a mail sent twice is two mails: never re-run blindly
    },
}


def recorded_events() -> list[Any]:
    decoder = SSEDecoder()
    events = decoder.feed(STREAM.read_bytes())
    decoder.end()
    return events


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="ledger URL (default: a temporary file)")
    parser.add_argument("--outbox", type=Path, default=None)
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="agent-gate-wrap-"))
    db = args.db or f"sqlite:///{workdir / 'ledger.db'}"
    outbox = Outbox(args.outbox or workdir / "outbox.jsonl")

    tools = ToolRegistry().wrap(make_dispatch(outbox), specs=SPECS)
    report: dict[str, Any] = {"db": db, "outbox": str(outbox.path)}
    with Gate(tools, db, policy=POLICY, create=True) as gate:
        first = gate.run(recorded_events(), task_id="wrap-example", provider="openai-responses")
        for o in first.outcomes:
            print(f"{o.call_id}  {o.tool:<12} {o.state.value:<18} ran now: {not o.replayed}")
        # What goes back to the model: one result per call, none left dangling.
        print(json.dumps(first.tool_results("openai-responses"), indent=2))

        again = gate.run(recorded_events(), task_id="wrap-example", provider="openai-responses")
        replayed = [(o.tool, o.state.value, o.replayed) for o in again.outcomes]
        print("the same stream again:", replayed)

        held = gate.execute(
            "wrap-example",
            {
                "call_id": "call_external_1",
                "name": "send_email",
                "arguments": {"to": "someone@partner.org", "subject": "Hi", "body": "Hello"},
            },
        )
        print(f"{held.call_id}: {held.state.value} ({held.reason})")
        print("approve it with: agent-gate approve call_external_1 --task wrap-example "
              f"--by you --db {db}")
    report.update(
        first=[(o.call_id, o.state.value, o.replayed) for o in first.outcomes],
        again=[(o.call_id, o.state.value, o.replayed) for o in again.outcomes],
        held=(held.call_id, held.state.value),
        sent=outbox.sent(),
    )
    print(f"mails in the outbox: {len(report['sent'])} ({outbox.path})")
    return report


if __name__ == "__main__":
    main()
