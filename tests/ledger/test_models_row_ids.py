"""Row ids past 2**31 on PostgreSQL: a busy ledger writes five audit entries a call, so
a 32-bit ``audit_events.id`` runs out after about 430 million calls (weeks, for a
fleet at a few hundred calls a second), and every write after that fails.

SQLite's row ids are 64-bit whatever the column says; PostgreSQL's ``SERIAL`` columns
were ``integer`` with ``integer`` sequences until revision 0016. Here every sequence of
the ledger starts past 2**31, and a call goes the whole way: recorded, sent to a
person, approved, run, charged, audited, verified.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from shared_fixtures import EXAMPLE_POLICY, effect_lines
from sqlalchemy import create_engine, text

from agent_gate import CallState, Gate
from agent_gate.policy import Principal

pytestmark = [pytest.mark.backends("postgresql"), pytest.mark.usefixtures("seal_key_env")]

PAST_32_BITS = 2**31 + 5


def _serial_sequences_past_32_bits(url: str) -> list[str]:
    """Move every serial sequence of the ledger's schema past 2**31; their names."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            owned = conn.execute(text(
                "SELECT t.relname, a.attname FROM pg_class s"
                " JOIN pg_depend d ON d.objid = s.oid AND d.deptype IN ('a', 'i')"
                " JOIN pg_class t ON t.oid = d.refobjid"
                " JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid"
                " WHERE s.relkind = 'S' AND s.relnamespace = current_schema()::regnamespace"
            )).all()
            for table, column in owned:
                conn.execute(text("SELECT setval(pg_get_serial_sequence(:t, :c), :v)"),
                             {"t": table, "c": column, "v": PAST_32_BITS})
    finally:
        engine.dispose()
    return sorted(f"{table}.{column}" for table, column in owned)


def test_a_call_goes_the_whole_way_with_ids_past_32_bits(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    moved = _serial_sequences_past_32_bits(db_url)
    assert {"tool_calls.id", "audit_events.id", "approvals.id"} <= set(moved)
    principal = Principal(id="u1", roles={"support"})
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY, principal=principal) as g:
        mail = {"call_id": "m1", "name": "send_email",
                "arguments": {"to": "bob@gmail.com", "subject": "Invoice", "body": "Hi."}}
        assert g.execute("t", mail).state is CallState.AWAITING_APPROVAL
        g.approve("m1", by="alice")
        ran = g.execute("t", mail)
        assert ran.state is CallState.SUCCEEDED and ran.ran
        refund = {"call_id": "r1", "name": "refund",
                  "arguments": {"order_id": "ORD-123456", "amount": 20}}
        assert g.execute("t", refund).state is CallState.SUCCEEDED
        rows = {c.call_id: c.row_id for c in g.ledger.calls("t")}
        assert min(rows.values()) > 2**31
        entries = list(g.ledger.audit("t"))
        assert entries and all(e.id > 2**31 for e in entries)
        assert g.ledger.verify_audit().ok
    assert len(effect_lines(effects_file)) == 2  # each ran once
