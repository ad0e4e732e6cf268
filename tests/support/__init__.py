"""What several test files share: tool schemas, a call builder, a counting tool set,
the approval-deadline and grant policies with their tools (``deadlines``, ``grants``),
and the worker scripts tests run as real processes (``support/workers``).

Importable as ``support`` because ``tests/conftest.py`` puts ``tests/`` on
``sys.path``; a worker, started as a script, puts it there itself.
"""

from pathlib import Path

WORKERS = Path(__file__).resolve().parent / "workers"
"""The worker scripts' folder: ``[sys.executable, str(WORKERS / "gate_worker.py"), ...]``."""

EXAMPLE_POLICY = Path(__file__).resolve().parents[2] / "policies" / "example.yaml"
"""The example policy the README and the demo use: tests that read it say so by name."""
