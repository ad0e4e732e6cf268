"""What the ledger reads and writes: every row and value type, and the one row converter.

A ``tool_calls`` row becomes a ``CallRecord`` in exactly one place (``call_record``),
whether it came through SQLAlchemy Core (already converted by the columns' result
processors) or straight from the driver (``backend.fast.driver_call_record``: the
same processors applied first). The mapping is written by name: each column goes to
the field of its name (``row_reader``), and a new row takes each ``NewCall`` field by
the column of its name (``row_writer``). The converter runs about four times per gate
call, so it is written out once at import from those names, and unpacks by position.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import UTC, datetime
from decimal import Decimal
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, DateTime, Text

import agent_gate._speedups as _speedups
from agent_gate.errors import TaskContextConflict
from agent_gate.ledger.models import TASKS, TOOL_CALLS
from agent_gate.ledger.states import CallState, Event
from agent_gate.plainjson import canonical_json

if TYPE_CHECKING:
    # only an annotation here: importing it would load the policy package (and
    # pydantic) into every read of the ledger, `agent-gate tasks` included
    from agent_gate.privacy.results import StoredResult

__all__ = [
    "CALLS",
    "CALL_COLUMNS",
    "TASKS",
    "CallRecord",
    "DbNowPlus",
    "Guard",
    "NewCall",
    "Produced",
    "Ruling",
    "TaskContextConflict",
    "TaskRecord",
    "TaskSummary",
    "Transition",
    "TxnConnection",
    "call_record",
    "from_row",
    "new_call_row",
    "row_reader",
    "row_writer",
    "task_record",
]

# The mapped classes' tables, typed as the Core ``Table`` they are.
CALLS = TOOL_CALLS
TASKS = TASKS
CALL_COLUMNS = tuple(CALLS.c)
"""Every ``tool_calls`` column, in the order a row is read (``call_record``)."""
_TASK_ORDER = ("id", "provider", "terminal", "terminal_reason", "created_at", "updated_at",
               "principal", "scope")

_STATES: dict[str, CallState] = {state.value: state for state in CallState}
_decode = json.JSONDecoder().decode
"""``json.loads`` for text, without its per-call type checks and keyword handling."""
_R = TypeVar("_R")


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _loads(text: str | None) -> Any:
    return _decode(text) if text is not None else None




@dataclass(frozen=True, slots=True)
class DbNowPlus:
    """A column value of "the database clock plus ``ms``": lease expiries are measured
    by the database's clock (``sql.db_now_ms``), never a worker's."""

    ms: int


@dataclass(frozen=True, slots=True)
class Guard:
    """Conditions a transition's compare-and-set must also still match.

    ``owner``: the call is still leased to ``lease_owner`` (only the worker that ran
    the tool reports its outcome; None matches a row without an owner).
    ``lease_expired``: its lease has run out by the database clock right now (a
    lease renewed a moment ago is never stolen).
    """

    owner: bool = False
    lease_owner: str | None = None
    lease_expired: bool = False


@dataclass(frozen=True, slots=True)
class CallRecord:
    """A snapshot of one ``tool_calls`` row; ``state`` and ``version`` are what a
    transition must name to apply."""

    row_id: int
    task_id: str
    call_id: str
    idem_key: str
    tool: str
    effect: str
    idempotency: str
    args_hash: str
    arguments: dict[str, Any] | None
    state: CallState
    version: int
    attempt: int
    lease_owner: str | None
    lease_expires_ms: int | None
    result: Any
    result_sha256: str | None
    result_bytes: int | None
    result_omitted: bool
    """The tool's result was too large to keep: only its hash and size were stored."""
    error: dict[str, Any] | None
    reason_code: str | None
    reason: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    sealed_arguments: str | None = None
    """The full arguments, sealed (``agent_gate.privacy.seal``), when ``arguments`` holds
    redacted stand-ins; None when nothing was redacted."""
    policy_hash: str | None = None
    rule_ids: tuple[str, ...] = ()
    trace_id: str | None = None
    """The trace the call was first seen in (``agent_gate.telemetry``); None without one."""
    span_id: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> CallRecord:
        """A row read through Core, by column name (kept for callers outside the ledger)."""
        return call_record([row[c.name] for c in CALL_COLUMNS])


