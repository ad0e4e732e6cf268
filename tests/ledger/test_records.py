"""The one ``tool_calls`` row converter gives each column to the field of its name.

``records.call_record`` builds ``CallRecord`` by position (four rows a gate call), so
a field moved in the class or a column moved in the table must fail here, not put
one column's value in another's field.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime, timedelta

from agent_gate.ledger.records import CALL_COLUMNS, CallRecord, call_record
from agent_gate.ledger.states import CallState

_JSON = {"arguments", "result", "error", "rule_ids"}
_TIMES = {"created_at", "updated_at", "started_at", "finished_at"}
_FIELD = {"id": "row_id"}
"""Columns whose field has another name."""


def _row() -> tuple[list[object], dict[str, object]]:
    """A row with a distinct value in every column, and the field each must land in."""
    values: list[object] = []
    expected: dict[str, object] = {}
    base = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for i, column in enumerate(CALL_COLUMNS):
        name = column.name
        value: object
        if name == "state":
            value, want = "executing", CallState.EXECUTING
        elif name in _JSON:
            payload: object = [f"rule-{i}"] if name == "rule_ids" else {"column": name}
            value = f'["rule-{i}"]' if name == "rule_ids" else f'{{"column": "{name}"}}'
            want = tuple(payload) if name == "rule_ids" else payload  # type: ignore[arg-type]
        elif name in _TIMES:
            value = want = base + timedelta(seconds=i)
        elif name in ("id", "version", "attempt", "lease_expires_ms", "result_bytes"):
            value = want = 1000 + i
        else:
            value = want = f"{name}-{i}"
        values.append(value)
        expected[_FIELD.get(name, name)] = want
    return values, expected


def test_each_column_lands_in_the_field_of_its_name() -> None:
    values, expected = _row()
    rec = call_record(values)
    for name, want in expected.items():
        assert getattr(rec, name) == want, name
    assert rec.result_omitted is False
    assert {f.name for f in fields(CallRecord)} == set(expected) | {"result_omitted"}
