"""The report of slow tests without the ``slow`` marker (``support/slow_check``),
through a real pytest run of a small suite: listed after the run, failed with
``AGENT_GATE_SLOW_FAIL=1``, never for a test that carries the marker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each starts a pytest process: seconds on a loaded machine

TESTS = Path(__file__).resolve().parent

SUITE = '''
import pytest

def test_quick_but_over_a_zero_limit():
    assert True

@pytest.mark.slow
def test_marked():
    assert True
'''

CONFTEST = f'''
import sys
sys.path.insert(0, {str(TESTS)!r})
from support.slow_check import (
    pytest_runtest_logreport, pytest_runtest_makereport, pytest_terminal_summary,
)

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: slow")
'''


def run_suite(tmp_path: Path, *, fail: bool, workers: int = 0) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST, "utf-8")
    (tmp_path / "test_suite.py").write_text(SUITE, "utf-8")
    env = {**os.environ, "AGENT_GATE_SLOW_LIMIT": "0", "AGENT_GATE_SLOW_FAIL": "1" if fail else ""}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "no:langsmith_plugin", "-n", str(workers), "--rootdir", str(tmp_path), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unmarked_test_over_the_limit_is_listed_after_the_run(
    tmp_path: Path, workers: int
) -> None:
    out = run_suite(tmp_path, fail=False, workers=workers)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "slow tests without the slow marker" in out.stdout
    assert "test_quick_but_over_a_zero_limit took" in out.stdout
    assert "without @pytest.mark.slow" in out.stdout
    assert "test_marked" not in out.stdout


def test_with_agent_gate_slow_fail_the_unmarked_test_fails(tmp_path: Path) -> None:
    out = run_suite(tmp_path, fail=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 failed, 1 passed" in out.stdout
    assert "FAILED test_suite.py::test_quick_but_over_a_zero_limit" in out.stdout
