"""One no-op tool call as a durable step, in each framework that offers one.

Every candidate runs the same tool, ``noop(n)``, with small arguments
(``{"n": n}``), as a step whose intent is stored before the tool runs and whose
outcome is stored after it. The tool appends ``n`` to a file opened with
``O_APPEND`` outside every framework (``Runs``): that file, not the framework's
own records, says how many times each call ran.

``replay(n)`` hands a finished call to the framework again the way its users
would after a restart (the same call id, workflow id, thread or payload); a
framework that remembers the call must not run the tool a second time.

Each candidate lives in its own process (``worker.py``): DBOS is one instance per
process, and a separate process is what ``strace`` counts fsyncs of.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class Runs:
    """The side-effect counter: one line per run of the tool, appended with O_APPEND."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def ran(self, n: int) -> None:
        os.write(self.fd, f"{n}\n".encode())

    def close(self) -> None:
        os.close(self.fd)


class Candidate(Protocol):
    def run(self, first: int, count: int) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Replays(Candidate, Protocol):
    """A candidate with a store that recognises a finished call handed to it again.
    The floors are only their two commits: they have no such store and no ``replay``."""

    def replay(self, n: int) -> None: ...


def _wal_full(db: sqlite3.Connection) -> None:
    """WAL with a synced commit, checked: the durability every SQLite candidate gets."""
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    mode = db.execute("PRAGMA journal_mode").fetchone()[0]
    sync = db.execute("PRAGMA synchronous").fetchone()[0]
    assert (mode, sync) == ("wal", 2), (mode, sync)


# -- agent-gate ----------------------------------------------------------------------


class AgentGate:
    """``Gate.execute``: received, decided and claimed before the tool, outcome after."""

    def __init__(self, runs: Runs, url: str) -> None:
        from agent_gate import Gate, ToolRegistry
        from agent_gate.ledger.store import Ledger

        tools = ToolRegistry()

        def noop(n: int) -> dict[str, Any]:
            runs.ran(n)
            return {"ok": True}

        tools.register(noop, schema={"type": "object", "properties": {"n": {"type": "integer"}}})
        self.ledger = Ledger(url, create=url.startswith("sqlite"), auto_upgrade=True)
        if url.startswith("sqlite"):
            with self.ledger.engine.connect() as conn:
                sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
                mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
            assert (mode, sync) == ("wal", 2), (mode, sync)
        self.gate = Gate(tools, self.ledger)

    def _call(self, n: int) -> None:
        outcome = self.gate.execute(
            "bench", {"call_id": f"c{n}", "name": "noop", "arguments": {"n": n}}
        )
        assert outcome.result == {"ok": True}, outcome

    def run(self, first: int, count: int) -> None:
        for n in range(first, first + count):
            self._call(n)

    replay = _call

    def close(self) -> None:
        self.gate.close()


# -- the two-commit floor ------------------------------------------------------------


class SqliteFloor:
    """Raw sqlite3: commit the intent, run the tool, commit the outcome. Nothing else."""

    def __init__(self, runs: Runs, path: Path) -> None:
        self.runs = runs
        self.db = sqlite3.connect(path, isolation_level=None)
        _wal_full(self.db)
        self.db.execute(
            "CREATE TABLE calls (id TEXT PRIMARY KEY, args TEXT, state TEXT, result TEXT)"
        )

    def run(self, first: int, count: int) -> None:
        db = self.db
        for n in range(first, first + count):
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO calls (id, args, state) VALUES (?, ?, 'running')",
                (f"c{n}", f'{{"n":{n}}}'),
            )
            db.execute("COMMIT")
            self.runs.ran(n)
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "UPDATE calls SET state = 'done', result = ? WHERE id = ?", ('{"ok":true}', f"c{n}")
            )
            db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()


