"""``cel:`` conditions: a CEL expression over the values the policy judges.

Teams that standardised on CEL (agentgateway, Cerbos, Kubernetes) write the
condition they already know; agent-gate compiles it once, at load, with Google's
CEL C++ runtime (``cel-expr-python``), whose type checker rejects ``tool > 3`` or an
unknown variable before any call is judged (``policy check`` names the rule and
line). The expression sees:

* ``args``: the call's judged arguments (``map(string, dyn)``);
* ``principal``: ``{id, roles, attributes}``; ``task``: ``{id, name, tools, attributes}``;
* ``tool``: the tool's name; ``usage``: the task's counters (``map(string, double)``);
* ``prior``: per tool, the arguments of the task's latest succeeded call of it
  (``prior.lookup_order.order_id``), as the ``prior:`` subject reads them. The tools
  must be named literally (``prior.TOOL`` or ``prior["TOOL"]``): the ledger reads the
  history of exactly those tools in the deciding transaction (``prior_tools_of``).

agent-gate's operators are functions, so CEL never re-parses a path, URL, address
or amount with rules of its own: ``path_under(args.path, ["/srv"])`` judges the one
resolved path every other condition on the tool sees (``fspath``); ``host_in``,
``url_host``, ``url_scheme`` and ``url_port`` read a URL as the ``url:`` predicate
does; ``ip_in`` and ``email_domain_in`` as theirs do; ``amount_le`` (``_lt``, ``_ge``,
``_gt``) compare exact decimals (``amount_le(args.amount, "100.10")``); and
``matches_full(args.id, "ORD-[0-9]{6}")`` is the ``matches:`` predicate (a whole
match, the pattern checked and compiled once, the input capped), where CEL's own
``matches`` compiles its pattern on every call.

Three-valued like every condition: a missing key, a wrong type or a function that
cannot judge its input is an evaluation error, ``Truth.ERROR``, which never grants
(an ``allow`` does not apply, a ``deny`` or ``approve`` denies). Write
``has(args.cc) && ...`` where absence is expected.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from agent_gate.errors import AddressError
from agent_gate.policy.condition_model import PathUnderSpec
from agent_gate.policy.context import EvalContext, Result, SubjectKey
from agent_gate.policy.netaddr import (
    NAMED_NETWORKS,
    domain_matches,
    email_domain,
    ip_matches,
    normalize_host,
    parse_url,
)
from agent_gate.policy.paths import MISSING
from agent_gate.policy.predicates import compile_predicate_for
from agent_gate.policy.regex import DEFAULT_MAX_INPUT, compile_pattern
from agent_gate.policy.values import Truth

__all__ = ["CelCondition", "CelUnavailable", "cel_problem", "compile_cel"]

_CURRENT: ContextVar[EvalContext | None] = ContextVar("agent_gate_cel_context", default=None)
_ACTIVATION: Final = "cel:activation"


class CelUnavailable(ImportError):
    """``cel-expr-python`` is not installed."""


# --- the functions ---------------------------------------------------------------------


class _Unjudgeable(ValueError):
    """A function cannot judge its input: the expression evaluates to an error."""


def _path_under(value: str, roots: Sequence[str] | str) -> bool:
    ctx = _CURRENT.get()
    if ctx is None:
        raise _Unjudgeable("no decision in progress")
    resolved = ctx.path_value("cel path_under", value)  # raises UnjudgeablePath: an error
    roots_tuple = (roots,) if isinstance(roots, str) else tuple(roots)
    check = _root_predicate(roots_tuple)(resolved)
    if check.truth is Truth.ERROR:
        raise _Unjudgeable(check.why)
    return check.truth is Truth.TRUE


@functools.lru_cache(maxsize=256)
def _root_predicate(roots: tuple[str, ...]) -> Any:
    return compile_predicate_for("path_under", PathUnderSpec(roots=list(roots)))


@functools.lru_cache(maxsize=256)
def _networks(entries: tuple[str, ...]) -> tuple[tuple[Any, ...], frozenset[str]]:
    names = frozenset(e for e in entries if e in NAMED_NETWORKS)
    networks = tuple(ipaddress.ip_network(e) for e in entries if e not in NAMED_NETWORKS)
    return networks, names


def _once(kind: str, parse: Callable[[str], Any], text: str) -> Any:
    """``parse(text)`` once per decision: ``host_in``, ``url_host`` and ``url_scheme`` of
    one URL read one parse, as the ``url:`` predicates of a rule do (and it is faster)."""
    ctx = _CURRENT.get()
    if ctx is None:
        return parse(text)
    cache = ctx.memo.setdefault(kind, {})
    found = cache.get(text)
    if found is None:
        try:
            found = parse(text)
        except (AddressError, ValueError) as exc:
            found = exc
        cache[text] = found
    if isinstance(found, AddressError | ValueError):
        raise found
    return found


def _url(text: str) -> Any:
    return _once("cel:url", parse_url, text)


@functools.lru_cache(maxsize=512)
def _pattern(pattern: str) -> Any:
    return compile_pattern(pattern)  # ValueError for a refused pattern: an error


def _matches_full(value: str, pattern: str) -> bool:
    if len(value) > DEFAULT_MAX_INPUT:
        raise _Unjudgeable(f"longer than {DEFAULT_MAX_INPUT} characters")
    return _pattern(pattern).fullmatch(value) is not None


def _host_in(url: str, patterns: Sequence[str]) -> bool:
    parsed = _url(url)
    return parsed.address is None and domain_matches(parsed.host, tuple(patterns)) is not None


def _url_host(url: str) -> str:
    return str(_url(url).host)


def _url_scheme(url: str) -> str:
    return str(_url(url).scheme)


def _url_port(url: str) -> int:
    port = _url(url).effective_port
    if port is None:
        raise _Unjudgeable("no port given and no default port for the scheme")
    return port


def _ip_in(host: str, entries: Sequence[str]) -> bool:
    _name, address = _once("cel:host", normalize_host, host)
    if address is None:
        return False
    networks, names = _networks(tuple(entries))
    return ip_matches(address, networks, names)


def _email_domain_in(address: str, patterns: Sequence[str]) -> bool:
    return domain_matches(email_domain(address), tuple(patterns)) is not None


def _decimal(value: Any) -> Decimal:
    if isinstance(value, bool):
        raise _Unjudgeable("not an amount")
    try:
        number = Decimal(value) if isinstance(value, str | int) else Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise _Unjudgeable("not an amount") from None
    if not number.is_finite():
        raise _Unjudgeable("not a finite amount")
    return number


def _amount(compare: Callable[[Decimal, Decimal], bool]) -> Callable[[Any, Any], bool]:
    def run(value: Any, bound: Any) -> bool:
        return compare(_decimal(value), _decimal(bound))

    return run


_AMOUNTS: Final = {
    "amount_le": _amount(lambda a, b: a <= b),
    "amount_lt": _amount(lambda a, b: a < b),
    "amount_ge": _amount(lambda a, b: a >= b),
    "amount_gt": _amount(lambda a, b: a > b),
}

FUNCTIONS: Final = (
    "matches_full", "path_under", "host_in", "url_host", "url_scheme", "url_port", "ip_in",
    "email_domain_in", *_AMOUNTS,
)


def _declarations(cel: Any) -> list[Any]:
    t = cel.Type
    strings = t.List(t.STRING)

    def one(name: str, result: Any, params: list[Any], impl: Callable[..., Any]) -> Any:
        return cel.FunctionDecl(name, [cel.Overload(f"{name}_overload", result, params, impl=impl)])

    decls = [
        cel.FunctionDecl("path_under", [
            cel.Overload("path_under_list", t.BOOL, [t.STRING, strings], impl=_path_under),
            cel.Overload("path_under_string", t.BOOL, [t.STRING, t.STRING], impl=_path_under),
        ]),
        one("matches_full", t.BOOL, [t.STRING, t.STRING], _matches_full),
        one("host_in", t.BOOL, [t.STRING, strings], _host_in),
        one("url_host", t.STRING, [t.STRING], _url_host),
        one("url_scheme", t.STRING, [t.STRING], _url_scheme),
        one("url_port", t.INT, [t.STRING], _url_port),
        one("ip_in", t.BOOL, [t.STRING, strings], _ip_in),
        one("email_domain_in", t.BOOL, [t.STRING, strings], _email_domain_in),
    ]
    # CEL dispatches on runtime types, and a ``dyn`` parameter matches none: one
    # overload per pair of the types an amount arrives as (number or decimal text).
    kinds = {"int": t.INT, "uint": t.UINT, "double": t.DOUBLE, "string": t.STRING}
    for name, impl in _AMOUNTS.items():
        overloads = [
            cel.Overload(f"{name}_{a}_{b}", t.BOOL, [kinds[a], kinds[b]], impl=impl)
            for a in kinds
            for b in kinds
        ]
        decls.append(cel.FunctionDecl(name, overloads))
    return decls


@functools.cache
def _env() -> Any:
    try:
        from cel_expr_python import cel
    except ImportError:
        raise CelUnavailable(
            "cel: conditions need the CEL runtime: pip install 'agent-gate[cel]'"
        ) from None
    t = cel.Type
    variables = {
        "args": t.Map(t.STRING, t.DYN),
        "principal": t.Map(t.STRING, t.DYN),
        "task": t.Map(t.STRING, t.DYN),
        "tool": t.STRING,
        "usage": t.Map(t.STRING, t.DOUBLE),
        "prior": t.Map(t.STRING, t.DYN),
    }
    return cel, cel.NewEnv(variables=variables, functions=_declarations(cel))


@functools.lru_cache(maxsize=4096)
def compile_cel(text: str) -> Any:
    """The checked program for ``text`` (compiled once per process per expression);
    raises ``ValueError`` with the checker's message, or ``CelUnavailable``."""
    cel, env = _env()
    try:
        program = env.compile(text)
    except RuntimeError as exc:
        message = str(exc).removeprefix("INVALID_ARGUMENT: ").split(" [INVALID_ARGUMENT]")[0]
        raise ValueError(message.replace("ERROR: <input>:", "CEL error at ")) from None
    kind = program.return_type()
    if kind != cel.Type.BOOL and kind != cel.Type.DYN:
        raise ValueError(f"a cel: condition must be a boolean expression, not {kind.name()}")
    return program