def frozen_fill(cls: type[_R]) -> Callable[..., _R] | None:
    """A faster constructor of ``cls``, a frozen slotted dataclass, taking every field
    by position; None where it cannot be had (``AGENT_GATE_PURE_PYTHON``, or an
    interpreter that refuses it).

    Why: a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (its own ``__setattr__`` refuses), about 80 ns a field; a
    ``CallRecord`` has thirty, and a gate call builds four. The same slots are filled
    here by a plain slotted twin's ``__init__``, and the object then becomes a ``cls``
    (``__class__`` assignment, allowed between classes of identical slots): an
    instance of ``cls`` like any other (same type, fields, equality, frozen), only
    built without the per-field detour. Checked against ``cls(...)`` once here; the
    reference, ``cls`` itself, is what ``call_record`` uses without it.
    """
    if _speedups.PURE_PYTHON:
        return None
    names = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    if getattr(cls, "__slots__", None) != names:  # pragma: no cover - not such a class
        return None
    twin: Any = dataclass(slots=True, eq=False, repr=False, match_args=False)(
        type(f"_{cls.__name__}Fill", (), {"__annotations__": dict.fromkeys(names, "Any")})
    )

    def fill(*values: Any) -> _R:
        made = twin(*values)
        made.__class__ = cls
        return made  # type: ignore[no-any-return]

    sample = tuple(object() for _ in names)
    try:
        made = fill(*sample)
    except TypeError:  # pragma: no cover - an interpreter that refuses the assignment
        return None
    if type(made) is not cls or made != cls(*sample):  # pragma: no cover - same reason
        return None
    return fill


FIELD_OF_COLUMN: Mapping[str, str] = {"id": "row_id"}
"""The one ``tool_calls`` column whose ``CallRecord`` field has another name; every
other column lands in the field of its own name."""

DERIVED_FIELDS: Mapping[str, str] = {
    "result_omitted": "{result} is None and {result_sha256} is not None",
}
"""``CallRecord`` fields that are no column: each one's expression over the row's
columns (``{name}`` is that column's value)."""


def _read_expression(column: Any, annotation: str, value: str) -> str:
    """How one column's value becomes its field's, read off the column's type and the
    field's annotation: a ``DateTime`` made aware (now, for a NOT NULL one never
    written), the ``CallState`` looked up, JSON text decoded unless the field is
    plain text, anything else as the driver returned it."""
    if isinstance(column.type, DateTime):
        absent = "None" if column.nullable else "datetime.now(UTC)"
        return (f"{absent} if {value} is None else {value} if {value}.tzinfo "
                f"else {value}.replace(tzinfo=UTC)")
    if annotation == "CallState":
        return f"_STATES.get({value}) or CallState({value})"
    if isinstance(column.type, Text) and annotation not in ("str", "str | None"):
        if annotation.startswith("tuple["):
            return f"() if {value} is None else tuple(_decode({value}) or ())"
        return f"None if {value} is None else _decode({value})"
    return value


def row_reader(columns: Sequence[Any], record: type[_R]) -> Callable[[Sequence[Any]], _R]:
    """The converter of a row of ``columns`` (values in that order) into ``record``,
    every field matched to its column by name (``FIELD_OF_COLUMN``, ``DERIVED_FIELDS``).

    Why generated: a row is read four times a gate call, and a converter that loops
    over thirty columns calling a function for each costs about three times the one
    written out by hand, which unpacks the row and gives every field by position. So
    that one is written here, once per table and record class at import, from the
    names (as ``dataclasses`` writes ``__init__``): positions are never written by
    hand, and a column added to the table and a field of its name added to the
    record are read with nothing else changed (``tests/ledger/test_records.py``
    adds one to copies of both and reads it back from a real database).
    """
    by_field = {FIELD_OF_COLUMN.get(c.name, c.name): i for i, c in enumerate(columns)}
    names = [f"c{i}" for i in range(len(columns))]
    of_column = {c.name: names[i] for i, c in enumerate(columns)}
    record_fields = fields(record)  # type: ignore[arg-type]
    args: list[str] = []
    defaults: dict[str, Any] = {}
    for f in record_fields:
        if f.name in by_field:
            i = by_field[f.name]
            args.append(_read_expression(columns[i], _annotation(f.type), names[i]))
        elif f.name in DERIVED_FIELDS:
            args.append("(" + DERIVED_FIELDS[f.name].format(**of_column) + ")")
        elif f.default is not MISSING:  # a field the table does not have: its default
            defaults[f"_default_{f.name}"] = f.default
            args.append(f"_default_{f.name}")
        else:
            raise TypeError(f"{record.__name__}.{f.name} is no column of the row")
    unread = set(by_field) - {f.name for f in record_fields}
    if unread:
        raise TypeError(f"{record.__name__} has no field for column(s) {sorted(unread)}")
    # ``_FAST_RECORD`` is read at each call (tests turn it off); other records are built
    # by their own class.
    make = "(_FAST_RECORD or _record)" if record is CallRecord else "_record"
    source = (
        f"def reader({', '.join(['_record', *defaults])}):\n"
        f"    def read(values):\n"
        f"        ({', '.join(names)},) = values\n"
        f"        return {make}(\n"
        + "".join(f"            {arg},\n" for arg in args)
        + "        )\n"
        "    return read\n"
    )
    made: dict[str, Any] = {}
    exec(source, globals(), made)  # written above from names only, never from input
    read: Callable[[Sequence[Any]], _R] = made["reader"](record, *defaults.values())
    read.__doc__ = f"A {record.__name__} from a row of {len(columns)} columns, by name."
    return read


