"""What is left of the entries and calls ``audit archive`` pruned, and how the rest of the
ledger reads it: the trail's leaves, the chains' links, the archive records, the tombstones.

A pruned entry keeps its ``audit_events`` id, task, ``seq``, ``prev_hash``, ``hash`` and
leaf hash in ``audit_pruned`` (no content: that is in the archive's bundle): a proof or a
bundle is built over every leaf of the tree, and a leaf cannot be dropped without
breaking every root above it. Each archive batch appends one entry of its own (event
``archived``, task ``ARCHIVE_TASK``) whose detail names the batch (``archive``), how many
entries it pruned and the RFC 6962 root over their leaves in id order. Since revision
0017 the batch also keeps the perfect subtrees covering its leaves and its tasks' chain
ends, and a full ``verify`` reads those instead (``ledger.subtrees``); for a batch
archived before, ``verify`` recomputes the root from ``audit_pruned``
(``archive_problem``), so an entry missing from ``audit_events`` is accepted only where a
hash-chained archive record covers it.

A pruned call keeps a tombstone in ``archived_calls`` by (task, call id) and (task,
dedupe key), and the database refuses to record it again: a trigger on ``tool_calls``
(revision 0011) raises ``REFUSED`` (SQLSTATE ``REFUSED_SQLSTATE`` on PostgreSQL) and the
intake transaction rolls back whole. Intake recognises that error (``refused``) and
only then reads the stored outcome (``tombstone``): the common path never waits for a
tombstone read.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable, Collection, Iterator, Mapping
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection, DateTime, bindparam, or_, select
from sqlalchemy.exc import IntegrityError

from agent_gate.evidence.merkle import Frontier
from agent_gate.ledger.models import ARCHIVED_CALLS, AUDIT_PRUNED
from agent_gate.ledger.records import CALL_COLUMNS, CallRecord, call_record

__all__ = ["ARCHIVED_ROW", "ARCHIVE_EVENT", "ARCHIVE_TASK", "REFUSED", "REFUSED_SQLSTATE",
           "archive_problem", "merge", "pruned_rows", "refused", "tombstone",
           "tombstone_text"]

ARCHIVE_TASK: Final = "agent-gate:archive"
"""The task whose chain holds the archive records (no call is ever made in it)."""
ARCHIVE_EVENT: Final = "archived"
ARCHIVED_ROW: Final = 0
"""The ``row_id`` of a call answered from its tombstone: its row is gone (and on SQLite
its id may since hold another call), and no row ever has id 0."""
REFUSED: Final = "agent_gate_archived"
"""How the message of the trigger's refusal starts (SQLite's ``RAISE(ABORT, ...)``)."""
REFUSED_SQLSTATE: Final = "23AG1"
"""The SQLSTATE PostgreSQL's trigger function raises (class 23: an integrity error)."""
_BATCH = 5000


def pruned_rows(conn: Connection, *, after: int = 0, upto: int | None = None,
                batches: Collection[str] | None = None) -> Iterator[dict[str, Any]]:
    """The pruned entries with ``after < id <= upto`` (of ``batches`` only, if given) in
    id order, as entry-like mappings: ``leaf`` (bytes) marks one, and stands for the
    content it no longer has."""
    stmt = select(AUDIT_PRUNED).where(AUDIT_PRUNED.c.id > after).order_by(AUDIT_PRUNED.c.id)
    if upto is not None:
        stmt = stmt.where(AUDIT_PRUNED.c.id <= upto)
    if batches is not None:
        stmt = stmt.where(AUDIT_PRUNED.c.archive.in_(sorted(batches)))
    for row in conn.execute(stmt.execution_options(yield_per=_BATCH)).mappings():
        yield {"id": int(row["id"]), "task_id": row["task_id"], "seq": int(row["seq"]),
               "prev_hash": row["prev_hash"], "hash": row["hash"],
               "leaf": bytes.fromhex(row["leaf"]), "archive": row["archive"],
               "event": ARCHIVE_EVENT, "call_row_id": None, "call_id": None,
               "from_state": None, "to_state": None}


