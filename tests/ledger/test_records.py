"""The one ``tool_calls`` row converter gives each column to the field of its name.

``records.call_record`` builds ``CallRecord`` by position (four rows a gate call), so
a field moved in the class or a column moved in the table must fail here, not put
one column's value in another's field. It builds it through ``records.frozen_fill``
(a fast path) unless ``AGENT_GATE_PURE_PYTHON`` is set: both ways are run here and
must give the same frozen ``CallRecord``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import FrozenInstanceError, fields, replace
from datetime import UTC, datetime, timedelta

import pytest

from agent_gate.ledger import records
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
