"""Condition trees: subjects, combinators and three-valued (Kleene) logic.

``all`` is false as soon as one part is false, an error if no part is false but
one is an error, true otherwise; ``any`` mirrors it; ``not`` swaps true and false
and keeps errors. That way an argument that breaks one predicate can never flip
a whole rule into granting: the error travels up and the evaluator fails closed.

``each`` and ``some`` apply a condition to every element of a list. Both are
false on an empty list: "every recipient is internal" proves nothing about a
call with no recipients, and a policy that must accept empty lists says so with
``any: [{absent: true}, ...]`` or ``length: {max: 0}``.

An argument that a ``path_under`` condition tests is a *path* for the whole tool:
every predicate on that subject (``matches``, ``equals``, ``in``, ``length``...)
sees the one resolved value ``fspath.resolve_path`` gives, resolved once per
decision and shared, so two predicates can never judge two spellings (or two
moments) of the same argument. A subject is named by its ``SubjectKey``: the
chain of subjects from the rule down to the leaf, so ``arg: files`` / ``each`` /
``field: src`` is one key wherever it is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent_gate.policy.condition_model import Condition
from agent_gate.policy.context import Compiled, EvalContext, Result, SubjectKey
from agent_gate.policy.fspath import UnjudgeablePath
from agent_gate.policy.paths import MISSING, ArgPath, display, parse_path, resolve
from agent_gate.policy.predicates import Check, Predicate, compile_predicate
from agent_gate.policy.values import Truth

__all__ = [
    "Compiled",
    "EvalContext",
    "Result",
    "SubjectKey",
    "compile_condition",
    "evaluate_all",
]

MAX_EACH_ITEMS: Final = 10_000

_WORD: Final = {Truth.TRUE: "yes", Truth.FALSE: "no", Truth.ERROR: "cannot tell"}

def _leaf_detail(subject: str, phrase: str, check: Check) -> str:
    why = f" ({check.why})" if check.why and check.truth is not Truth.TRUE else ""
    return f"{subject} {phrase}: {_WORD[check.truth]}{why}"


@dataclass(frozen=True, slots=True)
class _Subject:
    root: str  # "arg", "principal", "task", "field", "prior" or "element"
    path: ArgPath

    def describe(self) -> str:
        if self.root == "element":
            return "element"
        if self.root == "field":
            return f"element field '{display(self.path)}'"
        return f"{self.root} '{display(self.path)}'"

    def value(self, ctx: EvalContext, element: Any) -> Any:
        if self.root == "arg":
            return resolve(ctx.arguments, self.path)
        if self.root == "principal":
            return resolve(ctx.principal, self.path)
        if self.root == "task":
            return resolve(ctx.task, self.path)
        if self.root == "field":
            return resolve(element, self.path)
        if self.root == "prior":
            return resolve(dict(ctx.prior), self.path)
        return element


def _subject(condition: Condition) -> _Subject:
    for root in ("arg", "principal", "task", "field", "prior"):
        text = getattr(condition, "field_" if root == "field" else root)
        if text is not None:
            return _Subject(root, parse_path(text))
    return _Subject("element", ())


def _key_display(key: SubjectKey) -> str:
    """A subject chain for people: ``arg 'files' / element field 'src'``."""
    return " / ".join(_Subject(root, path).describe() for root, path in key)


@dataclass(frozen=True, slots=True)
class _Leaf:
    subject: _Subject
    predicate: Predicate
    key: SubjectKey

    def path_subjects(self) -> frozenset[SubjectKey]:
        return frozenset({self.key}) if self.predicate.name == "path_under" else frozenset()

    def __call__(self, ctx: EvalContext, element: Any = MISSING) -> Result:
        value = self.subject.value(ctx, element)
        subject = self.subject.describe()
        is_path = self.predicate.name == "path_under" or self.key in ctx.path_subjects
        if is_path and value is not MISSING:
            subject = f"{subject} (resolved path)"
            try:
                value = ctx.path_value(_key_display(self.key), value)
            except UnjudgeablePath as exc:
                check = Check(Truth.ERROR, str(exc))
                return Result(check.truth, _leaf_detail(subject, self.predicate.phrase, check))
        check = self.predicate(value)
        return Result(check.truth, _leaf_detail(subject, self.predicate.phrase, check))


@dataclass(frozen=True, slots=True)
class _Each:
    subject: _Subject
    inner: Compiled
    need_all: bool

    def path_subjects(self) -> frozenset[SubjectKey]:
        return self.inner.path_subjects()

    def __call__(self, ctx: EvalContext, element: Any = MISSING) -> Result:
        name = "each" if self.need_all else "some"
        subject = self.subject.describe()
        value = self.subject.value(ctx, element)
        if value is MISSING:
            return Result(Truth.FALSE, f"{subject} {name}: no (field is absent)")
        if not isinstance(value, list):
            return Result(Truth.ERROR, f"{subject} {name}: cannot tell (not a list)")
        if not value:
            return Result(Truth.FALSE, f"{subject} {name}: no (empty list)")
        if len(value) > MAX_EACH_ITEMS:
            return Result(
                Truth.ERROR, f"{subject} {name}: cannot tell (more than {MAX_EACH_ITEMS} items)"
            )
        results = [self.inner(ctx, item) for item in value]
        combined = _kleene(results, self.need_all)
        index = next((i for i, r in enumerate(results) if r.truth is combined.truth), 0)
        return Result(combined.truth, f"{subject} {name} [item {index}: {results[index].detail}]")


def _kleene(results: Sequence[Result], need_all: bool) -> Result:
    """Kleene AND (``need_all``) or OR over evaluated parts.

    The first result that decides (a false for AND, a true for OR) wins, then the
    first error (nobody can tell), and only when every part agrees do they all
    stand as the detail.
    """
    decisive, otherwise = (Truth.FALSE, Truth.TRUE) if need_all else (Truth.TRUE, Truth.FALSE)
    for truth in (decisive, Truth.ERROR):
        for result in results:
            if result.truth is truth:
                return result
    return Result(otherwise, "; ".join(r.detail for r in results))


@dataclass(frozen=True, slots=True)
class _Combine:
    parts: tuple[Compiled, ...]
    need_all: bool

    def path_subjects(self) -> frozenset[SubjectKey]:
        return frozenset().union(*(part.path_subjects() for part in self.parts))

    def __call__(self, ctx: EvalContext, element: Any = MISSING) -> Result:
        results = [part(ctx, element) for part in self.parts]
        combined = _kleene(results, self.need_all)
        if not self.need_all and combined.truth is Truth.FALSE:
            return Result(Truth.FALSE, "none of: " + combined.detail)
        return combined


@dataclass(frozen=True, slots=True)
class _Not:
    inner: Compiled

    def path_subjects(self) -> frozenset[SubjectKey]:
        return self.inner.path_subjects()

    def __call__(self, ctx: EvalContext, element: Any = MISSING) -> Result:
        result = self.inner(ctx, element)
        flipped = {Truth.TRUE: Truth.FALSE, Truth.FALSE: Truth.TRUE, Truth.ERROR: Truth.ERROR}
        return Result(flipped[result.truth], f"not ({result.detail})")


def compile_condition(condition: Condition, outer: SubjectKey = ()) -> Compiled:
    """Turn a validated condition into a callable, compiling regexes and networks once.

    ``outer`` is the chain of ``each`` / ``some`` subjects the condition sits in.
    """
    combinator = condition.combinator
    if combinator in ("all", "any"):
        parts = tuple(compile_condition(c, outer) for c in condition.operand(combinator))
        return _Combine(parts, combinator == "all")
    if combinator == "not":
        return _Not(compile_condition(condition.operand("not"), outer))
    predicate = condition.predicate
    if predicate == "cel":
        from agent_gate.policy.celexpr import CelCondition  # needs the optional runtime

        assert condition.cel is not None
        return CelCondition.build(condition.cel)
    subject = _subject(condition)
    key = (*outer, (subject.root, subject.path))
    if predicate in ("each", "some"):
        inner = compile_condition(condition.operand(predicate), key)
        return _Each(subject, inner, need_all=predicate == "each")
    return _Leaf(subject, compile_predicate(condition), key)


def evaluate_all(parts: Sequence[Compiled], ctx: EvalContext) -> Result:
    """A rule's ``when`` list: all must hold; an empty list always holds."""
    if not parts:
        return Result(Truth.TRUE, "no conditions")
    return _kleene([part(ctx) for part in parts], need_all=True)
