"""A timing report, not a speed assertion: which tests ran long without ``slow``.

``-m "not slow"`` is the quick run; a test that takes many seconds and lacks the
marker makes it slow without anyone deciding so. After the run, every test not
marked ``slow`` whose call phase took longer than the limit is listed, with what to
do. With ``AGENT_GATE_SLOW_FAIL=1`` (set it where a run should enforce it) such a
test fails instead.

The limit is generous (``AGENT_GATE_SLOW_LIMIT``, 15 s by default, three times the
five seconds the marker is for) and grows with the machine's load: on a machine
shared by other work, a test waits for a core, so the limit is multiplied by the
load per core when that is above one (``os.getloadavg``, read when the test ends).
It says nothing about the product's speed: only that a test should carry a marker.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

DEFAULT_LIMIT = 15.0
_PROPERTY = "unmarked_slow"
_seen: list[str] = []
"""The lines reported in this process (the controller's, under xdist)."""


def limit_now() -> tuple[float, float]:
    """The limit in seconds for a test ending now, and the load per core it allows for."""
    base = float(os.environ.get("AGENT_GATE_SLOW_LIMIT") or DEFAULT_LIMIT)
    try:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:  # pragma: no cover - a platform without a load average
        load = 1.0
    return base * max(1.0, load), load


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.when != "call" or item.get_closest_marker("slow") is not None:
        return
    limit, load = limit_now()
    if report.duration <= limit:
        return
    line = (f"{item.nodeid} took {report.duration:.1f} s, over {limit:.1f} s "
            f"(load per core {load:.1f}) without @pytest.mark.slow: mark it, or make it "
            "faster")
    # On the report, not in this process: under xdist the summary is the controller's.
    report.user_properties.append((_PROPERTY, line))
    if os.environ.get("AGENT_GATE_SLOW_FAIL") == "1" and report.passed:
        report.outcome = "failed"
        report.longrepr = line


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    lines = [value for name, value in report.user_properties if name == _PROPERTY]
    if lines:
        _seen.extend(lines)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = list(dict.fromkeys(_seen))
    if lines:
        terminalreporter.section("slow tests without the slow marker")
        for line in lines:
            terminalreporter.write_line(line)
