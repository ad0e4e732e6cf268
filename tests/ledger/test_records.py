"""The one ``tool_calls`` row converter gives each column to the field of its name.

``records.call_record`` builds ``CallRecord`` by position (four rows a gate call),
written out at import from the names (``records.row_reader``), so a field moved in
the class or a column moved in the table must fail here, not put one column's value
in another's field; a column added to the table and the records is read by name. It
builds it through ``records.frozen_fill`` (a fast path) unless
``AGENT_GATE_PURE_PYTHON`` is set: both ways are run here and must give the same
frozen ``CallRecord``.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import MISSING, FrozenInstanceError, field, fields, make_dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    Text,
    create_engine,
    insert,
    select,
)

import agent_gate
from agent_gate.ledger import records
from agent_gate.ledger.models import TASKS, TOOL_CALLS
from agent_gate.ledger.records import CALL_COLUMNS, CallRecord, NewCall, call_record
from agent_gate.ledger.states import CallState

_FIELD = {"id": "row_id"}
"""Columns whose field has another name."""
_ANNOTATIONS = {f.name: str(f.type) for f in fields(CallRecord)}


def _kind(column: Any) -> str:
    """How the test writes a distinct value for ``column``: read off its type and its
    field's annotation (so a column added to both needs no edit here)."""
    annotation = _ANNOTATIONS[_FIELD.get(column.name, column.name)]
    if isinstance(column.type, DateTime):
        return "time"
    if annotation == "CallState":
        return "state"
    if isinstance(column.type, Text) and annotation not in ("str", "str | None"):
        return "json_list" if annotation.startswith("tuple[") else "json"
    if isinstance(column.type, Integer):
        return "int"
    return "text"


def _row() -> tuple[list[object], dict[str, object]]:
    """A row with a distinct value in every column, and the field each must land in."""
    values: list[object] = []
    expected: dict[str, object] = {}
    base = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for i, column in enumerate(CALL_COLUMNS):
        name = column.name
        value: object
        kind = _kind(column)
        if kind == "state":
            value, want = "executing", CallState.EXECUTING
        elif kind == "json_list":
            value, want = f'["rule-{i}"]', (f"rule-{i}",)
        elif kind == "json":
            value, want = f'{{"column": "{name}"}}', {"column": name}
        elif kind == "time":
            value = want = base + timedelta(seconds=i)
        elif kind == "int":
            value = want = 1000 + i
        else:
            value = want = f"{name}-{i}"
        values.append(value)
        expected[_FIELD.get(name, name)] = want
    return values, expected


