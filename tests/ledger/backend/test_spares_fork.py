"""A ledger used in a process forked from the one that opened it (a prefork server,
``multiprocessing`` with ``fork``, a Celery worker): the child opens sessions of its
own and never speaks on, nor closes, the parent's.

Why it matters: a closed psycopg connection sends ``Terminate`` on its socket, and an
inherited socket is the parent's session. Before ``spares.forget_in_children``, a
child handed out its parent's pooled connections and, closing its ledger, ended
every session the parent had idle in its pool (a transaction the parent had open on
one would be lost, and a call it had claimed there settled in doubt).
"""

from __future__ import annotations

import gc
import json
import os
import traceback

import pytest
from ledger_backends import PgSchema
from support.counting import counting_tools

from agent_gate import CallState, Gate
from agent_gate.ledger import Ledger

from .test_pg_pipeline_loss import kept_pids, pooled_pids

pytestmark = pytest.mark.backends("postgresql")


def post(call_id: str) -> dict[str, object]:
    return {"call_id": call_id, "name": "post", "arguments": {"text": call_id}}


def alive(pg: PgSchema, pids: set[int]) -> set[int]:
    """Which of these server sessions still exist."""
    with pg.admin.connect() as conn:
        found = conn.exec_driver_sql(
            "SELECT pid FROM pg_stat_activity WHERE pid = ANY(%(p)s)", {"p": sorted(pids)}
        ).scalars()
        return set(found)


def in_child(gate: Gate, ledger: Ledger) -> dict[str, object]:
    """What the forked child does: calls of its own, then it closes its ledger."""
    for n in range(3):
        assert gate.execute("child", post(f"c{n}")).state is CallState.SUCCEEDED
    with ledger.engine.connect() as conn:
        checked_out = conn.connection.driver_connection.info.backend_pid  # type: ignore[union-attr]
    sessions = [checked_out, *kept_pids(ledger), *pooled_pids(ledger)]
    ledger.close()
    gc.collect()  # whatever the child still holds of its parent's is collected here
    return {"sessions": sessions}


def test_a_forked_child_uses_sessions_of_its_own_and_ends_none_of_its_parents(
    db_url: str, pg: PgSchema
) -> None:
    ran: list[str] = []
    ledger = Ledger(db_url)
    gate = Gate(counting_tools(ran), ledger)
    for n in range(3):
        assert gate.execute("parent", post(f"p{n}")).state is CallState.SUCCEEDED
    # Two sessions at once: one of them stays idle in the pool beside the kept one.
    with ledger.engine.connect() as a, ledger.engine.connect() as b:
        a.exec_driver_sql("SELECT 1")
        b.exec_driver_sql("SELECT 1")
    kept, pooled = set(kept_pids(ledger)), set(pooled_pids(ledger))
    assert kept and pooled, (kept, pooled)
    parents = kept | pooled

    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        try:
            report = in_child(gate, ledger)
        except BaseException:
            report = {"error": traceback.format_exc()}
        os.write(write, json.dumps(report).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert "error" not in report, report["error"]

    child_sessions = set(report["sessions"])  # type: ignore[arg-type]
    assert not child_sessions & parents, "the child was handed its parent's sessions"
    assert alive(pg, parents) == parents, "the child ended sessions of its parent"
    # The parent goes on on the connection it kept, never having lost it.
    for n in range(3, 6):
        assert gate.execute("parent", post(f"p{n}")).state is CallState.SUCCEEDED
    assert set(kept_pids(ledger)) == kept
    assert ran == [f"p{n}" for n in range(6)]  # the child's runs were its own copy's
    gate.close()
    ledger.close()