def merge(live: Iterator[Mapping[str, Any]], pruned: Iterator[Mapping[str, Any]]
          ) -> Iterator[Mapping[str, Any]]:
    """Live and pruned entries in one id order (ids are unique across both)."""
    return heapq.merge(live, pruned, key=lambda r: int(r["id"]))


def archive_problem(conn: Connection, batches: set[str],
                    found: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The first batch kept leaf by leaf (of ``batches``, archived before subtrees were
    kept: the ones a verify walked that way) that no archive record of ``found`` covers
    as it was pruned: its record missing, or its leaves' root or count not the
    recorded one. None when every batch is covered."""
    for batch in sorted(batches):
        record = found.get(batch)
        if record is None:
            return (f"audit entries were removed as archive batch {batch!r}, but the trail "
                    "holds no archive record of that batch: they were deleted, not archived")
        frontier = Frontier()
        for leaf, in conn.execute(select(AUDIT_PRUNED.c.leaf).where(
                AUDIT_PRUNED.c.archive == batch).order_by(AUDIT_PRUNED.c.id)):
            frontier.append(bytes.fromhex(leaf))
        if (frontier.size, frontier.root().hex()) != (record.get("entries"), record.get("root")):
            return (f"archive batch {batch!r} recorded {record.get('entries')} pruned entries "
                    f"with root {str(record.get('root'))[:16]}…, but {frontier.size} are kept "
                    "with another root: pruned entries were added, removed or altered")
    return None


def refused(error: BaseException) -> bool:
    """Whether ``error`` is the database refusing to record a pruned call again (the
    trigger of revision 0011), as every backend raises it: SQLAlchemy's
    ``IntegrityError`` around the driver's error, whichever statement or ``COMMIT``
    of a pipelined transaction it surfaced at."""
    if not isinstance(error, IntegrityError):
        return False
    orig = error.orig
    return (getattr(orig, "sqlstate", None) == REFUSED_SQLSTATE
            or str(orig).startswith(REFUSED))


def _tombstone_query() -> Any:
    calls = ARCHIVED_CALLS.c
    return select(calls.record).where(
        calls.task_id == bindparam("task_id"),
        or_(calls.call_id == bindparam("call_id"), calls.idem_key == bindparam("idem_key")),
    )  # at most two rows (one per unique key), and either answers


def tombstone(run: Callable[..., Any], task_id: str, call_id: str, idem_key: str
              ) -> CallRecord | None:
    """The pruned call with this identity (task and call id, or task and dedupe key) as
    archived: its row without arguments and result (``result_omitted`` when it had one),
    under ``ARCHIVED_ROW``.

    Intake asks only after the database refused the call's insert (``refused``): the
    tombstone that refused it was committed, so this read finds it."""
    rows = run("archived_call", _tombstone_query,
               {"task_id": task_id, "call_id": call_id, "idem_key": idem_key}).rows
    if not rows:
        return None
    kept = json.loads(rows[0][0])
    values = []
    for column in CALL_COLUMNS:
        value = kept.get(column.name)
        if value is not None and isinstance(column.type, DateTime):
            value = datetime.fromisoformat(value)
        values.append(value)
    values[[c.name for c in CALL_COLUMNS].index("id")] = ARCHIVED_ROW
    return call_record(values)


def tombstone_text(row: Mapping[str, Any]) -> str:
    """What a tombstone keeps of a ``tool_calls`` row: every column but the values."""
    kept = {}
    for column in CALL_COLUMNS:
        value = None if column.name in _VALUES else row[column.name]
        kept[column.name] = value.isoformat() if isinstance(value, datetime) else value
    return json.dumps(kept, sort_keys=True)


_VALUES = frozenset({"arguments", "sealed_arguments", "result"})
"""Columns a tombstone never keeps: the archive's bundle does not hold them either."""