_STRINGS = re.compile(r""" "(?:[^"\\\n]|\\.)*" | '(?:[^'\\\n]|\\.)*' """, re.VERBOSE)
_PRIOR_NAMED = re.compile(
    r"""(?<![.\w])prior\s*(?:\.\s*([A-Za-z_]\w*)|\[\s*(?:"([^"\\]*)"|'([^'\\]*)')\s*\])"""
)
_PRIOR_ANY = re.compile(r"(?<![.\w])prior(?!\w)")
_PRIOR_KEYED = re.compile(r"(?<![.\w])prior\s*\[\s*\Z")


def prior_tools_of(text: str) -> tuple[frozenset[str], bool]:
    """The tools a ``cel:`` expression reads from ``prior`` (``prior.TOOL``,
    ``prior["TOOL"]``), and whether it uses ``prior`` in another way (a computed
    key, ``"t" in prior``): the decision could not know which history to read, so
    ``cel_problem`` refuses it. Found in the text (strings aside), since the CEL
    binding gives no syntax tree; a name inside a comment at worst reads one more
    tool's history."""
    def blank(m: re.Match[str]) -> str:  # a string, unless it is prior's key
        keyed = _PRIOR_KEYED.search(text, 0, m.start())
        return m.group() if keyed is not None else " " * len(m.group())

    code = _STRINGS.sub(blank, text)
    found = {next(g for g in m.groups() if g is not None) for m in _PRIOR_NAMED.finditer(code)}
    rest = _STRINGS.sub('""', _PRIOR_NAMED.sub("_", code))
    return frozenset(found), _PRIOR_ANY.search(rest) is not None


