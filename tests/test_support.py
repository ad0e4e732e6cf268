"""The shared test helpers stay shared: a module that must stand alone (a tool module
tests copy elsewhere as a user's own) declares the same schemas as ``support``."""

from __future__ import annotations

import sys
from pathlib import Path

from support import WORKERS, schemas

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

import agent_tools


def test_the_standalone_tool_module_declares_the_shared_schemas() -> None:
    for name in ("WEATHER", "EMAIL", "NOTE"):
        assert getattr(agent_tools, name) == getattr(schemas, name), name


def test_every_worker_script_lives_in_support() -> None:
    tests = Path(__file__).resolve().parent
    strays = [p for p in tests.rglob("*worker*.py")
              if WORKERS not in p.parents and "benchmarks" not in p.parts]
    assert strays == [], "worker scripts belong in tests/support/workers"
    # and each is run by some test: a worker nothing names is dead code
    sources = "\n".join(p.read_text("utf-8") for p in tests.rglob("*.py")
                        if WORKERS not in p.parents)
    unused = [w.name for w in WORKERS.glob("*_worker.py") if w.stem not in sources]
    assert unused == [], f"worker scripts no test runs: {unused}"
