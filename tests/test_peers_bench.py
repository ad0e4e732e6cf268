"""Section 6 of the benchmarks, run small: each installed peer runs each call exactly once.

The benchmark's numbers are measurements, never asserted; what is asserted here
is what its table claims besides them: that every candidate it times ran every
call once (read from the tool's own append-only file, after finished calls were
handed to each framework again), that a peer it cannot run is named as skipped
rather than dropped, and that its fsync counter counts (the two-commit floor
syncs exactly twice a call in WAL with synchronous=FULL).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = str(Path(__file__).resolve().parent / "benchmarks")
sys.path.insert(0, BENCHMARKS)  # peers_bench imports its neighbours (harness) by name
try:
    import peers_bench
finally:
    sys.path.remove(BENCHMARKS)

pytestmark = pytest.mark.slow


def test_every_installed_peer_runs_every_call_exactly_once() -> None:
    section = peers_bench.run_section(quick=True, stores=(peers_bench.SQLITE,))

    rows = {row["candidate"]: row for row in section["stores"]["sqlite"]["rows"]}
    calls = section["calls_per_round"] * (section["rounds"] + 1)  # the warm batch too
    for name, row in rows.items():
        assert row["issued"] == calls, name
        assert (row["ran_once"], row["ran_more"], row["never_ran"], row["strays"]) == (
            calls, 0, 0, 0,
        ), name  # fmt: skip
        assert row["exactly_once"], name
        assert row["replayed_without_rerun"] is (None if name == "floor" else True), name
    assert {"agent-gate", "floor"} <= set(rows)
    # Every SQLite-side peer is either measured or named as skipped, with what it lacks.
    for peer in peers_bench.PEERS:
        if peer.name not in rows:
            assert any(note.startswith(f"{peer.name} on sqlite:") for note in section["skipped"])
    assert peers_bench.targets(section)[0][1]
    if shutil.which("strace"):
        assert rows["floor"]["fsyncs_per_call"] == 2.0
        if "powertools" in rows:  # one synced AOF write for the INPROGRESS record, one after
            assert rows["powertools"]["fsyncs_per_call"] == 2.0
    table = "\n".join(peers_bench.markdown(section))
    assert f"yes, {calls} of {calls}" in table
