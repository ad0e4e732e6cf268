"""The errors package (issue 31): one room's errors per module, one import path.

``agent_gate.errors`` is where every error is imported from and what a stored error
names: DBOS keeps a step's error pickled, so the path a pickle records must outlive
a split of the rooms (and ``CallInDoubt``'s move out of ``integrations.engines``).
"""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil

import agent_gate.errors as errors
from agent_gate.errors import CallInDoubt, PathEscapes


def _room_modules() -> list[str]:
    return [f"{errors.__name__}.{info.name}" for info in pkgutil.iter_modules(errors.__path__)]


def test_every_name_of_every_room_is_importable_from_the_package() -> None:
    rooms = _room_modules()
    assert {"agent_gate.errors.base", "agent_gate.errors.gate"} <= set(rooms)
    for room in rooms:
        module = importlib.import_module(room)
        for name in module.__all__:
            assert getattr(errors, name) is getattr(module, name), (room, name)
            assert name in errors.__all__, (room, name)


def test_every_error_names_the_package_as_its_home() -> None:
    classes = [v for v in vars(errors).values() if inspect.isclass(v) and v.__module__
               .startswith("agent_gate.errors")]
    assert len(classes) > 50
    assert {c.__module__ for c in classes} == {"agent_gate.errors"}
    for cls in (CallInDoubt, PathEscapes):
        assert pickle.dumps(cls, protocol=0).startswith(b"cagent_gate.errors\n")


def test_a_call_in_doubt_pickled_before_the_move_still_loads() -> None:
    """A DBOS step error stored by an older version names the engines module."""
    now = pickle.dumps(CallInDoubt("task-1", "call-1", "owner_dead"), protocol=0)
    assert b"cagent_gate.errors\nCallInDoubt\n" in now
    stored = now.replace(b"cagent_gate.errors\n", b"cagent_gate.integrations.engines\n")
    error = pickle.loads(stored)
    assert type(error) is CallInDoubt
    assert (error.task_id, error.call_id, error.code) == ("task-1", "call-1", "owner_dead")
    from agent_gate.integrations import celery, dbos, engines

    assert engines.CallInDoubt is dbos.CallInDoubt is celery.CallInDoubt is CallInDoubt

