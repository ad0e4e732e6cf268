"""The ledger: tool-call rows changed only by committed compare-and-set transitions.

Each method here is one short write transaction (or one read). A transition names
the row *and the state and version the caller last saw*; if another process moved
the row in between, nothing is written and the caller gets the row as it now is
(``Transition.won`` is False). The arrows themselves come from
``agent_gate.ledger.states``.

``Ledger`` is the facade: the row and value types live in ``records``, the read
queries in ``reads``, the insert of a new call in ``intake``, the write flows over
the one compare-and-set builder in ``flows``, and what a decision may read inside
a transaction in ``reads``; callers import each from its own module.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Unpack

from sqlalchemy import Engine, update

from agent_gate._lazy import deferred
from agent_gate.ledger import backend
from agent_gate.ledger.backend import begin_read, create_ledger_engine, reading
from agent_gate.ledger.backend.dialect import DEFAULT_BUSY_TIMEOUT, resolve_url
from agent_gate.ledger.ledger_file import require_ledger_file
from agent_gate.ledger.migrate import ensure_schema
from agent_gate.ledger.records import TASKS

if TYPE_CHECKING:
    from agent_gate.ledger import (
        answers,
        approvals,
        audit,
        deadlines,
        flows,
        grants,
        intake,
        quota,
        reads,
    )
    from agent_gate.ledger.deadlines import WaitDeadline
    from agent_gate.ledger.edits import EditRecord, NewVersion
    from agent_gate.ledger.flows import Decide
    from agent_gate.ledger.grants import GrantRecord
    from agent_gate.ledger.reads import LedgerTxn
    from agent_gate.ledger.records import (
        CallRecord,
        NewCall,
        Produced,
        Ruling,
        TaskRecord,
        TaskSummary,
        Transition,
        TxnConnection,
    )
    from agent_gate.ledger.states import CallState, Event
    from agent_gate.ledger.sweep import SweepReport
    from agent_gate.ledger.txn import Txn
    from agent_gate.ledger.views import details, pages
    from agent_gate.ledger.views.details import CallDetails
    from agent_gate.privacy.results import StoredResult

# Opening a ledger and reading it needs the engine, the schema check and the rows;
# each of these modules is imported by the first method that uses it, so that
# ``agent-gate tasks`` loads no write path and ``agent-gate approve`` no intake.
deferred({
    "answers": "agent_gate.ledger.answers",
    "approvals": "agent_gate.ledger.approvals",
    "audit": "agent_gate.ledger.audit",
    "deadlines": "agent_gate.ledger.deadlines",
    "details": "agent_gate.ledger.views.details",
    "flows": "agent_gate.ledger.flows",
    "grants": "agent_gate.ledger.grants",
    "intake": "agent_gate.ledger.intake",
    "pages": "agent_gate.ledger.views.pages",
    "quota": "agent_gate.ledger.quota",
    "reads": "agent_gate.ledger.reads",
}, globals())

__all__ = ["Ledger"]

_KNOWN_TASKS_MAX = 4096
"""Task contexts a ``Ledger`` remembers (``record``); forgetting costs a statement."""
_KNOWN_CALLS_MAX = 65536
"""Calls a ``Ledger`` remembers recording (``record``); forgetting one costs its
replay the backend's guess (on PostgreSQL two round trips), never a wrong answer."""


def _remember(known: set[Any], item: Any, limit: int) -> None:
    """Add ``item`` to a bounded memory, forgotten whole when full: a miss costs a
    statement or a guess, never a wrong answer."""
    if item not in known:
        if len(known) >= limit:
            known.clear()
        known.add(item)


