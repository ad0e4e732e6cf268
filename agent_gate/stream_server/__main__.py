"""Run the local SSE server standalone: ``python -m agent_gate.stream_server FILE...``.

For pointing an out-of-process client (``agent-gate run --url ...``, curl) at a
recorded stream; faults then come from query parameters. Stops on Ctrl-C or
after ``--seconds``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from pathlib import Path

from agent_gate.stream_server.server import StreamServer
from agent_gate.stream_server.transcript import IdMode, Transcript


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent_gate.stream_server")
    parser.add_argument(
        "transcripts",
        nargs="+",
        metavar="[NAME=]FILE",
        help=".sse, .json or .jsonl transcript; served at /streams/NAME (default: file stem)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--retry-ms", type=int, default=None)
    parser.add_argument("--ids", choices=[m.value for m in IdMode], default=IdMode.AUTO.value)
    parser.add_argument("--seconds", type=float, default=None, help="stop after this long")
    args = parser.parse_args(argv)

    transcripts: dict[str, Transcript] = {}
    for spec in args.transcripts:
        name, sep, file = spec.partition("=")
        path = Path(file if sep else spec)
        transcripts[name if sep else path.stem] = Transcript.from_file(
            path, id_mode=IdMode(args.ids)
        )
    stop = threading.Event()
    with StreamServer(
        transcripts, host=args.host, port=args.port, retry_ms=args.retry_ms
    ) as server:
        for name in transcripts:
            print(f"{name}: {server.stream_url(name)}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
