"""Numbers a test measured, printed after the run so they can be quoted.

A test that measures something a person reads off the run (how many conformance
scenarios pass through the MCP proxy) records it with
``record_property("measured", "one line")``. Passing tests' output is not shown,
and under xdist a worker's output never reaches the terminal at all; the property
travels on the test's report to the process that prints the summary (as
``slow_check`` does), which lists every such line in a section of its own.
"""

from __future__ import annotations

from typing import Any

import pytest

PROPERTY = "measured"
_seen: list[str] = []
"""The lines reported in this process (the controller's, under xdist)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _seen.extend(str(value) for name, value in report.user_properties if name == PROPERTY)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = list(dict.fromkeys(_seen))
    if lines:
        terminalreporter.section("measured")
        for line in lines:
            terminalreporter.write_line(line)