class Ledger:
    """Durable record of every tool call; the only writer of ``tool_calls``."""

    def __init__(
        self,
        url: str | None = None,
        *,
        auto_upgrade: bool | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        engine: Engine | None = None,
        create: bool = False,
        storage: str | None = None,
    ) -> None:
        """Open the ledger at ``url`` (default ``$AGENT_GATE_DB``, else the embedded file).

        A SQLite file that is not there is created only with ``create=True``: a
        ledger that went missing (deleted, a wrong path, another working directory)
        is not a new one, and starting over would run every call it recorded again
        (``LedgerMissing`` says so). PostgreSQL is never created here.

        ``storage``: ``"core"`` (plain SQLAlchemy Core, the reference) or ``"fast"``
        (statements on the driver, kept SQLite connections); default
        ``$AGENT_GATE_LEDGER_BACKEND``, else fast unless ``AGENT_GATE_PURE_PYTHON``
        (``agent_gate.ledger.backend``).
        """
        self.url = resolve_url(url) if engine is None else str(engine.url)
        made = engine is None
        if engine is None:
            require_ledger_file(self.url, create=create)
            engine = create_ledger_engine(
                self.url, busy_timeout=busy_timeout, create=create, storage=storage
            )
        elif storage is not None:
            backend.choose(engine.dialect, storage)
        self.engine = engine
        backend.register(engine)
        # The connections a backend keeps between transactions stay checked out, which
        # keeps their engine alive: a ledger nobody closed gives them back when it is
        # collected.
        self._release = weakref.finalize(self, backend.release, self.engine)
        self._known_tasks: set[tuple[str, str | None, str | None]] = set()
        """(task, principal, scope) this ledger has committed a call under (``record``)."""
        self._known_calls: set[tuple[str, str]] = set()
        """(task, call id) this ledger has committed or found recorded (``record``)."""
        try:
            ensure_schema(self.engine, auto_upgrade=auto_upgrade)
        except BaseException:
            # Nobody will hold a ledger that refused to open: an engine made here is
            # closed now, not left for the collector to find with a session still open.
            if made:
                self.close()
            raise

    def close(self) -> None:
        self._release()
        self.engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reads

    def get(self, task_id: str, call_id: str) -> CallRecord | None:
        with reading(self.engine) as txn:
            return txn.read_call(task_id=task_id, call_id=call_id)

    def get_by_key(self, task_id: str, idem_key: str) -> CallRecord | None:
        with reading(self.engine) as txn:
            return txn.read_call(task_id=task_id, idem_key=idem_key)

    def get_row(self, row_id: int) -> CallRecord | None:
        with reading(self.engine) as txn:
            return txn.read_call(id=row_id)

    def find(self, call_id: str, task_id: str | None = None) -> list[CallRecord]:
        """Rows with this provider call id, in any task unless one is named."""
        with begin_read(self.engine) as conn:
            return reads.find(conn, call_id, task_id)

    def calls(
        self, task_id: str | None = None, states: Iterable[CallState] | None = None
    ) -> list[CallRecord]:
        with begin_read(self.engine) as conn:
            return reads.calls(conn, task_id, states)

    def task(self, task_id: str) -> TaskRecord | None:
        with begin_read(self.engine) as conn:
            return reads.task(conn, task_id)

    def tasks(self) -> list[TaskSummary]:
        """Every task with the number of its calls in each state, newest first."""
        with begin_read(self.engine) as conn:
            return reads.tasks(conn)

    def audit(
        self,
        task_id: str | None = None,
        call_row_id: int | None = None,
        call_id: str | None = None,
    ) -> list[audit.AuditRecord]:
        with begin_read(self.engine) as conn:
            return audit.read(conn, task_id=task_id, call_row_id=call_row_id, call_id=call_id)

    def audit_page(self, query: pages.AuditQuery) -> list[audit.AuditRecord]:
        """One page of the trail, each entry with its tool (``pages.audit_page``)."""
        with begin_read(self.engine) as conn:
            return pages.audit_page(conn, query)

    def tasks_page(self, query: pages.TaskQuery) -> list[TaskSummary]:
        """One page of tasks, newest activity first (``pages.tasks_page``)."""
        with begin_read(self.engine) as conn:
            return pages.tasks_page(conn, query)

    def call_details(
        self, task_id: str, call_id: str, *, max_shown: int | None = None
    ) -> CallDetails | None:
        """Everything recorded about one call, in one snapshot (``details.CallDetails``);
        a stored result's text is cut after ``max_shown`` characters (None:
        ``details.DEFAULT_MAX_SHOWN``)."""
        if max_shown is None:
            max_shown = details.DEFAULT_MAX_SHOWN
        with reading(self.engine) as open_txn:
            return details.read_details(open_txn, task_id, call_id, max_shown=max_shown)

    def verify_audit(self, anchor: tuple[int, str] | None = None, *,
                     deep: bool = False) -> audit.ChainReport:
        """Check the audit hash chain in one snapshot (see ``audit.verify``; ``deep``
        also checks every archived entry's kept hashes)."""
        with begin_read(self.engine) as conn:
            return audit.verify(conn, anchor=anchor, deep=deep)

    def approval(self, rec: CallRecord) -> approvals.ApprovalRecord | None:
        """The newest approval or denial given for the call."""
        with reading(self.engine) as open_txn:
            return approvals.latest(open_txn, rec.row_id)

    def deadline(self, rec: CallRecord) -> WaitDeadline | None:
        """The deadline of the call's current wait for a person, if its rule set one."""
        with reading(self.engine) as open_txn:
            return deadlines.of_call(open_txn, rec)

    def sweep_deadlines(self, *, by: str, limit: int = 100) -> SweepReport:
        """One sweeper pass: act on at most ``limit`` passed deadlines (``ledger.sweep``:
        deny, or escalate), each once, whatever other sweepers run."""
        from agent_gate.ledger.sweep import sweep

        return sweep(self.engine, by=by, limit=limit)

    def answered(
        self, row_id: int
    ) -> tuple[CallRecord | None, approvals.ApprovalRecord | None]:
        """A call's row and the newest answer given for it, in one snapshot: read in
        two, an answer committed between them looked given while the row still
        waited (a denial with the call not yet rejected)."""
        with reading(self.engine) as open_txn:
            return open_txn.read_call(id=row_id), approvals.latest(open_txn, row_id)

    def usage(self, task_id: str) -> dict[str, Decimal]:
        """Every quota counter the task has charged, with its total."""
        with begin_read(self.engine) as conn:
            return quota.charges_of(conn, task_id)

    @contextmanager
    def reading(self) -> Iterator[LedgerTxn]:
        """One read-only snapshot, for a decision that is shown but not applied (the
        same questions a decision inside ``authorize`` may ask, ``LedgerTxn``)."""
        with reading(self.engine) as open_txn:
            yield reads.LedgerTxn(open_txn)

    # ----------------------------------------------------------------- writes

    @staticmethod
    def lock_task(txn: Txn, task_id: str) -> None:
        """Serialize the writers of one task until the transaction ends (``Txn.lock_task``)."""
        txn.lock_task(task_id)

    def ensure_task(self, task_id: str, provider: str | None = None) -> None:
        with flows.write(self.engine) as open_txn:
            intake.ensure_task(open_txn, task_id, provider)

    def record(
        self,
        new: NewCall,
        *,
        provider: str | None = None,
        actor: str | None = None,
        decide: Callable[[LedgerTxn, CallRecord], Ruling | None] | None = None,
        lock: bool = False,
    ) -> tuple[CallRecord, bool]:
        """Insert the call as ``received`` unless its call id or key is already there.

        Returns the row that holds the call id, or else the row that holds the key
        (another call id with the same dedupe key), and whether this call inserted it.

        With ``decide``, a call this inserts is also decided in the same transaction
        (as ``authorize`` would, one commit instead of two): ``decide`` gets the new
        row and returns the ruling to apply, or None to leave it ``received``. The
        audit trail still shows ``received`` then the decision. ``lock`` takes the
        task lock first (before the insert, the order every writer keeps), for a
        ``decide`` that reads the task's quota usage.
        """
        context = (new.task_id, new.principal, new.scope)
        call = (new.task_id, new.call_id)
        result = intake.record(
            self.engine, new, provider=provider, actor=actor, decide=decide, lock=lock,
            task_known=context in self._known_tasks, call_known=call in self._known_calls,
        )
        # After the commit: the task exists bound to this principal and scope, so its
        # next calls skip ``ensure_task`` (a task row is never deleted, its principal and
        # scope never change once set, and one not given matches anything); the call is
        # there, so seen again it is read first (``intake.record``).
        _remember(self._known_tasks, context, _KNOWN_TASKS_MAX)
        _remember(self._known_calls, call, _KNOWN_CALLS_MAX)
        return result

    def transition(
        self,
        rec: CallRecord,
        event: Event,
        *,
        within: flows.Within | None = None,
        audited_only: bool = False,
        **step: Unpack[flows.Step],
    ) -> Transition:
        """Apply ``event`` to ``rec`` iff the row is still at ``rec.state``/``rec.version``.

        ``guard`` adds conditions (lease owner, lease expired) that must also still
        hold. The audit event is written in the same transaction, only if it applied.
        ``within`` runs in that transaction too, after the update applied and with
        the updated row: bookkeeping that must commit with the transition or not at
        all. If it raises, nothing commits. ``audited_only``: refuse (``won=False``) a
        row whose state its audit trail does not back (``flows.refuse_unaudited``).
        """
        return flows.transition(self.engine, rec, event, within=within,
                                audited_only=audited_only, **step)

    def authorize(
        self, rec: CallRecord, decide: Decide, *, actor: str | None = None
    ) -> tuple[Transition, Ruling | None]:
        """Decide a ``received`` call and apply the decision in one transaction.

        The task is locked first, so ``decide`` may read the task's quota usage and
        nobody can charge the task between that read and this commit. An ``allow``
        commits the ruling's quota charges with the transition. Returns the
        transition and the ruling (None when the row had moved on: not decided here).
        """
        return flows.authorize(self.engine, rec, decide, actor=actor)

    def claim_approved(
        self, rec: CallRecord, *, owner: str, lease_ms: int, decide: Decide
    ) -> tuple[Transition, Ruling | None]:
        """Use an approval: ``awaiting_approval -> authorized -> executing`` at once.

        In one transaction, with the task locked: ``decide`` checks the approval
        against the arguments, the policy and the clock and re-checks the quotas with
        the task's usage now; then its ruling is applied. ``APPROVE`` consumes the
        approval, charges the quotas and commits ``executing`` leased to ``owner``
        (so an approval is used by exactly the attempt that runs); ``DENY`` rejects
        the call (a quota ran out meanwhile); ``None`` changes nothing. A process
        that lost the race for the row gets ``won=False`` and nothing is consumed.
        """
        return flows.claim_approved(
            self.engine, rec, owner=owner, lease_ms=lease_ms, decide=decide
        )

    def claim_rechecked(
        self, rec: CallRecord, *, owner: str, lease_ms: int, decide: Decide
    ) -> tuple[Transition, Ruling | None]:
        """``authorized -> executing`` for a call this gate did not just decide.

        In one transaction, with the task locked: ``decide`` re-checks the row as it
        is now (its arguments against ``args_hash``, the claiming gate's policy with
        the task's usage now) and its ruling is applied: ``CLAIM`` commits
        ``executing`` leased to ``owner`` (with the ruling's columns, e.g. the policy
        that allowed it now); ``REJECT`` / ``REQUIRE_APPROVAL`` move the call there,
        audited with the ruling's reason; ``None`` changes nothing.
        """
        return flows.claim_rechecked(
            self.engine, rec, owner=owner, lease_ms=lease_ms, decide=decide
        )

    def approve(
        self,
        rec: CallRecord,
        *,
        by: str,
        reason: str | None = None,
        expires_ms: int | None = None,
        ttl_ms: int | None = None,
        policy_hash: str | None = None,
        args_hash: str | None = None,
        grant: answers.GrantTerms | None = None,
    ) -> tuple[approvals.ApprovalRecord, bool]:
        """Record a person's approval of a call that waits for one.

        Bound to the call's argument hash, to ``policy_hash`` (default: the hash of
        the policy that asked for the approval) and to an expiry: ``ttl_ms`` after
        the database's clock now (as leases are measured; ``approvals.ttl_problem``
        bounds it), or the absolute ``expires_ms``; neither: no expiry. The call stays
        ``awaiting_approval`` until a gate consumes the approval. Returns the
        approval that stands and whether this call created it (an unused, unexpired
        approval under the same policy is returned as it is). ``args_hash``: the hash
        of the arguments the person was shown; another one than the row's now is
        ``AnswerMismatch``, audited as ``answer_refused`` (None: not compared).
        ``grant``: a grant of those terms comes with it (``ledger.grants``).
        """
        return answers.approve(
            self.engine, rec, by=by, reason=reason, expires_ms=expires_ms, ttl_ms=ttl_ms,
            policy_hash=policy_hash, args_hash=args_hash, grant=grant,
        )

    def edit_and_approve(
        self, rec: CallRecord, new: NewVersion, *, by: str, reason: str | None = None,
        ttl_ms: int | None = None, policy_hash: str | None = None,
        shown_hash: str | None = None,
    ) -> tuple[approvals.ApprovalRecord, CallRecord]:
        """An approver's edited version of a waiting call and their approval of it, one
        commit (``ledger.edits``): the row holds ``new``, the old version is kept."""
        from agent_gate.ledger.edits import edit_and_approve

        return edit_and_approve(self.engine, rec, new, by=by, reason=reason, ttl_ms=ttl_ms,
                                policy_hash=policy_hash, shown_hash=shown_hash)

    def edits(self, rec: CallRecord) -> tuple[EditRecord, ...]:
        """The approvers' edits of ``rec``, oldest first (the first names the arguments
        the agent sent: ``old_args_hash``)."""
        from agent_gate.ledger.edits import edits_of

        with reading(self.engine) as txn:
            return edits_of(txn.conn, rec.row_id)

    def deny(self, rec: CallRecord, *, by: str, reason: str | None = None,
             args_hash: str | None = None, quorum: int = 1) -> Transition:
        """A person denies a waiting call: ``awaiting_approval -> rejected``
        (``args_hash`` as for ``approve``; ``quorum`` > 1: only once that many
        distinct people denied it, ``answers.deny``)."""
        return answers.deny(self.engine, rec, by=by, reason=reason, args_hash=args_hash,
                            quorum=quorum)

    def grants(self, *, task_id: str | None = None, active: bool = False) -> list[GrantRecord]:
        """Grants, newest first (``ledger.grants``)."""
        return grants.listed(self.engine, task_id=task_id, active=active)

    def revoke_grant(self, grant_id: int, *, by: str, reason: str | None = None) -> GrantRecord:
        """End a grant now, audited under ``by``."""
        return grants.revoke(self.engine, grant_id, by=by, reason=reason)

    def answers(self, rec: CallRecord) -> list[approvals.ApprovalRecord]:
        """Every answer given for the call, oldest first."""
        with self.reading() as txn:
            return txn.answers(rec.row_id)

    def resolve(
        self,
        rec: CallRecord,
        event: Event,
        *,
        actor: str,
        code: str,
        reason: str,
        result: StoredResult | None = None,
        error: Mapping[str, Any] | None = None,
        args_hash: str | None = None,
    ) -> Transition:
        """A person settles a call in doubt (a SETTLE_* arrow, or RETRY), only while its
        arguments hash to ``args_hash`` (as for ``approve``; None: not compared)."""
        return flows.resolve(
            self.engine, rec, event, actor=actor, code=code, reason=reason, result=result,
            error=error, args_hash=args_hash,
        )

    def claim(
        self,
        rec: CallRecord,
        *,
        owner: str,
        lease_ms: int,
        within: Callable[[Txn, CallRecord], None] | None = None,
        trail_checked: bool = True,
    ) -> Transition:
        """``authorized -> executing``: a new attempt, leased to ``owner``.

        ``within`` as for ``transition``: e.g. consuming an approval, so that an
        approval is used by exactly the attempt that commits ``executing``. A row
        whose ``authorized`` its audit trail does not back (set by a raw ``UPDATE``)
        is not claimed: ``won=False``, the row keeps its state with reason
        ``state_not_in_audit``, and the refusal is audited (``flows.refuse_unaudited``).
        ``trail_checked=False`` skips that read for the caller that itself committed
        this very version (and its audit entry) a moment ago: the compare-and-set on
        the version is then the whole check, and the hot path keeps one statement.
        """
        return flows.claim(
            self.engine, rec, owner=owner, lease_ms=lease_ms, within=within,
            trail_checked=trail_checked,
        )

    def renew(self, rec: CallRecord, *, owner: str, lease_ms: int) -> bool:
        """Push the lease expiry out while the tool runs; not a transition.

        Matches on the claimed version, so a renewal can never revive a call that
        was judged lost in the meantime.
        """
        return flows.renew(self.engine, rec, owner=owner, lease_ms=lease_ms)

    def finish(
        self,
        rec: CallRecord,
        event: Event,
        *,
        actor: str | None,
        result: StoredResult | None = None,
        error: Mapping[str, Any] | None = None,
        code: str | None = None,
        reason: str | None = None,
        lease_owner: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> Transition:
        """Any transition that stores an outcome: SUCCEED, FAIL, LOSE, SETTLE_*.

        With ``lease_owner``, it applies only while that owner still holds the lease:
        the worker that ran the tool reports, nobody else in its name.
        """
        return flows.finish(
            self.engine, rec, event, actor=actor, result=result, error=error, code=code,
            reason=reason, lease_owner=lease_owner, detail=detail,
        )

    def finish_with(
        self, rec: CallRecord, work: Callable[[TxnConnection], Produced], *, lease_owner: str,
        conn: TxnConnection | None = None,
    ) -> Transition:
        """Run ``work`` (a transactional tool) inside the transaction that commits its
        outcome: its writes on the connection it gets and the outcome commit together,
        or neither (``lease_owner`` must still hold the call). ``conn``: that
        transaction is the caller's own, on this ledger's database, committed by it."""
        return flows.finish_with(self.engine, rec, work, lease_owner=lease_owner, conn=conn)

    def lose_if_abandoned(
        self, rec: CallRecord, *, actor: str, expired_only: bool, code: str, reason: str
    ) -> Transition:
        """``executing -> in_doubt`` for a call whose owner is gone.

        The guard re-checks, inside the update, that the same owner still holds it
        and (when judged by time) that the lease is still expired, so a lease renewed
        a moment ago is never stolen.
        """
        return flows.lose_if_abandoned(
            self.engine, rec, actor=actor, expired_only=expired_only, code=code, reason=reason
        )

    def note(
        self,
        rec: CallRecord,
        event: str,
        *,
        actor: str | None = None,
        call_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """An audit-only event: the call was seen again, conflicted, was reported."""
        with flows.write(self.engine) as open_txn:
            audit.append(
                open_txn, task_id=rec.task_id, call_row_id=rec.row_id or None,  # 0: archived
                call_id=call_id or rec.call_id, event=event, from_state=rec.state.value,
                to_state=rec.state.value, actor=actor, detail=detail,
            )

    def record_terminal(self, task_id: str, terminal: str, reason: str | None = None) -> None:
        """Remember how the task's latest response ended, for operators."""
        now = datetime.now(UTC)
        with flows.write(self.engine) as open_txn:
            intake.ensure_task(open_txn, task_id, None)
            open_txn.execute(
                update(TASKS)
                .where(TASKS.c.id == task_id)
                .values(terminal=terminal, terminal_reason=reason, updated_at=now)
            )
            audit.append(
                open_txn, task_id=task_id, event="response_ended",
                detail={"terminal": terminal, **({"reason": reason} if reason else {})}, at=now,
            )
