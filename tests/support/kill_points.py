"""The test side of ``engine_tools.hang_at``: wait until a real process stands at a
named point (it touched ``marks/<point>``), then SIGKILL it there.

One helper for every engine test (DBOS, its transactional steps, Celery) so a kill
always means the same thing: the process was alive at the point, and died of SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from waiting import wait_until


def kill_at_mark(proc: subprocess.Popen[str], marks: Path, point: str, *,
                 diagnose: Callable[[], object] | None = None) -> None:
    """SIGKILL ``proc`` once it reaches ``point``; fail with ``diagnose()`` (default: its
    output) if it exits before, and never leave it running."""
    def there() -> bool:
        assert proc.poll() is None, (diagnose or proc.communicate)()
        return (marks / point).exists()

    try:
        wait_until(there, what=f"the process to reach {point}")
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
