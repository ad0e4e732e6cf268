"""A worker that loses its database connection at a chosen step (run as a script).

Usage: pg_worker.py DB_URL TASK CALL_ID MODE [LEASE_SECONDS [STAY_FILE]]

It executes one ``post`` call (idempotency ``none``: must never run twice) through
the gate and prints the outcome as JSON, or ``{"error": TYPE}`` (exit 3) when the
gate raised. MODE says where the connection is lost, by ending the server session
with ``pg_terminate_backend`` from a separate connection, exactly as a server
restart, a failover or a network cut would:

* ``normal``: nothing is lost;
* ``idle_before_claim``: every session of this worker is ended while the policy
  decides (the sessions sit idle in the pool; the claim has not happened);
* ``at_claim``: the session is ended just before the claim's UPDATE runs, inside the
  claim's transaction;
* ``after_claim``: the tool, which runs only after the claim committed, ends every
  session of this worker before it writes;
* ``at_outcome``: the tool returned; the session is ended just before the UPDATE
  that would commit ``succeeded``;
* ``sigkill_in_claim``: the process SIGKILLs itself after the claim's UPDATE and
  before its COMMIT.

These hooks (SQLAlchemy engine events, an authorizer, the tool itself) live here,
in the test; the library has no fault-injection switch. With STAY_FILE the worker
stays alive after a failure until that file disappears (bounded), so its lease
outlives it only by the lease time, not by its death.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import event
from sqlalchemy.engine import make_url

from agent_gate import CallInfo, Decision, Gate, ToolRegistry, ToolSpec, Verdict, current_call

URL, TASK, CALL_ID, MODE = sys.argv[1:5]
LEASE = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
STAY = Path(sys.argv[6]) if len(sys.argv) > 6 else None

SESSIONS: list[int] = []
"""Backend pids of every session this process opened through the gate's engine."""


def admin() -> psycopg.Connection[Any]:
    url = make_url(URL)
    return psycopg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password,
        dbname=url.database, autocommit=True, application_name="agent-gate-test-admin",
    )


def terminate(pids: list[int]) -> None:
    """End these server sessions and wait (bounded) until they are gone."""
    if not pids:
        sys.exit("no session to end: the hook would test nothing")
    with admin() as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 20
        while conn.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                           [pids]).fetchone() != (0,):
            if time.monotonic() > deadline:
                sys.exit("terminated sessions never went away")
            time.sleep(0.01)


def effect(line: str) -> None:
    with open(os.environ["AG_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


tools = ToolRegistry()


@tools.tool(schema={"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]}, effect="write", idempotency="none")
def post(text: str) -> dict[str, Any]:
    if MODE == "after_claim":
        terminate(list(SESSIONS))
    call = current_call()
    effect(f"{call.task_id} {call.call_id} {text} attempt={call.attempt} pid={os.getpid()}")
    return {"posted": text}


class EndSessionsWhileDeciding:
    """An authorizer that allows, after ending every session of this worker."""

    def authorize(self, task_id: str, call: CallInfo, spec: ToolSpec) -> Decision:
        terminate(list(SESSIONS))
        return Decision(Verdict.ALLOW, reason="allowed after the connections were cut")


def _is_update_to(statement: str, parameters: Any, state: str) -> bool:
    return (
        statement.lstrip().upper().startswith("UPDATE TOOL_CALLS")
        and isinstance(parameters, dict)
        and parameters.get("state") == state
    )


def install(gate: Gate) -> None:
    engine = gate.ledger.engine
    fired: list[str] = []

    @event.listens_for(engine, "connect")
    def track(dbapi_connection: Any, _record: Any) -> None:
        SESSIONS.append(dbapi_connection.info.backend_pid)

    engine.dispose()  # sessions opened before the listener (the schema check) go too

    @event.listens_for(engine, "before_cursor_execute")
    def before(conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        point = {"at_claim": "executing", "at_outcome": "succeeded"}.get(MODE)
        if point and not fired and _is_update_to(statement, parameters, point):
            fired.append(MODE)
            terminate([conn.connection.dbapi_connection.info.backend_pid])

    @event.listens_for(engine, "after_cursor_execute")
    def after(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if MODE == "sigkill_in_claim" and _is_update_to(statement, parameters, "executing"):
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    policy = EndSessionsWhileDeciding() if MODE == "idle_before_claim" else None
    with Gate(tools, URL, policy=policy, lease_seconds=LEASE) as gate:
        install(gate)
        call = {"call_id": CALL_ID, "name": "post", "arguments": {"text": "hello"}}
        try:
            outcome = gate.execute(TASK, call)
        except Exception as exc:
            print(json.dumps({"error": type(exc).__name__, "sessions": len(SESSIONS)}),
                  flush=True)
            deadline = time.monotonic() + 60
            while STAY is not None and STAY.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            sys.exit(3)
    print(json.dumps({**outcome.to_dict(), "sessions": len(SESSIONS)}), flush=True)


if __name__ == "__main__":
    main()
