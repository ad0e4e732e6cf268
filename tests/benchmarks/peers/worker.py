"""One candidate in its own process, driven over stdin by peers_bench.py.

    python worker.py NAME WHERE RUNS_FILE

Commands, one a line: ``run FIRST COUNT`` (calls FIRST..FIRST+COUNT-1),
``replay N`` (hand finished call N to the framework again), ``mark`` (a
``chdir(".")``: the marker ``strace`` cuts its count at), ``quit``. Each answer
is one line starting with ``@@`` (frameworks may print to stdout too).
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from candidates import Replays, Runs, make


def main() -> None:
    name, where, runs_path = sys.argv[1:4]
    runs = Runs(Path(runs_path))
    candidate = make(name, runs, where)
    print("@@ ready", flush=True)
    for line in sys.stdin:
        word, *rest = line.split()
        try:
            if word == "run":
                candidate.run(int(rest[0]), int(rest[1]))
            elif word == "replay":
                if not isinstance(candidate, Replays):
                    raise TypeError(f"{name} keeps no record to replay a call against")
                candidate.replay(int(rest[0]))
            elif word == "mark":
                os.chdir(".")
            elif word == "quit":
                break
            print("@@ ok", flush=True)
        except Exception as exc:
            traceback.print_exc()
            print(f"@@ error {type(exc).__name__}", flush=True)
    candidate.close()
    runs.close()
    print("@@ bye", flush=True)


if __name__ == "__main__":
    main()