class PostgresFloor:
    """psycopg in autocommit: the intent insert is one round trip and one commit, the
    outcome update another. Nothing a durable call can do with less."""

    def __init__(self, runs: Runs, dsn: str) -> None:
        import psycopg

        self.runs = runs
        self.db = psycopg.connect(dsn, autocommit=True)
        self.db.execute("DROP TABLE IF EXISTS peers_floor_calls")
        self.db.execute(
            "CREATE TABLE peers_floor_calls (id TEXT PRIMARY KEY, args TEXT, state TEXT, "
            "result TEXT)"
        )

    def run(self, first: int, count: int) -> None:
        db = self.db
        for n in range(first, first + count):
            db.execute(
                "INSERT INTO peers_floor_calls (id, args, state) VALUES (%s, %s, 'running')",
                (f"c{n}", f'{{"n":{n}}}'),
            )
            self.runs.ran(n)
            db.execute(
                "UPDATE peers_floor_calls SET state = 'done', result = %s WHERE id = %s",
                ('{"ok":true}', f"c{n}"),
            )

    def close(self) -> None:
        self.db.close()


# -- DBOS ----------------------------------------------------------------------------


class Dbos:
    """A DBOS step per call: one workflow per call, or ``count`` steps in one workflow.

    DBOS sets no journal mode on its SQLite system database (a rollback journal by
    default); the file is put in WAL before launch so that every candidate commits
    the same way, and ``synchronous`` is SQLite's default, FULL (checked).
    """

    def __init__(self, runs: Runs, url: str, steps: bool, path: Path | None) -> None:
        from dbos import DBOS, SetWorkflowID

        if path is not None:
            db = sqlite3.connect(path)
            _wal_full(db)
            db.close()
        self.set_id = SetWorkflowID
        self.steps = steps
        self.batches: dict[int, int] = {}
        instance = DBOS(
            config={
                "name": "agent_gate_peers",
                "system_database_url": url,
                "log_level": "WARNING",
                # Its own tables, so the two DBOS candidates never see each other's workflows.
                "dbos_system_schema": "dbos_steps" if steps else "dbos",
            }
        )

        @DBOS.step()
        def noop(n: int) -> dict[str, Any]:
            runs.ran(n)
            return {"ok": True}

        @DBOS.workflow()
        def one(n: int) -> dict[str, Any]:
            return noop(n)

        @DBOS.workflow()
        def many(first: int, count: int) -> list[dict[str, Any]]:
            return [noop(n) for n in range(first, first + count)]

        self.one, self.many = one, many
        DBOS.launch()
        self.dbos = DBOS
        if path is not None:
            engine = instance._sys_db.engine
            with engine.connect() as conn:
                mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
                sync = conn.exec_driver_sql("PRAGMA synchronous").scalar()
            assert (mode, sync) == ("wal", 2), (mode, sync)

    def run(self, first: int, count: int) -> None:
        if self.steps:
            self.batches[first] = count
            with self.set_id(f"w{first}"):
                assert self.many(first, count) == [{"ok": True}] * count
            return
        for n in range(first, first + count):
            with self.set_id(f"w{n}"):
                assert self.one(n) == {"ok": True}

    def replay(self, n: int) -> None:
        """Start the workflow again under its id: DBOS returns the recorded result."""
        if self.steps:
            first = max(f for f in self.batches if f <= n)
            with self.set_id(f"w{first}"):
                assert self.many(first, self.batches[first]) == [{"ok": True}] * self.batches[first]
            return
        with self.set_id(f"w{n}"):
            assert self.one(n) == {"ok": True}

    def close(self) -> None:
        self.dbos.destroy()


# -- LangGraph -----------------------------------------------------------------------


