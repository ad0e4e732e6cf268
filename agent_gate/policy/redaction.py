"""What a policy file's ``redact:`` and ``redact_result:`` entries declare: a path
into a call's arguments (or a tool's result) and how much of the value a person may
see. Applying a rule to a value, the stand-in it leaves and the digest it keeps, is
privacy's job (``privacy.redaction``): the policy says what is secret and never
handles the secret itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent_gate.policy.paths import ArgPath, parse_path

__all__ = ["RedactionRule"]


@dataclass(frozen=True, slots=True)
class RedactionRule:
    """One path (``*`` matches any key or index) and how many characters to preview."""

    path: ArgPath
    preview: int = 0

    @classmethod
    def parse(cls, path: str, preview: int = 0) -> RedactionRule:
        return cls(parse_path(path, wildcard=True), preview)
