"""The SQLAlchemy internals the fast path relies on are all still there.

If this fails after a SQLAlchemy upgrade, fix ``agent_gate/ledger/backend/_sa_private.py``
(the only module that touches them) or run with ``AGENT_GATE_LEDGER_BACKEND=core``.
"""

from __future__ import annotations

import sqlalchemy

from agent_gate.ledger.backend._sa_private import problems


def test_the_sqlalchemy_internals_the_fast_path_uses_still_hold() -> None:
    found = problems()
    assert not found, (
        f"SQLAlchemy {sqlalchemy.__version__} changed what "
        "agent_gate/ledger/backend/_sa_private.py "
        "relies on: " + "; ".join(found) + ". Fix that module (nothing else touches "
        "SQLAlchemy internals) or use the Core storage path (AGENT_GATE_LEDGER_BACKEND=core)."
    )
