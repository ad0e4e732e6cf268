"""The agent-framework examples run offline and do what their docstrings say:
each payment made once, the large one after an approval given the framework's
way, the blocked one never, and the audit chain intact."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"
STATES = {"call-small": "succeeded", "call-large": "succeeded", "call-blocked": "rejected"}


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("example", "package"),
    [("with_pydantic_ai", "pydantic_ai"), ("with_langgraph", "langgraph"),
     ("with_openai_agents", "agents")],
)
def test_a_framework_example(example: str, package: str, tmp_path: Path) -> None:
    pytest.importorskip(package)
    report = load(example).main(["--db", f"sqlite:///{tmp_path / 'ledger.db'}"])
    assert report["paid"] == [("acme", 40), ("globex", 500)]
    assert report["states"] == STATES
    assert report["audit_ok"] is True
