"""A worker on PostgreSQL's fast write path that dies at a chosen point of a call's
intake (run as a script by ``test_write_path_faults``).

Usage: fast_path_worker.py DB_URL TASK CALL_ID MODE

No engine listener is installed (a listener would put the ledger on its Core
path): the hooks wrap ``PipelinedTxn`` itself. The worker first runs two calls of
another task, so that the call under test is inserted under a spare id with its
decision and claim folded in, in one round trip on a kept connection. MODE:

* ``normal``: nothing happens; the outcome is printed as JSON;
* ``sigkill_committed``: the intake's COMMIT has been committed by the server (seen
  from another connection) and the process SIGKILLs itself before reading the
  answer: the call is left ``executing`` under a dead owner;
* ``sigkill_before_commit``: the process SIGKILLs itself before the intake's COMMIT
  is handed to libpq: nothing of the intake commits.

The tool appends one fsynced line per run to ``$AG_EFFECTS``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

import psycopg
from sqlalchemy.engine import make_url

from agent_gate import Gate, ToolRegistry
from agent_gate.ledger.backend import pg_fast
from agent_gate.ledger.backend.pg_pipeline import PipelinedTxn

URL, TASK, CALL_ID, MODE = sys.argv[1:5]

tools = ToolRegistry()


@tools.tool(schema={"type": "object", "properties": {"text": {"type": "string"}},
                    "required": ["text"]}, effect="write", idempotency="none")
def post(text: str) -> dict[str, Any]:
    with open(os.environ["AG_EFFECTS"], "a", encoding="utf-8") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    return {"posted": text}


def committed() -> bool:
    url = make_url(URL)
    schema = url.query["options"].split("search_path=")[1]  # type: ignore[union-attr]
    with psycopg.connect(host=url.host, port=url.port or 5432, user=url.username,
                         password=url.password, dbname=url.database, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {schema}.tool_calls WHERE task_id = %s AND call_id = %s",
            [TASK, CALL_ID],
        ).fetchone()
        return row is not None and row[0] > 0


def arm() -> None:
    real_leave, real_commit = PipelinedTxn._leave, PipelinedTxn.commit

    def leave(self: PipelinedTxn, *, committing: bool) -> None:
        if committing and MODE == "sigkill_committed":
            deadline = time.monotonic() + 20
            while not committed():
                if time.monotonic() > deadline:
                    sys.exit("the intake never committed")
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        real_leave(self, committing=committing)

    def commit(self: PipelinedTxn) -> None:
        if MODE == "sigkill_before_commit":
            os.kill(os.getpid(), signal.SIGKILL)
        real_commit(self)

    PipelinedTxn._leave = leave  # type: ignore[method-assign]
    PipelinedTxn.commit = commit  # type: ignore[method-assign]


def main() -> None:
    with Gate(tools, URL) as gate:
        for n in range(2):
            gate.execute(f"{TASK}-warm", {"call_id": f"w{n}", "name": "post",
                                          "arguments": {"text": f"warm-{n}"}})
        if not pg_fast.spare_ids(gate.ledger.engine).ids:
            sys.exit("no spare ids: the call would not take the folded path")
        arm()
        outcome = gate.execute(TASK, {"call_id": CALL_ID, "name": "post",
                                      "arguments": {"text": "hello"}})
    print(json.dumps(outcome.to_dict()), flush=True)


if __name__ == "__main__":
    main()
