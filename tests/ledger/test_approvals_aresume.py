"""``Gate.aresume``: the async twin of ``resume`` (issue 15: every sync entry point
has one), driven through the public API on a real ledger."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from types import ModuleType

import pytest
from shared_fixtures import EXAMPLE_POLICY, effect_lines

from agent_gate import CallState, Gate
from agent_gate.policy import Principal

pytestmark = pytest.mark.usefixtures("seal_key_env")


def _mail(call_id: str) -> dict[str, object]:
    return {"call_id": call_id, "name": "send_email",
            "arguments": {"to": "bob@gmail.com", "subject": "Invoice", "body": "Dear Bob."}}


def test_aresume_runs_an_approved_call_once_from_a_running_loop(
    db_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    principal = Principal(id="u1", roles={"support"})
    with Gate(support_tools.tools, db_url, policy=EXAMPLE_POLICY, principal=principal) as g:
        assert g.execute("t", _mail("m1")).state is CallState.AWAITING_APPROVAL
        g.approve("m1", by="alice")

        async def resume_twice() -> tuple[list[object], list[object]]:
            return await g.aresume("t"), await g.aresume("t")

        first, second = asyncio.run(resume_twice())
    assert [(o.call_id, o.state, o.replayed) for o in first] == [  # type: ignore[attr-defined]
        ("m1", CallState.SUCCEEDED, False)
    ]
    assert second == []  # finished calls are skipped
    assert effect_lines(effects_file) == ["t send_email bob@gmail.com Invoice"]


@pytest.mark.parametrize("name", ["execute", "run", "resume", "recover"])
def test_every_sync_entry_point_has_an_async_twin(name: str) -> None:
    twin = getattr(Gate, f"a{name}", None)
    assert twin is not None and inspect.iscoroutinefunction(twin), f"Gate.a{name} is missing"
    sync_params = list(inspect.signature(getattr(Gate, name)).parameters)
    assert list(inspect.signature(twin).parameters) == sync_params


@pytest.mark.parametrize("name", ["execute", "aexecute", "run", "arun"])
def test_a_misspelled_option_is_refused_as_python_would(name: str, sqlite_url: str) -> None:
    from agent_gate import ToolRegistry

    with Gate(ToolRegistry(), sqlite_url, create=True) as g:
        method = getattr(g, name)
        args = ("t", {"call_id": "c", "name": "x", "arguments": {}}) if "execute" in name else ([],)
        kwargs = {} if "execute" in name else {"task_id": "t", "provider": "openai-chat"}
        with pytest.raises(TypeError, match="unexpected keyword argument 'principle'"):
            result = method(*args, principle="alice", **kwargs)
            if inspect.iscoroutine(result):
                asyncio.run(result)