def cel_problem(text: str) -> str | None:
    """What is wrong with the expression ``text`` (None: it compiles and is boolean)."""
    if prior_tools_of(text)[1]:
        return ("'prior' must name its tool literally (prior.TOOL or prior[\"TOOL\"]): "
                "the task's history is read for the tools named")
    try:
        compile_cel(text)
    except (ValueError, CelUnavailable) as exc:
        return str(exc)
    return None


def _activation(ctx: EvalContext) -> Any:
    """One activation per decision: every ``cel:`` condition of the call shares it."""
    found = ctx.memo.get(_ACTIVATION)
    if found is None:
        _cel, env = _env()
        usage = {k: float(v) for k, v in ctx.usage.items()}
        found = env.Activation({
            "args": ctx.arguments, "principal": ctx.principal, "task": ctx.task,
            "tool": ctx.tool, "usage": usage, "prior": dict(ctx.prior),
        })
        ctx.memo[_ACTIVATION] = found
    return found


@dataclass(frozen=True, slots=True)
class CelCondition:
    """A compiled ``cel:`` condition, a node of the condition tree like any other."""

    text: str
    program: Any

    @classmethod
    def build(cls, text: str) -> CelCondition:
        return cls(text, compile_cel(text))

    def path_subjects(self) -> frozenset[SubjectKey]:
        return frozenset()

    def __call__(self, ctx: EvalContext, element: Any = MISSING) -> Result:
        label = f"cel {self.text[:60]!r}" + ("…" if len(self.text) > 60 else "")
        token = _CURRENT.set(ctx)
        try:
            value = self.program.eval(_activation(ctx))
            result = value.value()
        except Exception:  # the runtime's own errors (a value it cannot convert)
            return Result(Truth.ERROR, f"{label}: cannot tell (cannot evaluate)")
        finally:
            _CURRENT.reset(token)
        if result is True:
            return Result(Truth.TRUE, f"{label}: yes")
        if result is False:
            return Result(Truth.FALSE, f"{label}: no")
        # a missing key, a type that does not fit, a function that cannot judge its
        # input: CEL's message may quote the value, so only the kind is kept
        return Result(Truth.ERROR, f"{label}: cannot tell (a key is missing or a value "
                                   "does not fit)")
