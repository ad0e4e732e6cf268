"""What a condition looks at for one call (``EvalContext``) and what it answers
(``Result``): the values every kind of condition shares.

They sit under both ``conditions`` (the built-in condition trees) and ``celexpr``
(``cel:`` conditions, which the trees load on demand), so the optional CEL runtime
reads the same context without importing the trees back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent_gate.policy.fspath import UnjudgeablePath, resolve_path
from agent_gate.policy.paths import MISSING, ArgPath
from agent_gate.policy.values import Truth

__all__ = ["Compiled", "EvalContext", "Result", "SubjectKey"]

SubjectKey = tuple[tuple[str, ArgPath], ...]
"""``((root, path), ...)`` from the outermost subject to a leaf's own."""


@dataclass(frozen=True, slots=True)
class EvalContext:
    """What conditions can look at for one call.

    ``path_subjects`` are the subjects the tool's policy treats as paths;
    ``resolved`` caches each path value's resolution (or why it failed) for this
    decision, so every predicate judges the same one, and
    ``bad_paths`` collects, per subject, why a path value could not be judged.
    """

    arguments: dict[str, Any]
    principal: dict[str, Any]
    task: dict[str, Any]
    path_subjects: frozenset[SubjectKey] = frozenset()
    resolved: dict[str, tuple[bool, str]] = field(default_factory=dict)
    bad_paths: dict[str, str] = field(default_factory=dict)
    tool: str = ""
    usage: Mapping[str, Any] = field(default_factory=dict)
    prior: Mapping[str, Any] = field(default_factory=dict)
    """Per tool, the arguments of the task's latest succeeded call (``prior:``)."""
    memo: dict[str, Any] = field(default_factory=dict)
    """Per-decision state a kind of condition builds once (a CEL activation)."""

    def path_value(self, subject: str, value: Any) -> str:
        """The resolved path for ``value``; raises ``UnjudgeablePath`` and notes why."""
        if isinstance(value, str) and value in self.resolved:
            ok, text = self.resolved[value]
        else:
            try:
                ok, text = True, resolve_path(value)
            except UnjudgeablePath as exc:
                ok, text = False, str(exc)
            if isinstance(value, str):
                self.resolved[value] = (ok, text)
        if not ok:
            self.bad_paths.setdefault(subject, text)
            raise UnjudgeablePath(text)
        return text


@dataclass(frozen=True, slots=True)
class Result:
    truth: Truth
    detail: str


class Compiled(Protocol):
    def __call__(self, ctx: EvalContext, element: Any = MISSING) -> Result: ...

    def path_subjects(self) -> frozenset[SubjectKey]:
        """The subjects a ``path_under`` under this node tests."""
        ...
