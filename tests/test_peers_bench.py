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


@pytest.mark.slow
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


def test_the_run_count_sees_a_call_run_twice_or_never(tmp_path: Path) -> None:
    """What makes "ran once" mean something: the count is of the tool's own file."""

    class Ran:
        issued = 4
        runs = tmp_path / "runs"

    Ran.runs.write_text("0\n1\n1\n3\n")  # 1 twice, 2 never
    once = peers_bench._once(Ran())  # type: ignore[arg-type]
    assert once == {"issued": 4, "ran_once": 2, "ran_more": 1, "never_ran": 1, "strays": 0}


def test_fsyncs_count_only_between_the_marks(tmp_path: Path) -> None:
    trace = tmp_path / "strace"
    trace.write_text(
        "11 fdatasync(3) = 0\n"  # setup: not counted
        '11 chdir(".") = 0\n'
        "11 fdatasync(3) = 0\n"
        "12 fsync(5 <unfinished ...>\n"
        "12 <... fsync resumed>) = 0\n"  # the same call, finished: counted once
        '11 sendto(4, "P", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'
        '11 chdir(".") = 0\n'
        "11 fdatasync(3) = 0\n"  # teardown: not counted
    )
    assert peers_bench._between_marks(trace, peers_bench._SYNC) == 2
    assert peers_bench._between_marks(trace, peers_bench._SEND) == 1


def test_round_trips_are_sends_answered_by_a_receive(tmp_path: Path) -> None:
    """A pipelined client's several sends before one answer are one round trip; a
    receive that found nothing (EAGAIN) or a thread's own sends are not another's."""
    trace = tmp_path / "strace"
    trace.write_text(
        '11 sendto(4, "Q", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'  # setup: not counted
        '11 recvfrom(4, "C", 16384, 0, NULL, NULL) = 1\n'
        '11 chdir(".") = 0\n'
        '11 sendto(4, "B", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'  # one pipeline: 3 sends
        '11 sendto(4, "E", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'
        "11 recvfrom(4, 0x55, 16384, 0, NULL, NULL)"
        " = -1 EAGAIN (Resource temporarily unavailable)\n"
        '11 sendto(4, "S", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'
        '11 recvfrom(4, "2", 16384, 0, NULL, NULL <unfinished ...>\n'
        '12 sendto(7, "Q", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'  # another thread's request
        '11 <... recvfrom resumed>) = 120\n'  # the pipeline's answers: 1 round trip
        '11 recvfrom(4, "Z", 16384, 0, NULL, NULL) = 6\n'  # more of them: not another
        '12 recvfrom(7, "C", 16384, 0, NULL, NULL) = 9\n'  # thread 12's: 1 round trip
        '11 sendto(4, "Q", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'
        '11 recvfrom(4, "C", 16384, 0, NULL, NULL) = 12\n'  # a plain query: 1
        '11 chdir(".") = 0\n'
        '11 sendto(4, "X", 1, MSG_NOSIGNAL, NULL, 0) = 1\n'  # teardown: not counted
        '11 recvfrom(4, "", 16384, 0, NULL, NULL) = 4\n'
    )
    assert peers_bench._round_trips(trace) == 3
    assert peers_bench._between_marks(trace, peers_bench._SEND) == 5
