"""The ledger's tables, as SQLAlchemy Core ``Table`` definitions.

These describe the schema for code and for ``alembic check``; they never create it.
The schema is created and changed only by the Alembic revisions in ``migrations/``,
and a test compares the two so they cannot drift apart.

Core tables, not ORM classes: the ledger only ever runs Core statements, and the ORM
(``sqlalchemy.orm`` and declarative class building) is a quarter of what a CLI
command such as ``agent-gate tasks`` spends starting.

Types are chosen to mean the same on SQLite and PostgreSQL: strings with explicit
lengths, JSON stored as text (the ledger compares hashes, not JSON values), lease
expiry as integer milliseconds since the epoch so that "expired" is one integer
comparison in SQL on every dialect.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

__all__ = [
    "APPROVALS",
    "APPROVAL_DEADLINES",
    "APPROVAL_EDITS",
    "APPROVAL_GRANTS",
    "APPROVAL_GRANT_USES",
    "ARCHIVED_CALLS",
    "ARCHIVED_HEADS",
    "AUDIT_CHECKPOINTS",
    "AUDIT_CHECKPOINT_HEADS",
    "AUDIT_EVENTS",
    "AUDIT_HEADS",
    "AUDIT_PRUNED",
    "AUDIT_PRUNED_HEADS",
    "AUDIT_SUBTREES",
    "MCP_EVENTS",
    "OPERATORS",
    "QUOTA_CHARGES",
    "ROW_ID",
    "SWEPT_STATES",
    "SWEPT_WHERE",
    "TASKS",
    "TOOL_CALLS",
    "WAITING_STATES",
    "WAITING_WHERE",
    "WEBHOOK_CURSORS",
    "metadata",
]

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LEN = 255
"""Task ids and provider call ids are caller-chosen strings; 255 covers every
provider's id format with room to spare."""

TOOL_NAME_LEN = 200
"""Characters of a tool name the ledger keeps (``tool_calls.tool``)."""

metadata = MetaData(naming_convention=NAMING)

SWEPT_STATES = ("awaiting_approval", "executing", "in_doubt")
"""The states read across every task (``recover`` without a task, the operator's
pending and in-doubt lists): the only rows the ``tool_calls (state)`` index holds.

Why partial: every other state is only ever looked for within one task (through
``(task_id, state)``), and a row leaves or enters this index only when a call starts
or stops waiting, running or being in doubt, so the transitions most calls make
(received, authorized, succeeded...) write no page of it, and lease renewals none at
all (the expiry is not indexed: nothing searches by it)."""

SWEPT_WHERE = "state IN ('awaiting_approval', 'executing', 'in_doubt')"
"""The index's predicate, as SQL. A query uses the index only if its ``WHERE`` holds
this very text (SQLite matches a partial index's predicate term by term, and a
PostgreSQL plan made for any parameters cannot prove a parameter implies it), so
readers add it verbatim (``reads.calls``)."""

WAITING_STATES = ("awaiting_approval", "in_doubt")
"""The states a person acts on (the inbox): the only rows the ``tool_calls (id)`` index
holds (revision 0015).

Why an index of its own: the inbox lists these calls in ``ref`` (row id) order a page
at a time. ``(state)`` finds them, but on PostgreSQL its entries are in no id order,
so a page read all 10,000 waiting calls, checked each for an approval and sorted them
to keep 51; walking this index the plan stops at the page's limit, for one state or
both. Partial over these two states (not ``SWEPT_STATES``): every call that runs
passes through ``executing``, only a call a person must answer enters this index."""

WAITING_WHERE = "state IN ('awaiting_approval', 'in_doubt')"
"""That index's predicate, as SQL, stated verbatim by the inbox's reads (as
``SWEPT_WHERE``: SQLite matches a partial index's predicate term by term)."""


ROW_ID = BigInteger().with_variant(Integer(), "sqlite")
"""The type of a row id and of every column that names one: 64 bits on PostgreSQL (a
busy ledger passes 2**31 audit entries; revision 0016), ``INTEGER`` on SQLite, whose
row ids are 64-bit already and where only ``INTEGER PRIMARY KEY`` is the rowid."""


