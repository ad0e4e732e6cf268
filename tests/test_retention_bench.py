"""The retention benchmark, run tiny: what its table compares is what it claims to be.

Its timings are measurements, never asserted. Asserted here: the archived ledger holds
90% of its calls as tombstones and pruned leaves and the new one only the live 10%,
both verify (the benchmark's verify rows assert it on every round), and every row
of the table is measured on both.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select

from agent_gate.evidence.note import SignerKey
from agent_gate.ledger.models import ARCHIVED_CALLS, AUDIT_PRUNED, TOOL_CALLS

BENCHMARKS = str(Path(__file__).resolve().parent / "benchmarks")
sys.path.insert(0, BENCHMARKS)  # retention_bench imports its neighbour (harness) by name
try:
    import retention_bench
finally:
    sys.path.remove(BENCHMARKS)


def _count(url: str, table: object) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(table)).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.slow
def test_the_archived_and_the_new_ledger_hold_what_the_table_says(tmp_path: Path) -> None:
    total = 200
    signer = SignerKey.generate("bench.example/retention")
    archived, new = tmp_path / "archived.db", tmp_path / "new.db"
    retention_bench.build(archived, 0, total)
    assert retention_bench.prune_oldest(f"sqlite:///{archived}", total, signer) == 180
    retention_bench.build(new, 180, 20)
    urls = {"archived": f"sqlite:///{archived}", "new": f"sqlite:///{new}"}
    assert _count(urls["archived"], ARCHIVED_CALLS) == 180
    assert _count(urls["archived"], AUDIT_PRUNED) == 180 * 4 + 18  # + each task_created
    assert _count(urls["archived"], TOOL_CALLS) == _count(urls["new"], TOOL_CALLS) == 20
    results = retention_bench.measure(urls, "task-0000019", "call-0000191", signer,
                                      rounds=1, calls=2)
    assert [label.split(":")[0] for label, _ in results] == [
        "insert", "listing", "full `audit verify`", "`audit verify` from the newest checkpoint"]
    for _, row in results:
        assert set(row["cpu_s"]) == set(row["wall_s"]) == {"archived", "new"}
        assert row["ratio"] > 0
    # The insert rounds went through the gate on both (the warm-up round included).
    assert _count(urls["archived"], TOOL_CALLS) == _count(urls["new"], TOOL_CALLS) == 20 + 2 * 3
