"""The leaf predicates: one test on one value, answered in three-valued logic.

Each predicate is compiled once from its validated spec into an ``Predicate`` that
maps a value to a ``Check``: ``TRUE``, ``FALSE`` or ``ERROR`` plus a short
reason. Reasons describe *why* in terms of the policy ("host not listed",
"longer than 1024 characters") and never quote the value, because they end up
in decisions, logs and the audit trail.

Type discipline matters for security: JSON ``true`` is not the number 1, a
string is not a list, and an absent field is neither ``null`` nor an error (it is
``FALSE`` for every predicate except ``absent``). Whatever cannot be judged
(wrong type, unparseable URL, ambiguous IP form, input over a cap) is
``ERROR``, which the evaluator never lets grant anything.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent_gate.plainjson import canonical_bytes, canonical_json
from agent_gate.policy.condition_model import (
    Condition,
    NumberBounds,
    PathUnderSpec,
    SizeBounds,
    UrlSpec,
)
from agent_gate.policy.fspath import UnjudgeablePath, resolve_path
from agent_gate.policy.netaddr import (
    NAMED_NETWORKS,
    AddressError,
    IPAddress,
    IPNetwork,
    ParsedUrl,
    domain_matches,
    email_domain,
    ip_matches,
    normalize_host,
    parse_url,
)
from agent_gate.policy.paths import MISSING
from agent_gate.policy.regex import compile_pattern
from agent_gate.policy.values import Truth

__all__ = ["Check", "Predicate", "compile_predicate", "compile_predicate_for", "json_equal"]

@dataclass(frozen=True, slots=True)
class Check:
    truth: Truth
    why: str = ""


TRUE: Final = Check(Truth.TRUE)


def _false(why: str) -> Check:
    return Check(Truth.FALSE, why)


def _error(why: str) -> Check:
    return Check(Truth.ERROR, why)


@dataclass(frozen=True, slots=True)
class Predicate:
    """A compiled leaf test; ``phrase`` says what it checks, for explanations."""

    name: str
    phrase: str
    test: Callable[[Any], Check]

    def __call__(self, value: Any) -> Check:
        if value is MISSING and self.name != "absent":
            return _false("field is absent")
        return self.test(value)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``, ``1`` equals ``1.0``, containers compare deeply."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return False


def _show(values: Sequence[Any], limit: int = 6) -> str:
    shown = [canonical_json(v) for v in values[:limit]]
    if len(values) > limit:
        shown.append(f"… ({len(values) - limit} more)")
    return ", ".join(shown)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# --- equality and membership -------------------------------------------------------


def _equals(operand: Any) -> Predicate:
    def test(value: Any) -> Check:
        return TRUE if json_equal(value, operand) else _false("different value")

    return Predicate("equals", f"equals {_show([operand])}", test)


def _in(operand: list[Any]) -> Predicate:
    def test(value: Any) -> Check:
        if any(json_equal(value, item) for item in operand):
            return TRUE
        return _false("not one of the listed values")

    return Predicate("in", f"is one of [{_show(operand)}]", test)


def _contains(name: str, operand: list[Any], need_all: bool) -> Predicate:
    def test(value: Any) -> Check:
        if not isinstance(value, list):
            return _error("not a list")
        found = [any(json_equal(item, wanted) for item in value) for wanted in operand]
        if (all if need_all else any)(found):
            return TRUE
        return _false("a listed value is missing" if need_all else "none of the listed values")

    words = {
        "contains": "contains",
        "contains_any": "contains any of",
        "contains_all": "contains all of",
    }
    return Predicate(name, f"{words[name]} [{_show(operand)}]", test)


# --- numbers and sizes -------------------------------------------------------------


def _number(bounds: NumberBounds) -> Predicate:
    parts = []
    if bounds.min is not None:
        parts.append(f">= {bounds.min}")
    if bounds.gt is not None:
        parts.append(f"> {bounds.gt}")
    if bounds.max is not None:
        parts.append(f"<= {bounds.max}")
    if bounds.lt is not None:
        parts.append(f"< {bounds.lt}")

    def test(value: Any) -> Check:
        if not _is_number(value):
            return _error("not a number")
        if isinstance(value, float) and not math.isfinite(value):
            return _error("not a finite number")
        if bounds.min is not None and value < bounds.min:
            return _false(f"below {bounds.min}")
        if bounds.gt is not None and not value > bounds.gt:
            return _false(f"not above {bounds.gt}")
        if bounds.max is not None and value > bounds.max:
            return _false(f"above {bounds.max}")
        if bounds.lt is not None and not value < bounds.lt:
            return _false(f"not below {bounds.lt}")
        return TRUE

    return Predicate("number", "is a number " + " and ".join(parts), test)


def _bounds_phrase(bounds: SizeBounds, unit: str) -> str:
    if bounds.min is not None and bounds.max is not None:
        return f"between {bounds.min} and {bounds.max} {unit}"
    if bounds.max is not None:
        return f"at most {bounds.max} {unit}"
    return f"at least {bounds.min} {unit}"


def _within(size: int, bounds: SizeBounds, unit: str) -> Check:
    if bounds.min is not None and size < bounds.min:
        return _false(f"fewer than {bounds.min} {unit}")
    if bounds.max is not None and size > bounds.max:
        return _false(f"more than {bounds.max} {unit}")
    return TRUE


def _length(bounds: SizeBounds) -> Predicate:
    def test(value: Any) -> Check:
        if isinstance(value, str | list | dict):
            return _within(len(value), bounds, "characters/items")
        return _error("has no length (not a string, list or object)")

    return Predicate("length", "has a length " + _bounds_phrase(bounds, "characters/items"), test)


def _bytes(bounds: SizeBounds) -> Predicate:
    def test(value: Any) -> Check:
        if isinstance(value, str):
            size = len(value.encode("utf-8", "surrogatepass"))
        else:
            try:
                size = len(canonical_bytes(value, "surrogatepass"))
            except (TypeError, ValueError, RecursionError):
                return _error("not a JSON value")
        return _within(size, bounds, "bytes")

    return Predicate("bytes", "has a UTF-8 size " + _bounds_phrase(bounds, "bytes"), test)


# --- text --------------------------------------------------------------------------


def _matches(condition: Condition) -> Predicate:
    spec = condition.matches
    assert spec is not None
    pattern = compile_pattern(spec.pattern, spec.unicode)

    def test(value: Any) -> Check:
        if not isinstance(value, str):
            return _error("not a string")
        if len(value) > spec.max_input:
            return _error(f"longer than {spec.max_input} characters")
        return TRUE if pattern.fullmatch(value) else _false("does not match the whole pattern")

    return Predicate("matches", f"fully matches /{spec.pattern}/", test)


def _absent(expected: bool) -> Predicate:
    def test(value: Any) -> Check:
        if (value is MISSING) == expected:
            return TRUE
        return _false("field is present" if expected else "field is absent")

    return Predicate("absent", "is absent" if expected else "is present", test)


# --- paths, URLs, addresses, e-mail ------------------------------------------------


def _path_under(spec: PathUnderSpec) -> Predicate:
    # The leaf hands this predicate the value ``fspath.resolve_path`` already resolved,
    # the same string every other predicate on the argument sees; resolving it again
    # here could judge a second, later state of the file system.
    def test(value: Any) -> Check:
        if not isinstance(value, str) or not value.startswith("/"):
            return _error("not a resolved absolute path")
        try:
            roots = [resolve_path(root) for root in spec.roots]
        except UnjudgeablePath:
            return _error("a root cannot be resolved")
        saw_root = False
        for root in roots:
            if value == root:
                saw_root = True
                if spec.allow_root:
                    return TRUE
            elif os.path.commonpath([root, value]) == root:
                return TRUE
        if saw_root:
            return _false("is a root itself, not a path under it")
        return _false("resolves outside every root (after '..' and symlinks)")

    roots = ", ".join(spec.roots)
    return Predicate("path_under", f"resolves under [{roots}]", test)


def _networks(entries: Sequence[str]) -> tuple[tuple[IPNetwork, ...], frozenset[str]]:
    names = frozenset(e for e in entries if e in NAMED_NETWORKS)
    networks = tuple(ipaddress.ip_network(e) for e in entries if e not in NAMED_NETWORKS)
    return networks, names


def _parsed(parse: Callable[[str], Any], judge: Callable[[Any], Check]) -> Callable[[Any], Check]:
    """A test of a string that ``parse`` reads as an address, then ``judge`` decides.

    Not a string, or a string ``parse`` refuses, is an error (the condition cannot
    be decided), never a false: an unreadable address must not slip past a deny.
    """

    def test(value: Any) -> Check:
        if not isinstance(value, str):
            return _error("not a string")
        try:
            parsed = parse(value)
        except AddressError as exc:
            return _error(str(exc))
        return judge(parsed)

    return test


def _url(spec: UrlSpec) -> Predicate:
    networks, names = _networks(spec.ip_in or ())
    parts = []
    if spec.schemes:
        parts.append("scheme in [" + ", ".join(spec.schemes) + "]")
    if spec.hosts:
        parts.append("host in [" + ", ".join(spec.hosts) + "]")
    if spec.ports:
        parts.append("port in [" + ", ".join(str(p) for p in spec.ports) + "]")
    if spec.ip_literal is not None:
        parts.append("host is an IP literal" if spec.ip_literal else "host is a name")
    if spec.ip_in:
        parts.append("host address in [" + ", ".join(spec.ip_in) + "]")
    hosts = tuple(spec.hosts or ())

    def judge(url: ParsedUrl) -> Check:
        if spec.schemes is not None and url.scheme not in spec.schemes:
            return _false("scheme not listed")
        if spec.hosts is not None:
            if url.address is not None:
                return _false("host is an IP address, not a listed name")
            if domain_matches(url.host, hosts) is None:
                return _false("host not listed")
        if spec.ports is not None:
            port = url.effective_port
            if port is None:
                return _error("no port given and no default port for the scheme")
            if port not in spec.ports:
                return _false("port not listed")
        if spec.ip_literal is not None and (url.address is not None) != spec.ip_literal:
            return _false("host is a name" if spec.ip_literal else "host is an IP literal")
        if spec.ip_in is not None:
            if url.address is None:
                return _false("host is a name, not an address")
            if not ip_matches(url.address, networks, names):
                return _false("address not in the listed ranges")
        return TRUE

    return Predicate("url", "is a URL with " + ", ".join(parts), _parsed(parse_url, judge))


def _ip_in(entries: list[str]) -> Predicate:
    networks, names = _networks(entries)

    def judge(host: tuple[str, IPAddress | None]) -> Check:
        _name, address = host
        if address is None:
            return _false("a host name, not an address")
        if ip_matches(address, networks, names):
            return TRUE
        return _false("address not in the listed ranges")

    return Predicate(
        "ip_in",
        "is an IP address in [" + ", ".join(entries) + "]",
        _parsed(normalize_host, judge),
    )


def _email_domain(patterns: list[str]) -> Predicate:
    listed = tuple(patterns)

    def judge(domain: str) -> Check:
        if domain_matches(domain, listed) is None:
            return _false("domain not listed")
        return TRUE

    return Predicate(
        "email_domain",
        "is an e-mail address at [" + ", ".join(patterns) + "]",
        _parsed(email_domain, judge),
    )


_BY_OPERAND: Final[dict[str, Callable[[Any], Predicate]]] = {
    "equals": _equals,
    "in": _in,
    "contains": lambda operand: _contains("contains", [operand], need_all=True),
    "contains_any": lambda operand: _contains("contains_any", operand, need_all=False),
    "contains_all": lambda operand: _contains("contains_all", operand, need_all=True),
    "number": _number,
    "length": _length,
    "bytes": _bytes,
    "absent": _absent,
    "path_under": _path_under,
    "url": _url,
    "ip_in": _ip_in,
    "email_domain": _email_domain,
}
"""Each leaf predicate built from its operand (``matches`` reads the whole condition)."""


def compile_predicate(condition: Condition) -> Predicate:
    """The leaf predicate of a validated condition (not ``each`` / ``some``)."""
    name = condition.predicate
    if name == "matches":
        return _matches(condition)
    build = _BY_OPERAND.get(name) if name else None
    if build is None:
        raise ValueError(f"no leaf predicate {name!r}")  # each/some are compiled by conditions
    return build(condition.operand(name))


def compile_predicate_for(name: str, operand: Any) -> Predicate:
    """The leaf predicate ``name`` with ``operand``, outside a condition: how ``cel:``
    functions reuse the very test a YAML predicate applies."""
    return _BY_OPERAND[name](operand)