def _annotation(annotation: Any) -> str:
    """A field's annotation as written (``from __future__ import annotations`` keeps
    it a string; a class made at run time may hold the type itself)."""
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation)


_FAST_RECORD: Callable[..., CallRecord] | None = frozen_fill(CallRecord)
"""``call_record``'s constructor (``frozen_fill``); None: ``CallRecord`` itself, the
reference (tests set it to None to run that in-process)."""

call_record: Callable[[Sequence[Any]], CallRecord] = row_reader(CALL_COLUMNS, CallRecord)
"""The one ``tool_calls`` row converter: column values in ``CALL_COLUMNS`` order, as
Core or a prepared statement returns them (JSON still text, SQLite datetimes perhaps
naive), each given to the ``CallRecord`` field of its name."""

_RECORD_FIELDS = tuple(f.name for f in fields(CallRecord))
_RECORD_VALUES = attrgetter(*_RECORD_FIELDS)
_MOVED_AT = tuple(_RECORD_FIELDS.index(name) for name in ("state", "version", "attempt"))


def moved(rec: CallRecord, state: CallState, version: int, attempt: int) -> CallRecord:
    """``rec`` at another state, version and attempt: what an arrow sent without
    waiting leaves for the next arrow of its transaction to name (``flows``).

    ``dataclasses.replace`` is the reference; it builds a field dict and goes through
    ``__init__`` (about 15 us for thirty fields, three times a call on the pipelined
    path). Here: the values in one C call, three replaced, and ``_FAST_RECORD``."""
    make = _FAST_RECORD
    if make is None:
        return replace(rec, state=state, version=version, attempt=attempt)
    values = list(_RECORD_VALUES(rec))
    at_state, at_version, at_attempt = _MOVED_AT
    values[at_state], values[at_version], values[at_attempt] = state, version, attempt
    return make(*values)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def from_row(cls: type[_R], row: Mapping[str, Any], **converted: Any) -> _R:
    """The record dataclass ``cls`` from a row read by column name: each field takes
    the column of its name, unless ``converted`` gives its value (a timestamp made
    aware, JSON decoded, a column read under another name).

    Why: a record whose fields mirror its table (approvals, audit events) then names
    only what differs from the row, so a column added to both is not a third list
    to keep in step."""
    plain = {name: row[name] for name in _field_names(cls) if name not in converted}
    return cls(**plain, **converted)


@dataclass(frozen=True, slots=True)
class TaskRecord:
    id: str
    provider: str | None
    terminal: str | None
    terminal_reason: str | None
    created_at: datetime
    updated_at: datetime
    principal: dict[str, Any] | None = None
    scope: dict[str, Any] | None = None


def task_record(row: Mapping[str, Any]) -> TaskRecord:
    """The one ``tasks`` row converter (a row read through Core, by column name)."""
    (task_id, provider, terminal, terminal_reason, created_at, updated_at, principal,
     scope) = (row[name] for name in _TASK_ORDER)
    return TaskRecord(
        id=task_id,
        provider=provider,
        terminal=terminal,
        terminal_reason=terminal_reason,
        created_at=_utc(created_at) or datetime.now(UTC),
        updated_at=_utc(updated_at) or datetime.now(UTC),
        principal=_loads(principal),
        scope=_loads(scope),
    )


@dataclass(frozen=True, slots=True)
class TaskSummary:
    """A task and how many of its calls are in each state, for operators."""

    task: TaskRecord
    counts: Mapping[CallState, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, slots=True)