@pytest.fixture(params=["fast", "reference"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``call_record`` through ``frozen_fill`` (when on here) or ``CallRecord`` itself."""
    if request.param == "reference":
        monkeypatch.setattr(records, "_FAST_RECORD", None)
    elif records._FAST_RECORD is None:
        pytest.skip("AGENT_GATE_PURE_PYTHON is set: only the reference runs")
    return str(request.param)


def test_each_column_lands_in_the_field_of_its_name(way: str) -> None:
    values, expected = _row()
    rec = call_record(values)
    for name, want in expected.items():
        assert getattr(rec, name) == want, name
    assert rec.result_omitted is False
    assert {f.name for f in fields(CallRecord)} == set(expected) | {"result_omitted"}


def test_the_fast_record_is_the_references_record(monkeypatch: pytest.MonkeyPatch) -> None:
    if records._FAST_RECORD is None:
        pytest.skip("AGENT_GATE_PURE_PYTHON is set: only the reference runs")
    values, _ = _row()
    names = [c.name for c in CALL_COLUMNS]
    for name in ("arguments", "result", "error"):  # no dict field: hashable
        values[names.index(name)] = None
    fast = call_record(values)
    monkeypatch.setattr(records, "_FAST_RECORD", None)
    reference = call_record(values)
    assert type(fast) is CallRecord is type(reference)
    assert fast == reference and repr(fast) == repr(reference)
    assert hash(fast) == hash(reference)
    with pytest.raises(FrozenInstanceError):
        fast.state = CallState.FAILED  # type: ignore[misc]
    assert not hasattr(fast, "__dict__")


def test_agent_gate_pure_python_turns_the_fast_record_off() -> None:
    code = "from agent_gate.ledger import records; print(records._FAST_RECORD is None)"
    for value, off in (("1", "True"), ("", "False")):
        env = {**os.environ, "AGENT_GATE_PURE_PYTHON": value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.split() == [off]


def test_a_moved_record_is_the_reference_replace(way: str) -> None:
    """``records.moved`` (what a deferred arrow leaves for the next to name) equals
    ``dataclasses.replace`` of the three fields, every other field kept."""
    values, _ = _row()
    rec = call_record(values)
    got = records.moved(rec, CallState.EXECUTING, rec.version + 2, rec.attempt + 1)
    want = replace(rec, state=CallState.EXECUTING, version=rec.version + 2,
                   attempt=rec.attempt + 1)
    assert type(got) is CallRecord
    assert got == want and repr(got) == repr(want)
    assert (got.version, got.attempt) == (rec.version + 2, rec.attempt + 1)


# ---------------------------------------------------------------- columns by name
#
# Adding a ``tool_calls`` column touches these places, and no other:
#   1. ``ledger/models.py``: its ``Column`` in ``TOOL_CALLS``;
#   2. ``migrations/versions/``: the Alembic revision that adds it;
#   3. ``ledger/migrate.py``: ``HEAD``, that revision's name (``tests/ledger`` holds it
#      to Alembic's own head);
#   4. ``ledger/records.py``: the ``CallRecord`` field of its name;
#   5. ``ledger/records.py``: the ``NewCall`` field of its name, if the row is given
#      it when inserted (else the flow whose arrow sets it names it, as for any column);
#      a JSON column is one whose field is not text, written and read as JSON text.
# Reading a row (``call_record``, Core and the prepared statements' positional rows
# alike) and writing a new one (``new_call_row``) follow by name: the two tests below
# add a column to copies of the table and the records and read it back from a real
# database, and fail on any hand-written list of the columns in the ledger.


def _plus(cls: type, extra: list[tuple[str, str, Any]]) -> type:
    """A copy of the frozen record ``cls`` with ``extra`` fields (name, annotation,
    default) after its own."""
    own = [(f.name, f.type) if f.default is MISSING else (f.name, f.type, field(default=f.default))
           for f in fields(cls)]
    added = [(name, annotation, field(default=default)) for name, annotation, default in extra]
    return make_dataclass(f"{cls.__name__}Plus", [*own, *added], frozen=True, slots=True)


def test_a_column_added_to_the_table_and_its_records_is_written_and_read_by_name(
    tmp_path: Path,
) -> None:
    metadata = MetaData()
    TASKS.to_metadata(metadata)
    table = TOOL_CALLS.to_metadata(metadata)
    table.append_column(Column("note", Text))  # plain text
    table.append_column(Column("labels", Text))  # JSON text
    table.append_column(Column("seen_at", DateTime(timezone=True)))  # a time
    record = _plus(CallRecord, [("note", "str | None", None),
                                ("labels", "dict[str, Any] | None", None),
                                ("seen_at", "datetime | None", None)])
    new_call = _plus(NewCall, [("note", "str | None", None),
                               ("labels", "dict[str, Any] | None", None)])
    write = records.row_writer(new_call, tuple(table.c))
    read = records.row_reader(tuple(table.c), record)

    engine = create_engine(f"sqlite:///{tmp_path / 'copy.db'}")
    metadata.create_all(engine)
    now = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    new = new_call(task_id="t", call_id="c", idem_key="call:c", tool="echo", effect="read",
                   idempotency="natural", args_hash="h" * 64, arguments={"a": 1},
                   note="by name", labels={"k": "v"})
    values = write(new)
    assert values["note"] == "by name" and values["arguments"] == '{"a":1}'
    assert values["labels"] == '{"k":"v"}'  # JSON text, as the reader reads it back
    with engine.begin() as conn:
        conn.execute(insert(metadata.tables["tasks"]).values(id="t", created_at=now,
                                                             updated_at=now))
        conn.execute(insert(table).values(
            {**values, "seen_at": now, "state": "received",
             "version": 0, "attempt": 0, "created_at": now, "updated_at": now}))
        row = conn.execute(select(*table.c)).one()
    engine.dispose()
    rec = read(row)
    assert type(rec) is record
    assert (rec.note, rec.labels, rec.seen_at) == ("by name", {"k": "v"}, now)
    assert (rec.task_id, rec.call_id, rec.arguments, rec.state) == (
        "t", "c", {"a": 1}, CallState.RECEIVED)
    assert rec.row_id == row[0] and rec.result_omitted is False


def test_a_field_without_a_column_or_a_column_without_a_field_fails_at_import() -> None:
    table = TOOL_CALLS.to_metadata(MetaData())
    table.append_column(Column("orphan", Text))
    with pytest.raises(TypeError, match="orphan"):
        records.row_reader(tuple(table.c), CallRecord)
    no_default = make_dataclass("Needs", [(f.name, f.type) for f in fields(CallRecord)]
                                + [("missing_column", "str")], frozen=True, slots=True)
    with pytest.raises(TypeError, match="missing_column"):
        records.row_reader(CALL_COLUMNS, no_default)


def test_no_ledger_module_lists_the_columns_by_hand() -> None:
    """A literal, call or unpacking in ``agent_gate/ledger`` that names ten or more of
    the ``tool_calls`` columns is a sixth place to edit for a new column: none may,
    but ``CallDetails.to_dict``, the curated JSON of ``agent-gate call show``, which
    chooses what it shows."""
    columns = {c.name for c in CALL_COLUMNS} | {"row_id"}
    ledger = Path(agent_gate.__file__).parent / "ledger"
    places: list[str] = []
    for path in sorted(ledger.rglob("*.py")):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                items: list[ast.expr] = list(node.elts)
            elif isinstance(node, ast.Dict):
                items = [k for k in node.keys if k is not None]
            elif isinstance(node, ast.Call):
                items = [*node.args, *(ast.Constant(k.arg) for k in node.keywords if k.arg)]
            else:
                continue
            named = {item.value if isinstance(item, ast.Constant) else item.id
                     for item in items
                     if (isinstance(item, ast.Constant) and item.value in columns)
                     or (isinstance(item, ast.Name) and item.id in columns)}
            if len(named) >= 10:
                places.append(f"{path.relative_to(ledger).as_posix()}:{node.lineno}")
    details = (ledger / "views" / "details.py").read_text("utf-8")
    to_dict = next(n for n in ast.walk(ast.parse(details))
                   if isinstance(n, ast.FunctionDef) and n.name == "to_dict"
                   and any(isinstance(m, ast.Dict) and len(m.keys) > 10 for m in ast.walk(n)))
    allowed = {f"views/details.py:{m.lineno}" for m in ast.walk(to_dict) if isinstance(m, ast.Dict)}
    assert [p for p in places if p not in allowed] == []
