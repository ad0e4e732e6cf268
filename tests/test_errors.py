"""The errors package (issue 31): one room's errors per module, one import path.

``agent_gate.errors`` is where every error is imported from and what a stored error
names: DBOS keeps a step's error pickled, so the path a pickle records must outlive
a split of the rooms (and ``CallInDoubt``'s move out of ``integrations.engines``).
"""

from __future__ import annotations

import enum
import importlib
import inspect
import pickle
import pkgutil
import typing

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



def _sample(hint: object) -> object:
    """A stand-in argument by type, so every error can be built without a table."""
    if hint is enum.Enum:  # a state or an event of the ledger's table
        from agent_gate.ledger.states import CallState

        return CallState.EXECUTING
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(iter(hint))
    text = str(hint)
    if "Problem" in text:
        return [errors.Problem("p.yaml", 3, 5, "rules[0]", "unknown key")]
    if hint is bool:
        return True
    if "int" in text and "str" not in text:
        return 7
    if "float" in text:
        return 1.5
    if "list" in text or "Sequence" in text:
        return []
    if "dict" in text or "Mapping" in text:
        return {}
    return "x1"


def test_every_error_survives_a_pickle_round_trip() -> None:
    """DBOS and Celery store a step's error pickled, and a multiprocessing pool sends
    it between processes: an error whose ``__init__`` takes other arguments than its
    message must still load (``SSELimitExceeded`` did not: BaseException pickles
    ``cls(*self.args)``, one message for a four-argument ``__init__``)."""
    abstract = {errors.StreamTimeout}  # its subclasses name the limit it reports
    classes = [v for v in vars(errors).values() if inspect.isclass(v)
               and issubclass(v, errors.AgentGateError) and v not in abstract]
    assert len(classes) > 50
    for cls in classes:
        parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
        hints = typing.get_type_hints(cls.__init__) if parameters else {}
        positional = [_sample(hints.get(p.name)) for p in parameters
                      if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY,
                                                             p.POSITIONAL_OR_KEYWORD)]
        keywords = {p.name: _sample(hints.get(p.name)) for p in parameters
                    if p.default is p.empty and p.kind is p.KEYWORD_ONLY}
        error = cls(*positional, **keywords)
        loaded = pickle.loads(pickle.dumps(error))
        assert type(loaded) is cls, cls
        assert str(loaded) == str(error), cls
        assert loaded.args == error.args, cls
        assert vars(loaded) == vars(error), cls
