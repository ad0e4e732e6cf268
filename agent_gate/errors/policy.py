"""What the policy layer raises: a load error located for the file's editor, and the
refusals of its value readers (paths, addresses).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent_gate.errors.base import AgentGateError

__all__ = [
    "AddressError", "PathEscapes", "PolicyError", "PolicyLoadError", "Problem", "UnjudgeablePath",
]


# ---------------------------------------------------------------- policy
# A load error points at the place to fix (file, line, column, dotted key), all
# problems of a file at once; messages never show a call's argument values.


class PolicyError(AgentGateError):
    """Base of every error the policy layer raises on purpose."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a policy file, located for a human editor.

    ``line`` and ``column`` are 1-based, as editors count; they are ``None`` only
    when the problem concerns the file as a whole (unreadable, empty, too large).
    """

    source: str
    line: int | None
    column: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        key = f" {self.key}:" if self.key else ""
        return f"{where}:{key} {self.message}"


class PolicyLoadError(PolicyError):
    """A policy file could not be read, parsed or validated.

    ``problems`` lists every problem found; the first one is also exposed as
    ``source`` / ``line`` / ``key`` for callers that report a single location.
    """

    def __init__(self, problems: Sequence[Problem]) -> None:
        if not problems:
            raise ValueError("PolicyLoadError needs at least one problem")
        self.problems: tuple[Problem, ...] = tuple(problems)
        first = self.problems[0]
        self.source = first.source
        self.line = first.line
        self.column = first.column
        self.key = first.key
        super().__init__("\n".join(str(p) for p in self.problems))


class UnjudgeablePath(PolicyError):
    """A value cannot be resolved to one absolute path; the message says why, never the value."""


class AddressError(PolicyError):
    """A value could not be read as a host, address, URL or e-mail address."""


class PathEscapes(PolicyError):
    """A path would leave its root, or would pass through a symlink, ``..`` or ``/``.

    ``component`` is the 1-based position of the offending component among the
    path's non-empty, non-``.`` components, or ``None`` when the path as a whole
    is at fault (absolute, NUL byte) or the kernel did not say which.
    """

    def __init__(self, reason: str, component: int | None = None) -> None:
        self.reason = reason
        self.component = component
        where = f"component {component} " if component is not None else "path "
        super().__init__(where + reason)
