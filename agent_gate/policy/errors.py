"""Typed errors of the policy layer.

A policy file is written by people, so a load error must point at the place to
fix: the file, the line and column, and the key (a dotted path such as
``tools.send_email.rules[0].when[1].regex``). All problems found in one file are
collected, so ``agent-gate policy check`` shows them together instead of one per
run. Messages name keys and the policy's own constraints, never a tool call's
argument values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent_gate.errors import AgentGateError

__all__ = ["PolicyError", "PolicyLoadError", "Problem"]


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
