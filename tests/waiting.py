"""Waiting in tests on what happens, never for a fixed time.

Why: a fixed sleep is either too short on a loaded machine (the test flakes) or too
long everywhere else (the suite crawls). A test that waits for something polls for
it under a deadline and goes on the moment it holds; the deadline is generous because
it is only reached when the test is failing anyway.

Worker processes started by tests import this module too (they put ``tests/`` on
``sys.path``): ``await_start`` says "ready" and then waits for the start file, and the
test's ``start_together`` touches that file once every worker is ready, so a race
starts with every racer in place however slowly the processes came up.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

POLL_SECONDS = 0.005
DEFAULT_TIMEOUT = 60.0


def wait_until(
    predicate: Callable[[], T], timeout: float = DEFAULT_TIMEOUT, *, what: str = "the condition"
) -> T:
    """Poll ``predicate`` until it returns something true, and return that.

    Raises ``AssertionError`` naming ``what`` once ``timeout`` seconds have passed. An
    exception from ``predicate`` propagates at once (use it to fail early, e.g. when a
    worker process died).
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(POLL_SECONDS)


def _ready_files(go: Path) -> list[Path]:
    return sorted(go.parent.glob(f"{go.name}.ready-*"))


def await_start(go: str | Path, timeout: float = DEFAULT_TIMEOUT) -> None:
    """In a worker: say this process is ready, then wait until the test says go."""
    go = Path(go)
    Path(f"{go}.ready-{os.getpid()}").touch()
    wait_until(go.exists, timeout, what=f"the start file {go}")


def start_together(
    go: Path, procs: Iterable[subprocess.Popen[str]], timeout: float = DEFAULT_TIMEOUT
) -> None:
    """In a test: once every worker called ``await_start``, touch the start file.

    Fails at once, with the worker's standard error, if a worker exits before the start.
    """
    procs = list(procs)

    def all_ready() -> bool:
        for proc in procs:
            if proc.poll() is not None:
                _, err = proc.communicate()
                text = err.decode(errors="replace") if isinstance(err, bytes) else err or ""
                raise AssertionError(
                    f"a worker exited ({proc.returncode}) before the start: {text[-3000:]}"
                )
        return len(_ready_files(go)) >= len(procs)

    wait_until(all_ready, timeout, what=f"{len(procs)} workers to be ready")
    go.touch()
