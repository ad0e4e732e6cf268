"""Worker process for the ledger's multi-process tests (run as a script, not collected).

Every worker waits for a shared "go" file before it writes, so that all of them hit
the database at the same moment; the wait is bounded so a broken test cannot hang.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from agent_gate.ledger import CallState, Ledger, NewCall
from agent_gate.ledger.lease import this_owner


def wait_for(go: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not go.exists():
        if time.monotonic() > deadline:
            sys.exit("go file never appeared")
        time.sleep(0.005)


def main() -> None:
    command, url, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if command == "open":
        wait_for(go)
        ledger = Ledger(url, create=True)  # all of them race to start a new file
        rec, inserted = ledger.record(
            NewCall("t", sys.argv[4], f"call:{sys.argv[4]}", "tool", "read", "none", "h", {})
        )
        print(json.dumps({"inserted": inserted, "state": rec.state.value}))
    elif command == "claim":
        # Everyone reads the row first and sees it authorized; then all race.
        ledger = Ledger(url)
        rec = ledger.get("t", sys.argv[4])
        assert rec is not None and rec.state is CallState.AUTHORIZED
        Path(sys.argv[5]).touch()  # tell the test this worker has read the row
        wait_for(go)
        tr = ledger.claim(rec, owner=this_owner(), lease_ms=60_000)
        print(json.dumps({"won": tr.won, "state": tr.record.state.value,
                          "attempt": tr.record.attempt}))
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