class NewCall:
    """What the gate knows of a call the first time it is seen."""

    task_id: str
    call_id: str
    idem_key: str
    tool: str
    effect: str
    idempotency: str
    args_hash: str
    arguments: Mapping[str, Any] | None
    """As they may be stored: redacted stand-ins in place of redacted fields."""
    sealed_arguments: str | None = None
    principal: str | None = None
    """Canonical JSON of the task's principal, bound to the task when first given."""
    scope: str | None = None
    trace_id: str | None = None
    """The sampled trace (and the call's span in it) the call is first seen in."""
    span_id: str | None = None
    arguments_json: str | None = None
    """``canonical_json(arguments)`` when the caller already wrote it (the gate does, to
    check and hash them): the ledger stores it instead of encoding them again."""


@dataclass(frozen=True, slots=True)
class Ruling:
    """A decision taken inside a ledger transaction (``Ledger.authorize`` /
    ``Ledger.claim_approved``): which arrow to take and what commits with it.

    ``event`` None means "no change" (the call keeps waiting, ``reason`` says why).
    ``charges`` are the quota amounts the call adds when it becomes authorized;
    ``changes`` extra columns (the deciding policy hash and rule ids); ``approval_id``
    the approval a claim consumes. ``claim``: (owner, lease milliseconds) to take the
    CLAIM arrow in the same transaction when the ruling authorizes the call (a new
    call that runs at once: its decision and its claim are one commit).
    """

    event: Event | None
    code: str | None = None
    reason: str | None = None
    detail: Mapping[str, Any] | None = None
    charges: Mapping[str, Decimal] = field(default_factory=dict)
    changes: Mapping[str, Any] = field(default_factory=dict)
    approval_id: int | None = None
    claim: tuple[str, int] | None = None
    quorum_ids: tuple[int, ...] = ()
    """The other approvals of a quorum the APPROVE arrow consumes with ``approval_id``."""


def _arguments_text(new: NewCall) -> str | None:
    """The ``arguments`` column of a new call: the caller's canonical text when it wrote
    it, else the object's; NULL when they never formed an object."""
    if new.arguments_json is not None:
        return new.arguments_json
    return canonical_json(dict(new.arguments)) if new.arguments is not None else None


ENCODED_AT_INSERT: Mapping[str, Callable[[Any], Any]] = {"arguments": _arguments_text}
"""Columns of a new row whose ``NewCall`` field is encoded otherwise than the rule of
``row_writer`` (the arguments: the caller's own canonical text, when it wrote it)."""


def row_writer(record: type, columns: Sequence[Any]) -> Callable[[Any], dict[str, Any]]:
    """The values a new row of ``columns`` takes from a ``record`` (``NewCall``): every
    field named like a column, by name; a text column whose field is not text gets its
    canonical JSON (the rule ``row_reader`` reads back), ``ENCODED_AT_INSERT`` its own.
    The columns no field gives (state, version, times) are the inserting flow's."""
    by_name = {c.name: c for c in columns}
    plain: list[str] = []
    encoded: list[tuple[str, Callable[[Any], Any]]] = []
    for f in fields(record):  # type: ignore[arg-type]
        column = by_name.get(f.name)
        if column is None:
            continue
        if f.name in ENCODED_AT_INSERT:
            encoded.append((f.name, ENCODED_AT_INSERT[f.name]))
        elif isinstance(column.type, Text) and _annotation(f.type) not in ("str", "str | None"):
            encoded.append((f.name, _json_of(f.name)))
        else:
            plain.append(f.name)
    names = tuple(plain)
    values = attrgetter(*names)

    def write(new: Any) -> dict[str, Any]:
        row = dict(zip(names, values(new), strict=True))
        for name, encode in encoded:
            row[name] = encode(new)
        return row

    return write


def _json_of(name: str) -> Callable[[Any], str | None]:
    get = attrgetter(name)

    def encode(new: Any) -> str | None:
        value = get(new)
        return None if value is None else canonical_json(value)

    return encode


new_call_row: Callable[[NewCall], dict[str, Any]] = row_writer(NewCall, CALL_COLUMNS)
"""The ``tool_calls`` values a ``NewCall`` gives its row, each field to the column of
its name."""


@dataclass(frozen=True, slots=True)
class Transition:
    """The outcome of a compare-and-set: whether it applied, and the row as it is now."""

    won: bool
    record: CallRecord


TxnConnection = Connection
"""The connection a transactional tool writes through: the one of the ledger
transaction that commits its outcome (``Ledger.finish_with``)."""


@dataclass(frozen=True, slots=True)
class Produced:
    """What a transactional tool's run produced, committed with its writes
    (``Ledger.finish_with``)."""

    event: Event
    result: StoredResult | None = None
    code: str | None = None
    reason: str | None = None
