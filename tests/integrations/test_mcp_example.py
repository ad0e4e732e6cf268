"""``examples/mcp_proxy.py`` runs as a user runs it and does what its docstring says."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from mcp_harness import ROOT

from agent_gate.ledger import Ledger


@pytest.mark.slow
def test_the_mcp_proxy_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)  # the proxy it starts imports this checkout
    spec = importlib.util.spec_from_file_location("example_mcp_proxy",
                                                  ROOT / "examples" / "mcp_proxy.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    db = f"sqlite:///{tmp_path / 'ledger.db'}"
    report = example.main(["--db", db])
    assert report["tools"] == ["add_note", "list_notes", "delete_notes"]
    assert report["again"] == ("noted: buy milk", True)
    assert report["denied"] == (True, ["never-delete"])
    assert report["notes"] == ["buy milk"]  # written once, and not deleted
    with Ledger(db) as ledger:
        states = sorted(rec.state.value for rec in ledger.calls("notes"))
        assert states == ["rejected", "succeeded", "succeeded"]
        assert ledger.verify_audit().ok
