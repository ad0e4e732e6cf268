"""Gate tests run on every backend: ``db_url`` comes from ``tests/conftest.py``
(a fresh SQLite file, or a fresh PostgreSQL schema at head, per test)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SUPPORT = Path(__file__).resolve().parents[1] / "support"


@pytest.fixture
def effects_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the example tools record side effects; inherited by worker processes."""
    path = tmp_path / "effects.log"
    monkeypatch.setenv("AG_EFFECTS", str(path))
    return path


@pytest.fixture
def agent_tools() -> Iterator[object]:
    """The example tool module (tests/support), importable as a user's module would be."""
    sys.path.insert(0, str(SUPPORT))
    try:
        import agent_tools

        yield agent_tools
    finally:
        sys.path.remove(str(SUPPORT))



def _responses_stream(
    calls: list[tuple[str, str, str]], *, end: str = "completed"
) -> list[dict[str, Any]]:
    """An OpenAI Responses stream with one function call per ``(call_id, name, args)``,
    ending in ``response.<end>`` (``completed``, ``failed``, ``incomplete``)."""
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}
    ]
    for index, (call_id, name, args) in enumerate(calls):
        item = {"type": "function_call", "id": f"fc_{index}", "call_id": call_id, "name": name}
        out += [
            {"type": "response.output_item.added", "output_index": index,
             "item": {**item, "arguments": "", "status": "in_progress"}},
            {"type": "response.function_call_arguments.delta", "item_id": f"fc_{index}",
             "output_index": index, "delta": args},
            {"type": "response.function_call_arguments.done", "item_id": f"fc_{index}",
             "output_index": index, "arguments": args},
            {"type": "response.output_item.done", "output_index": index,
             "item": {**item, "arguments": args, "status": "completed"}},
        ]
    out.append({"type": f"response.{end}", "response": {"id": "resp_1", "status": end}})
    return out


@pytest.fixture
def responses_stream() -> Callable[..., list[dict[str, Any]]]:
    """Builds OpenAI Responses event streams of function calls (as mappings)."""
    return _responses_stream