class LangGraph:
    """A one-node graph (``ToolNode``) per call, its thread checkpointed by a saver.

    The graph's input (the model's message holding the tool call) is checkpointed
    before the node runs and the node's writes after; ``durability="sync"`` makes
    each checkpoint commit before the next step starts (the default, "async",
    writes it while the next step runs). SqliteSaver sets WAL and leaves
    ``synchronous`` at SQLite's default; it is set to FULL here and checked.
    """

    def __init__(self, runs: Runs, target: str) -> None:
        from langchain_core.messages import AIMessage
        from langchain_core.tools import tool
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode

        self.stack = ExitStack()
        saver: Any
        if target.startswith("postgresql"):
            from langgraph.checkpoint.postgres import PostgresSaver

            saver = self.stack.enter_context(PostgresSaver.from_conn_string(target))
            saver.setup()
        else:
            from langgraph.checkpoint.sqlite import SqliteSaver

            conn = sqlite3.connect(target, check_same_thread=False)
            saver = SqliteSaver(conn)
            saver.setup()
            _wal_full(conn)
            self.stack.callback(conn.close)

        @tool
        def noop(n: int) -> str:
            """Do nothing; count the run."""
            runs.ran(n)
            return "ok"

        graph = StateGraph(MessagesState)
        graph.add_node("tools", ToolNode([noop]))
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        self.graph = graph.compile(checkpointer=saver)
        self.message: Callable[[int], AIMessage] = lambda n: AIMessage(
            content="", tool_calls=[{"name": "noop", "args": {"n": n}, "id": f"c{n}"}]
        )

    def run(self, first: int, count: int) -> None:
        for n in range(first, first + count):
            out = self.graph.invoke(
                {"messages": [self.message(n)]},
                {"configurable": {"thread_id": f"t{n}"}},
                durability="sync",
            )
            assert out["messages"][-1].content == "ok", out

    def replay(self, n: int) -> None:
        """Resume the thread from its last checkpoint, as after a restart."""
        out = self.graph.invoke(None, {"configurable": {"thread_id": f"t{n}"}}, durability="sync")
        assert out["messages"][-1].content == "ok", out

    def close(self) -> None:
        self.stack.close()


# -- Powertools for AWS Lambda -------------------------------------------------------


class Powertools:
    """``idempotent_function`` over the Redis persistence layer.

    The record is written INPROGRESS (a SET NX) before the function runs and
    COMPLETED after it; Redis makes each durable only with ``appendfsync always``,
    which the bench's own server runs with.
    """

    def __init__(self, runs: Runs, port: int) -> None:
        from aws_lambda_powertools.utilities.idempotency import (
            IdempotencyConfig,
            idempotent_function,
        )
        from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
            RedisCachePersistenceLayer,
        )

        layer = RedisCachePersistenceLayer(host="127.0.0.1", port=port, ssl=False)

        @idempotent_function(
            data_keyword_argument="call", persistence_store=layer, config=IdempotencyConfig()
        )
        def noop(call: dict[str, Any]) -> dict[str, Any]:
            runs.ran(call["arguments"]["n"])
            return {"ok": True}

        self.noop = noop

    def _call(self, n: int) -> None:
        got = self.noop(call={"call_id": f"c{n}", "name": "noop", "arguments": {"n": n}})
        assert got == {"ok": True}, got

    def run(self, first: int, count: int) -> None:
        for n in range(first, first + count):
            self._call(n)

    replay = _call

    def close(self) -> None:
        pass


def make(name: str, runs: Runs, where: str) -> Candidate:
    """Build candidate ``name`` storing in ``where``: a directory (SQLite), a URL or a port."""
    pg = where.startswith("postgresql")
    sqlalchemy_url = where.replace("postgresql://", "postgresql+psycopg://")
    directory = Path(where)
    if name == "agent-gate":
        return AgentGate(runs, sqlalchemy_url if pg else f"sqlite:///{directory / 'gate.db'}")
    if name == "floor":
        return PostgresFloor(runs, where) if pg else SqliteFloor(runs, directory / "floor.db")
    if name in ("dbos", "dbos-steps"):
        path = None if pg else directory / f"{name}.sqlite"
        return Dbos(runs, where if pg else f"sqlite:///{path}", name == "dbos-steps", path)
    if name == "langgraph":
        return LangGraph(runs, where if pg else str(directory / "langgraph.db"))
    if name == "powertools":
        return Powertools(runs, int(where))
    raise ValueError(f"unknown candidate {name!r}")
