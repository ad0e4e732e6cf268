"""The strict scalar types a policy file's values are written in, and the base of its
models.

Why a module of their own: the condition models (``policy.condition_model``), an
approve rule's ``approval:`` block (``policy.approval_model``) and the file's other
entries (``policy.model``) all spell tool names, argument paths, roles and numbers the
same way; defined once here, below all three, none of them has to import another to
share a type. Scalars are strict where YAML would otherwise coerce (``"5"`` is not a
number, a date is not a JSON value).
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
)

from agent_gate.policy.netaddr import NAMED_NETWORKS, validate_domain_pattern
from agent_gate.policy.paths import parse_path

__all__ = [
    "MAX_TIMEOUT_SECONDS",
    "STRICT",
    "AbsoluteRoot",
    "ArgPathText",
    "DomainPattern",
    "Duration",
    "IpEntry",
    "JsonValue",
    "NonNegInt",
    "Number",
    "OperatorId",
    "Port",
    "PrincipalPath",
    "PriorPath",
    "RedactPathText",
    "RoleName",
    "RuleId",
    "Scheme",
    "ScopeName",
    "TaskPath",
    "Text",
    "ToolName",
    "listify",
    "seconds_of",
]


STRICT: Final = ConfigDict(extra="forbid", frozen=True)
"""Every model of a policy file: an unknown key (a misspelled ``efect:``) is a load error
at its line instead of a silently ignored guard; a loaded value never changes. (Each
module keeps its own ``_Model(BaseModel)`` with this config, so that linters see a
pydantic model and its list defaults for what they are.)"""


def listify(data: Any) -> Any:
    """One mapping where a list of them is expected (``when: {arg: x, ...}``)."""
    return [data] if isinstance(data, dict) else data


def _finite_number(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    return value


def _json_value(value: Any, depth: int = 0) -> Any:
    if depth > 32:
        raise ValueError("value nested too deeply")
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value
    if isinstance(value, list):
        return [_json_value(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("object keys must be strings")
        return {k: _json_value(v, depth + 1) for k, v in value.items()}
    raise ValueError(
        "must be a JSON value (string, number, boolean, null, list, mapping); "
        "quote dates and other YAML scalars"
    )


def _arg_path(text: str) -> str:
    parse_path(text)
    return text


def _redact_path(text: str) -> str:
    parse_path(text, wildcard=True)
    return text


_PRINCIPAL_ROOTS: Final = {"id": False, "roles": False, "attributes": True}
_TASK_ROOTS: Final = {"id": False, "name": False, "tools": False, "attributes": True}


def _subject_path(roots: dict[str, bool]) -> Any:
    def check(text: str) -> str:
        segments = parse_path(text)
        head = segments[0]
        if head not in roots:
            raise ValueError(f"must start with one of: {', '.join(roots)}")
        nested = roots[head]
        if nested and len(segments) < 2:
            raise ValueError(f"'{head}' needs a key, e.g. '{head}.team'")
        if not nested and len(segments) > 1:
            raise ValueError(f"'{head}' has no sub-keys")
        return text

    return check


def _absolute_root(text: str) -> str:
    if "\x00" in text:
        raise ValueError("path contains a NUL byte")
    if not os.path.isabs(text):
        raise ValueError("roots must be absolute paths")
    return text


def _ip_entry(text: str) -> str:
    if text in NAMED_NETWORKS:
        return text
    try:
        ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise ValueError(
            f"must be a CIDR like '10.0.0.0/8' or one of {', '.join(sorted(NAMED_NETWORKS))}"
            f" ({exc})"
        ) from None
    return text


def _scheme(text: str) -> str:
    if not text.isascii() or not text.islower() or not text[:1].isalpha():
        raise ValueError("scheme must be lower-case ASCII, like 'https'")
    return text


Number = Annotated[int | float, BeforeValidator(_finite_number)]
JsonValue = Annotated[Any, BeforeValidator(_json_value)]
NonNegInt = Annotated[StrictInt, Field(ge=0)]
RuleId = Annotated[
    StrictStr,
    StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"),
]
"""Rule and limit ids; no ``:`` so they never clash with built-in ``agent-gate:*`` ids."""
ToolName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
ScopeName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
ArgPathText = Annotated[StrictStr, AfterValidator(_arg_path)]
RedactPathText = Annotated[StrictStr, AfterValidator(_redact_path)]
PrincipalPath = Annotated[StrictStr, AfterValidator(_subject_path(_PRINCIPAL_ROOTS))]
TaskPath = Annotated[StrictStr, AfterValidator(_subject_path(_TASK_ROOTS))]


def _prior_path(text: str) -> str:
    if len(parse_path(text)) < 2:
        raise ValueError("name the tool and the argument: 'verify_identity.order_id'")
    return text


PriorPath = Annotated[StrictStr, AfterValidator(_prior_path)]
DomainPattern = Annotated[StrictStr, AfterValidator(validate_domain_pattern)]
IpEntry = Annotated[StrictStr, AfterValidator(_ip_entry)]
Scheme = Annotated[StrictStr, AfterValidator(_scheme)]
Port = Annotated[StrictInt, Field(ge=1, le=65535)]
AbsoluteRoot = Annotated[StrictStr, AfterValidator(_absolute_root)]
Text = Annotated[StrictStr, StringConstraints(max_length=2000)]
RoleName = Annotated[StrictStr, StringConstraints(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]
OperatorId = Annotated[StrictStr, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]{1,200}$")]
"""Who approves: the ``--by`` of ``agent-gate approve`` (the ledger keeps 200 characters)."""


# --- durations (a limit's window, an approval's timeout, a grant's span) ------------

MAX_TIMEOUT_SECONDS: Final = 366 * 86400
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION: Final = re.compile(r"[0-9]{1,9}[smhd]")


def seconds_of(text: str) -> int:
    """The seconds a checked ``Duration`` (``90s``, ``30m``, ``2h``) says."""
    return int(text[:-1]) * _UNITS[text[-1]]


def _duration(text: str) -> str:
    if not _DURATION.fullmatch(text):
        raise ValueError("a duration is a whole number of s, m, h or d: '90s', '30m', '2h', '1d'")
    if not 1 <= seconds_of(text) <= MAX_TIMEOUT_SECONDS:
        raise ValueError("a duration is between 1 second and 366 days")
    return text


Duration = Annotated[StrictStr, AfterValidator(_duration)]
"""One way to write a span of time, wherever the file takes one: ASCII digits and a
unit, from one second to 366 days."""