def _at(name: str, *, nullable: bool = False) -> Column[object]:
    return Column(name, DateTime(timezone=True), nullable=nullable)


TASKS = Table(
    "tasks",
    metadata,
    Column("id", String(ID_LEN), primary_key=True),
    _at("created_at"),
    _at("updated_at"),
    Column("provider", String(64)),
    # How the last response of the task ended (``completed``, ``truncated``...).
    Column("terminal", String(64)),
    Column("terminal_reason", String(500)),
    # Canonical JSON of the ``Principal`` the task acts for, fixed when first given, so
    # that a resume without the application decides exactly as the application would.
    Column("principal", Text),
    # Canonical JSON of the task's ``TaskScope`` (name, tools, attributes), likewise.
    Column("scope", Text),
    Index(None, "updated_at", "id"),  # listings, newest first
)
"""One agent task: the unit a call id is unique within, and what ``recover`` sweeps."""


TOOL_CALLS = Table(
    "tool_calls",
    metadata,
    Column("id", ROW_ID, primary_key=True, autoincrement=True),
    Column("task_id", String(ID_LEN), ForeignKey("tasks.id", ondelete="RESTRICT"),
           nullable=False),
    # The provider's call id, as the stream carried it.
    Column("call_id", String(ID_LEN), nullable=False),
    # ``call:<call id>`` by default, ``dedupe:<tool>:<hash>`` for tools that declare
    # argument names; unique within the task, so a second row for the same write
    # cannot be inserted even by a racing process.
    Column("idem_key", String(300), nullable=False),
    Column("tool", String(TOOL_NAME_LEN), nullable=False),
    Column("effect", String(16), nullable=False),
    Column("idempotency", String(16), nullable=False),
    Column("args_hash", String(64), nullable=False),
    # Canonical JSON of the arguments, kept so that recovery, approval and resume can
    # run the call without the stream; NULL when they never formed a JSON object.
    # Fields the policy redacts appear here only as their redacted stand-ins; the
    # whole object is then in ``sealed_arguments`` (see ``agent_gate.privacy.seal``).
    Column("arguments", Text),
    # The full arguments encrypted with the operator's seal key (AES-256-GCM, bound to
    # this row's task, call id and argument hash); NULL when nothing was redacted.
    Column("sealed_arguments", Text),
    # Hash of the policy that decided the call (an approval must name the same one).
    Column("policy_hash", String(80)),
    # JSON list of the rule ids that decided the call.
    Column("rule_ids", Text),
    Column("state", String(32), nullable=False),
    Column("version", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("lease_owner", String(200)),
    Column("lease_expires_ms", BigInteger),
    # JSON of what the tool returned; NULL with ``result_sha256`` set when too large.
    Column("result", Text),
    Column("result_sha256", String(64)),
    Column("result_bytes", Integer),
    # JSON ``{"type", "message"}``, bounded and scrubbed (``privacy.scrub``).
    Column("error", Text),
    Column("reason_code", String(64)),
    Column("reason", String(1000)),
    _at("created_at"),
    _at("updated_at"),
    _at("started_at", nullable=True),
    _at("finished_at", nullable=True),
    # The OpenTelemetry trace the call was first seen in (32 hex digits), so that an
    # operator goes from the call to its trace; NULL without a sampled trace.
    Column("trace_id", String(32)),
    # The call's own span in that trace (16 hex digits): what a resume links to.
    Column("span_id", String(16)),
    # JSON list of the argument paths an approver edited (``ledger.edits``): the call
    # runs with arguments the agent did not send, and is told so. NULL: never edited.
    Column("edited", Text),
    UniqueConstraint("task_id", "call_id"),
    UniqueConstraint("task_id", "idem_key"),
    # A task's calls by state (resume, a task's recovery) and counted by state for a
    # page of tasks, from the index alone; ``UNIQUE (task_id, call_id)`` would find the
    # same rows but read each one from the table (measured slower: revision 0008).
    Index(None, "task_id", "state"),
    # Partial: only calls in ``SWEPT_STATES``. PostgreSQL's copy has the same predicate
    # (revision 0008); it is not spelled here because naming a dialect's keyword loads
    # that dialect, and a SQLite command must not load PostgreSQL's. Alembic compares no
    # predicate: tests/ledger/test_models_write_indexes.py reads both databases' instead.
    Index(None, "state", sqlite_where=text(SWEPT_WHERE)),
    # Partial: the inbox's calls in ``ref`` order (``WAITING_STATES``; revision 0015,
    # with PostgreSQL's copy of the predicate, unspelled here for the same reason).
    Index(None, "id", sqlite_where=text(WAITING_WHERE)),
)
"""One tool call and its side-effect state; see ``agent_gate.ledger.states``."""


AUDIT_EVENTS = Table(
    "audit_events",
    metadata,
    Column("id", ROW_ID, primary_key=True, autoincrement=True),
    _at("at"),
    Column("task_id", String(ID_LEN), nullable=False),
    Column("call_row_id", ROW_ID, ForeignKey("tool_calls.id", ondelete="RESTRICT")),
    Column("call_id", String(ID_LEN)),
    Column("event", String(64), nullable=False),
    Column("from_state", String(32)),
    Column("to_state", String(32)),
    Column("actor", String(200)),
    # Bounded JSON of ids, codes and hashes: never argument values.
    Column("detail", Text),
    # Position in the task's audit hash chain: 1, 2, 3... with no gaps per task.
    Column("seq", BigInteger, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    # SHA-256 over this entry's fields and ``prev_hash`` (``agent_gate.ledger.chain``).
    Column("hash", String(64), nullable=False),
    # One call's history in order (``call show``, the newest transition before a claim).
    # A task's entries are read through ``(task_id, seq)``: ids follow seq in a task.
    Index(None, "call_row_id", "id"),
    UniqueConstraint("task_id", "seq"),
)
"""Append-only history: every transition, and every time a call was seen again."""


AUDIT_HEADS = Table(
    "audit_heads",
    metadata,
    Column("task_id", String(ID_LEN), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
)
"""The last link of one task's audit hash chain, locked by every append to the task.

Appending reads the task's row under a row lock (``FOR UPDATE`` on PostgreSQL;
the database write lock on SQLite), links the new events to it and moves it on,
in the transaction that writes them. Two writers of one task therefore can never
link to the same predecessor, and writers of different tasks never wait for each
other. It also records how long the task's chain is, so that deleting its newest
entries is noticed.
"""


AUDIT_CHECKPOINTS = Table(
    "audit_checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    _at("at"),
    # How many task heads the root binds.
    Column("tasks", BigInteger, nullable=False),
    Column("root", String(64), nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    # On the checkpoint the upgrade to per-task chains wrote: the old global chain's
    # head (its length), so anchors exported before the upgrade are still recognised.
    Column("legacy_seq", BigInteger),
    Column("legacy_hash", String(64)),
    # ``audit_events.id`` of the old global chain's newest entry.
    Column("legacy_last_id", ROW_ID),
    # The Merkle tree over every entry in id order (revision 0010; None before it):
    # leaves, the id of the last one, root and frontier (hex, comma-separated).
    Column("tree_size", BigInteger),
    Column("tree_last_id", BigInteger),
    Column("tree_root", String(64)),
    Column("tree_frontier", Text),
    # How ``root`` and ``tasks`` bind the heads (revision 0018): None, the set of every
    # task's head; 2, only the heads that moved since the previous checkpoint
    # (``ledger.chain``).
    Column("heads_format", Integer),
    # The checkpoint signed as a C2SP tlog-checkpoint, when a key was given.
    Column("note", Text),
)
"""One checkpoint: a root hash over every task's head, linked to the previous one.

``id`` is the checkpoint's position (1, 2, 3... without gaps; two writers racing
for the same position collide on the key). Only the heads that changed since the
previous checkpoint are stored (``audit_checkpoint_heads``): the full set at
checkpoint N is every head stored at N or before, newest per task.
"""


AUDIT_CHECKPOINT_HEADS = Table(
    "audit_checkpoint_heads",
    metadata,
    Column("checkpoint_id", Integer, ForeignKey("audit_checkpoints.id", ondelete="RESTRICT"),
           primary_key=True),
    Column("task_id", String(ID_LEN), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
    Index(None, "task_id", "checkpoint_id"),
)
"""A task head a checkpoint binds that differs from the previous checkpoint's."""


APPROVALS = Table(
    "approvals",
    metadata,
    Column("id", ROW_ID, primary_key=True, autoincrement=True),
    Column("call_row_id", ROW_ID, ForeignKey("tool_calls.id", ondelete="RESTRICT"),
           nullable=False),
    Column("task_id", String(ID_LEN), nullable=False),
    Column("call_id", String(ID_LEN), nullable=False),
    # ``approved`` or ``denied``.
    Column("verdict", String(16), nullable=False),
    Column("args_hash", String(64), nullable=False),
    Column("policy_hash", String(80)),
    Column("decided_by", String(200), nullable=False),
    Column("reason", String(1000)),
    _at("decided_at"),
    Column("expires_ms", BigInteger),
    _at("consumed_at", nullable=True),
    Column("consumed_attempt", Integer),
    Index(None, "call_row_id", "id"),
)
"""A person's answer to a call that waits for approval.

An approval is bound to the call's argument hash, to the hash of the policy it was
given under and to an expiry; it is consumed (``consumed_at``) in the transaction
that moves the call to ``executing``, and only then. A denial is recorded here too.
"""


APPROVAL_GRANTS = Table(
    "approval_grants",
    metadata,
    Column("id", ROW_ID, primary_key=True, autoincrement=True),
    Column("task_id", String(ID_LEN), ForeignKey("tasks.id", ondelete="RESTRICT"),
           nullable=False),
    Column("tool", String(TOOL_NAME_LEN), nullable=False),
    Column("policy_hash", String(80), nullable=False),
    Column("option", String(64), nullable=False),
    Column("rule_ids", Text, nullable=False),
    Column("max_calls", Integer),
    Column("used_calls", Integer, nullable=False),
    Column("expires_ms", BigInteger),
    Column("approval_id", ROW_ID, ForeignKey("approvals.id", ondelete="RESTRICT"),
           nullable=False),
    Column("granted_by", String(200), nullable=False),
    _at("granted_at"),
    _at("revoked_at", nullable=True),
    Column("revoked_by", String(200)),
    Index(None, "task_id", "tool"),
)
"""An approval that covers more calls: of ``tool`` in ``task_id``, under the policy
``policy_hash`` only, until ``expires_ms`` (the database's clock) and for at most
``max_calls`` more calls, within the bounds of the policy's ``option``. A covered
call spends one with a conditional update in its own transaction
(``ledger.grants.spend``): two workers cannot both spend the last one."""

APPROVAL_GRANT_USES = Table(
    "approval_grant_uses",
    metadata,
    Column("grant_id", ROW_ID, ForeignKey("approval_grants.id", ondelete="RESTRICT"),
           primary_key=True),
    Column("call_row_id", ROW_ID, ForeignKey("tool_calls.id", ondelete="RESTRICT"),
           primary_key=True),
    _at("used_at"),
    Index(None, "call_row_id"),
)
"""Each call a grant authorized: what a re-checked claim of that call finds, so that
it is not sent to a person again, nor counted twice."""
APPROVAL_DEADLINES = Table(
    "approval_deadlines",
    metadata,
    Column("call_row_id", ROW_ID, ForeignKey("tool_calls.id", ondelete="RESTRICT"),
           primary_key=True),
    Column("task_id", String(ID_LEN), nullable=False),
    Column("call_id", String(ID_LEN), nullable=False),
    # The call's version when it started this wait: the deadline is this wait's only.
    Column("armed_version", Integer, nullable=False),
    # When it passes, by the database's clock (milliseconds since the epoch).
    Column("due_ms", BigInteger, nullable=False),
    # ``deny`` or ``escalate`` (``states.DeadlineEnd``), and the role escalated to.
    Column("then", String(16), nullable=False),
    Column("role", String(64)),
    Column("rule_id", String(64)),
    # ``armed`` until a sweeper acts: ``denied``, ``escalated``, or ``moot`` (the call
    # had moved on); ``fired_ms`` and ``fired_by`` say when and which sweeper.
    Column("outcome", String(16), nullable=False),
    Column("fired_ms", BigInteger),
    Column("fired_by", String(200)),
    # What a sweeper reads: the armed deadlines that passed, earliest first.
    Index(None, "outcome", "due_ms"),
)
"""The deadline of one call's wait for a person (an approve rule's ``approval:``).

Armed in the transaction that sends the call to a person (``states.Effects.
arms_deadline``), re-armed when it is sent again; acted on once, by whichever
sweeper's compare-and-set on ``outcome = 'armed'`` matches (``ledger.deadlines``).
"""

APPROVAL_EDITS = Table(
    "approval_edits",
    metadata,
    Column("id", ROW_ID, primary_key=True, autoincrement=True),
    Column("call_row_id", ROW_ID, ForeignKey("tool_calls.id", ondelete="RESTRICT"),
           nullable=False),
    Column("task_id", String(ID_LEN), nullable=False),
    Column("call_id", String(ID_LEN), nullable=False),
    # The approval the editor gave with the edit (bound to ``new_args_hash``).
    Column("approval_id", ROW_ID, ForeignKey("approvals.id", ondelete="RESTRICT")),
    Column("edited_by", String(200), nullable=False),
    # JSON list of the argument paths the edit changed.
    Column("fields", Text, nullable=False),
    Column("old_args_hash", String(64), nullable=False),
    Column("new_args_hash", String(64), nullable=False),
    # The version the edit replaced, as ``tool_calls`` held it: sealed fields as their
    # stand-ins in ``old_arguments``, whole only inside ``old_sealed_arguments``.
    Column("old_arguments", Text),
    Column("old_sealed_arguments", Text),
    _at("edited_at"),
    Index(None, "call_row_id", "id"),
)
"""One approver's edit of a waiting call: who, which fields, the hashes before and
after, and the arguments it replaced (never in clear where the policy seals them)."""


QUOTA_CHARGES = Table(
    "quota_charges",
    metadata,
    Column("id", ROW_ID, primary_key=True, autoincrement=True),
    Column("task_id", String(ID_LEN), ForeignKey("tasks.id", ondelete="RESTRICT"),
           nullable=False),
    Column("call_row_id", ROW_ID, ForeignKey("tool_calls.id", ondelete="RESTRICT"),
           nullable=False),
    Column("counter", String(300), nullable=False),
    Column("amount", String(64), nullable=False),
    _at("at"),
    UniqueConstraint("call_row_id", "counter"),
    Index(None, "task_id", "counter"),
)
"""What one authorized call added to one per-task counter of the policy's limits.

Charged in the transaction that authorizes the call: a call that reached
``authorized`` counts even if it later failed or is in doubt, because nobody can
prove it did not spend the budget; refunded (its rows deleted, ``quota.refund``)
only when it ends rejected or its write is found not applied. Amounts are decimal strings, summed
exactly in Python.
"""


OPERATORS = Table(
    "operators",
    metadata,
    Column("id", ROW_ID, primary_key=True, autoincrement=True),
    Column("name", String(200), unique=True, nullable=False),
    Column("token_hash", String(64), unique=True, nullable=False),
    Column("approve_tools", Text, nullable=False),
    Column("resolve_tools", Text, nullable=False),
    _at("created_at"),
)
"""A person ``agent-gate serve`` lets in, and the tools they may decide.

Only the SHA-256 of the token is kept: the token itself is printed once, when
the operator is added, and a copy of the database lets nobody in. The tool lists
are JSON arrays of names, ``["*"]`` for every tool.
"""


WEBHOOK_CURSORS = Table(
    "webhook_cursors",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    _at("updated_at"),
)
"""How far one webhook endpoint has been sent the audit trail (its last ``seq``).

The trail is the outbox: every entry commits with the transition it records. The
cursor moves only after the receiver acknowledged, so delivery is at least once.
"""


MCP_EVENTS = Table(
    "mcp_events",
    metadata,
    Column("seq", ROW_ID, primary_key=True, autoincrement=True),
    Column("event_id", String(64), nullable=False, unique=True),
    Column("session_id", String(64), nullable=False),
    Column("stream_id", String(ID_LEN), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("message", Text),
    Column("size", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Index(None, "session_id", "stream_id", "seq"),
    Index(None, "created_ms"),
)
"""What ``agent-gate mcp proxy --listen`` sent (and was asked) on each client
session's streams, so a client resumes a response with ``Last-Event-ID``, after a
restart too (``ledger.mcp_events``, ``integrations.mcp.events``).

``kind`` is ``session`` (one row per session: its ``initialize`` request, what a
restarted proxy re-adopts it from), ``request`` (a request the session sent, run
again when its stream is resumed in a process that did not see it) or ``event``
(an SSE event; ``message`` NULL for a priming event). ``event_id`` is random and
only ever looked up together with ``session_id``. Rows are pruned oldest first
past a total ``size`` and an age (``created_ms``, epoch milliseconds).
"""


AUDIT_PRUNED = Table(
    "audit_pruned",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    Column("task_id", String(ID_LEN), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    Column("leaf", String(64), nullable=False),
    Column("archive", String(64), nullable=False),
    UniqueConstraint("task_id", "seq"),
    Index(None, "archive", "id"),
)
"""What ``audit archive`` keeps of each ``audit_events`` row it pruned (``ledger.archive``):
no content, only the hashes the chains and the Merkle tree are recomputed over."""

AUDIT_SUBTREES = Table(
    "audit_subtrees",
    metadata,
    Column("start", BigInteger, primary_key=True, autoincrement=False),
    Column("level", Integer, nullable=False),
    Column("first_id", BigInteger, nullable=False, unique=True),
    Column("last_id", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
    Column("archive", String(64), nullable=False),
    Index(None, "archive", "start"),
)
"""The perfect subtrees of the Merkle tree that cover an archive batch's pruned leaves
(``ledger.subtrees``): ``2**level`` leaves from leaf ``start``, rows ``first_id`` to
``last_id``. A full ``audit verify`` reads these in place of the leaves."""

ARCHIVED_HEADS = Table(
    "archived_heads",
    metadata,
    Column("task_id", String(ID_LEN), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
    Column("archive", String(64), nullable=False),
)
"""Where each archived task's chain ended when its batch pruned it (``ledger.subtrees``):
a full ``audit verify`` links a re-used task and checks an archived task's head here,
never reading its pruned entries."""

AUDIT_PRUNED_HEADS = Table(
    "audit_pruned_heads",
    metadata,
    Column("checkpoint_id", Integer, primary_key=True, autoincrement=False),
    Column("task_id", String(ID_LEN), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
    Column("archive", String(64), nullable=False),
    Index(None, "archive"),
)
"""The heads checkpoints of format 2 bound for tasks an archive batch pruned, moved out of
``audit_checkpoint_heads`` (``ledger.subtrees``): what a deep ``audit verify`` reads to
recompute those checkpoints' roots; a full one reads the batch's record instead."""

ARCHIVED_CALLS = Table(
    "archived_calls",
    metadata,
    Column("task_id", String(ID_LEN), primary_key=True),
    Column("call_id", String(ID_LEN), primary_key=True),
    Column("idem_key", String(300), nullable=False),
    Column("record", Text, nullable=False),
    Column("archive", String(64), nullable=False),
    UniqueConstraint("task_id", "idem_key"),
)
"""The tombstone of each call ``audit archive`` pruned: intake answers a re-delivery from
it (``record``, the row without its arguments and result) and never runs the call again."""
