"""``LedgerTxn``: what a decision inside a ledger transaction may read."""

from __future__ import annotations

from decimal import Decimal

from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.reads import LedgerTxn
from agent_gate.ledger.records import Ruling


def _new(call_id: str, *, principal: str | None = None, scope: str | None = None) -> NewCall:
    return NewCall(
        task_id="t", call_id=call_id, idem_key=f"call:{call_id}", tool="pay", effect="write",
        idempotency="none", args_hash="h", arguments={"n": 1}, principal=principal,
        scope=scope,
    )


def test_a_decision_reads_the_task_context_usage_and_latest_approval(db_url: str) -> None:
    seen: list[tuple[object, ...]] = []

    def decide(txn: LedgerTxn, rec: object) -> Ruling:
        assert isinstance(txn, LedgerTxn)
        seen.append((txn.task_context("t"), txn.usage("t", ["spend", "calls"])))
        return Ruling(Event.ALLOW, "allowed", charges={"spend": Decimal("2.5")})

    with Ledger(db_url) as ledger:
        first, _ = ledger.record(_new("c1", principal='{"id":"ann"}', scope='{"s":1}'))
        ledger.authorize(first, decide)
        second, _ = ledger.record(_new("c2"))
        tr, _ = ledger.authorize(second, decide)
        assert tr.won
        assert seen[0] == (('{"id":"ann"}', '{"s":1}'), {"calls": 0, "spend": 0})
        assert seen[1][1] == {"calls": 0, "spend": Decimal("2.5")}
        with ledger.reading() as txn:
            assert txn.task_context("missing") == (None, None)
            # The call's own charges left out, as a claim re-check counts them.
            assert txn.usage("t", ["spend"], besides=second.row_id) == {"spend": Decimal("2.5")}
            assert txn.usage("t", ["spend"]) == {"spend": Decimal("5.0")}
            assert txn.latest_approval(first.row_id) is None


def test_latest_approval_is_the_newest_answer(db_url: str) -> None:
    with Ledger(db_url) as ledger:
        rec, _ = ledger.record(_new("c1"))
        rec = ledger.transition(rec, Event.REQUIRE_APPROVAL, code="awaiting_approval").record
        given, created = ledger.approve(rec, by="bob")
        assert created
        with ledger.reading() as txn:
            latest = txn.latest_approval(rec.row_id)
        assert latest is not None and latest.id == given.id and latest.decided_by == "bob"
