"""Equality, membership, numbers, sizes, regex, absent, each/some, and the subjects."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent_gate.policy import (
    PolicyDecision,
    PolicyLoadError,
    Principal,
    TaskScope,
    Truth,
    Verdict,
)

from .conftest import one_rule_policy

Allows = Callable[..., bool]
Denies = Callable[..., PolicyDecision]


def test_equals_is_json_typed(allows: Allows) -> None:
    assert allows({"arg": "mode", "equals": "fast"}, {"mode": "fast"})
    assert not allows({"arg": "mode", "equals": "fast"}, {"mode": "slow"})
    # JSON true is not the number 1, and "1" is not 1.
    assert not allows({"arg": "n", "equals": 1}, {"n": True})
    assert not allows({"arg": "n", "equals": 1}, {"n": "1"})
    assert allows({"arg": "n", "equals": 1}, {"n": 1.0})
    assert allows({"arg": "n", "equals": None}, {"n": None})
    assert not allows({"arg": "n", "equals": None}, {})  # absent is not null
    assert allows({"arg": "o", "equals": {"a": [1, 2]}}, {"o": {"a": [1, 2]}})
    assert not allows({"arg": "o", "equals": {"a": [1, 2]}}, {"o": {"a": [2, 1]}})


def test_in_membership(allows: Allows) -> None:
    cond = {"arg": "city", "in": ["Paris", "Oslo"]}
    assert allows(cond, {"city": "Oslo"})
    assert not allows(cond, {"city": "oslo"})
    assert not allows(cond, {"city": ["Oslo"]})
    assert not allows({"arg": "n", "in": [0, 1]}, {"n": False})


def test_contains_any_all(allows: Allows) -> None:
    assert allows({"arg": "tags", "contains": "x"}, {"tags": ["y", "x"]})
    assert not allows({"arg": "tags", "contains": "x"}, {"tags": ["y"]})
    assert allows({"arg": "tags", "contains_any": ["a", "b"]}, {"tags": ["b"]})
    assert not allows({"arg": "tags", "contains_all": ["a", "b"]}, {"tags": ["b"]})
    assert allows({"arg": "tags", "contains_all": ["a", "b"]}, {"tags": ["b", "c", "a"]})
    # A string is not a list: "xyz" does not "contain" "x" here.
    assert not allows({"arg": "tags", "contains": "x"}, {"tags": "xyz"})


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, False),
        (0.01, True),
        (100, True),
        (100.5, False),
        (-5, False),
        (True, False),
        ("50", False),
        (None, False),
    ],
)
def test_number_bounds(allows: Allows, value: object, ok: bool) -> None:
    assert allows({"arg": "amount", "number": {"gt": 0, "max": 100}}, {"amount": value}) is ok


def test_number_min_lt(allows: Allows) -> None:
    cond = {"arg": "n", "number": {"min": 1, "lt": 10}}
    assert allows(cond, {"n": 1})
    assert allows(cond, {"n": 9.99})
    assert not allows(cond, {"n": 10})
    assert not allows(cond, {"n": 0.999})


def test_length_counts_characters_and_items_bytes_count_utf8(allows: Allows) -> None:
    assert allows({"arg": "s", "length": {"max": 3}}, {"s": "ééé"})
    assert not allows({"arg": "s", "bytes": {"max": 3}}, {"s": "ééé"})  # 6 bytes
    assert allows({"arg": "s", "bytes": {"max": 6}}, {"s": "ééé"})
    assert allows({"arg": "l", "length": {"min": 1, "max": 2}}, {"l": [1, 2]})
    assert not allows({"arg": "l", "length": {"min": 1}}, {"l": []})
    assert not allows({"arg": "n", "length": {"max": 10}}, {"n": 5})  # no length: error
    assert allows({"arg": "o", "bytes": {"max": 7}}, {"o": {"a": 1}})  # {"a":1} is 7 bytes
    assert not allows({"arg": "o", "bytes": {"max": 6}}, {"o": {"a": 1}})


ORDER = {"arg": "order", "matches": "ORD-[0-9]{6}"}


class TestRegex:
    @pytest.mark.parametrize("value", ["ORD-123456"])
    def test_whole_value_matches(self, allows: Allows, value: str) -> None:
        assert allows(ORDER, {"order": value})

    @pytest.mark.parametrize(
        "value",
        [
            "ORD-1234567",  # longer: a search would match, fullmatch does not
            "xORD-123456",
            "ORD-123456\n",  # '$' would accept a trailing newline
            "ORD-12345",
            "ORD-١٢٣٤٥٦",  # Arabic-Indic digits are not [0-9] even written as \d
        ],
    )
    def test_partial_or_foreign_values_do_not(self, allows: Allows, value: str) -> None:
        assert not allows(ORDER, {"order": value})
        assert not allows({"arg": "order", "matches": r"ORD-\d{6}"}, {"order": value})

    def test_unicode_opt_in(self, allows: Allows) -> None:
        cond = {"arg": "o", "matches": {"pattern": r"\d+", "unicode": True}}
        assert allows(cond, {"o": "١٢٣"})

    def test_input_over_cap_is_an_error_so_a_deny_rule_still_denies(self, denies: Denies) -> None:
        cond = {"arg": "body", "matches": {"pattern": ".*secret.*", "max_input": 64}}
        assert denies(cond, {"body": "ok"}).effect is Verdict.ALLOW
        assert denies(cond, {"body": "a secret"}).effect is Verdict.DENY
        # Padding past the cap does not dodge the deny rule: it fails closed.
        padded = denies(cond, {"body": "x" * 100})
        assert padded.effect is Verdict.DENY
        assert padded.rule_ids == ("r",)
        assert padded.rules[0].truth is Truth.ERROR
        assert "longer than 64 characters" in padded.reasons[0]

    def test_non_string_is_error(self, allows: Allows) -> None:
        assert not allows(ORDER, {"order": 123456})

    @pytest.mark.parametrize(
        ("pattern", "message"),
        [
            ("(a+)+b", "nested repetition"),
            (r"(\w+\s?)*", "nested repetition"),
            ("x" * 513, "longer than 512"),
            ("(unclosed", "invalid regular expression"),
        ],
    )
    def test_dangerous_or_broken_patterns_are_load_errors(self, pattern: str, message: str) -> None:
        with pytest.raises(PolicyLoadError) as info:
            one_rule_policy({"arg": "x", "matches": pattern})
        assert message in str(info.value)
        assert info.value.key == "tools.t.rules[0].when[0].matches"

    def test_atomic_and_possessive_forms_are_accepted(self, allows: Allows) -> None:
        assert allows({"arg": "x", "matches": "(?>a+)+b"}, {"x": "aab"})
        assert allows({"arg": "x", "matches": "(a++)+b"}, {"x": "aab"})
        assert allows({"arg": "x", "matches": r"[0-9]{1,3}(\.[0-9]{1,3}){3}"}, {"x": "1.2.3.4"})


def test_absent_and_present(allows: Allows) -> None:
    assert allows({"arg": "cc", "absent": True}, {})
    assert not allows({"arg": "cc", "absent": True}, {"cc": None})  # null is present
    assert allows({"arg": "cc", "absent": False}, {"cc": None})
    assert not allows({"arg": "cc", "absent": False}, {})
    assert allows({"arg": "a.b", "absent": True}, {"a": {"c": 1}})
    assert allows({"arg": "a.b", "absent": True}, {"a": "not an object"})


def test_missing_field_is_false_not_error(denies: Denies) -> None:
    # A deny rule on an optional field does not fire when the field is not sent.
    decision = denies({"arg": "cc", "email_domain": ["evil.com"]}, {"to": "a@example.com"})
    assert decision.effect is Verdict.ALLOW
    assert decision.rules[0].truth is Truth.FALSE


def test_paths_index_lists_and_json_pointer(allows: Allows) -> None:
    assert allows({"arg": "items.1.sku", "equals": "B"}, {"items": [{"sku": "A"}, {"sku": "B"}]})
    assert not allows({"arg": "items.01.sku", "equals": "B"}, {"items": [{}, {"sku": "B"}]})
    assert allows({"arg": "/odd.key/x", "equals": 1}, {"odd.key": {"x": 1}})


EACH_INTERNAL = {
    "arg": "recipients",
    "each": {"email_domain": ["example.com"]},
}


class TestEachSome:
    def test_each_needs_every_element(self, allows: Allows) -> None:
        assert allows(EACH_INTERNAL, {"recipients": ["a@example.com", "b@example.com"]})
        assert not allows(EACH_INTERNAL, {"recipients": ["a@example.com", "b@evil.com"]})

    def test_each_is_false_on_empty_and_non_lists(self, allows: Allows) -> None:
        assert not allows(EACH_INTERNAL, {"recipients": []})
        assert not allows(EACH_INTERNAL, {"recipients": "a@example.com"})
        assert not allows(EACH_INTERNAL, {})

    def test_each_with_field_and_nested_combinators(self, allows: Allows) -> None:
        cond = {
            "arg": "lines",
            "each": {
                "all": [
                    {"field": "qty", "number": {"min": 1, "max": 10}},
                    {"field": "sku", "matches": "[A-Z]{3}"},
                ]
            },
        }
        assert allows(cond, {"lines": [{"qty": 1, "sku": "ABC"}, {"qty": 10, "sku": "XYZ"}]})
        assert not allows(cond, {"lines": [{"qty": 1, "sku": "ABC"}, {"qty": 11, "sku": "XYZ"}]})

    def test_some_needs_one(self, allows: Allows, denies: Denies) -> None:
        some = {"arg": "recipients", "some": {"not": {"email_domain": ["example.com"]}}}
        assert allows(some, {"recipients": ["a@example.com", "x@evil.com"]})
        assert not allows(some, {"recipients": ["a@example.com"]})
        assert not allows(some, {"recipients": []})
        # As a deny rule: one bad element is enough, one broken element fails closed.
        assert denies(some, {"recipients": ["a@example.com"]}).effect is Verdict.ALLOW
        assert denies(some, {"recipients": ["a@example.com", "x@evil.com"]}).effect is (
            Verdict.DENY
        )
        assert denies(some, {"recipients": ["a@example.com", "a@b.com@evil.com"]}).effect is (
            Verdict.DENY
        )


class TestCombinators:
    def test_any_all_not(self, allows: Allows) -> None:
        cond = {
            "any": [
                {"arg": "a", "equals": 1},
                {"all": [{"arg": "b", "equals": 2}, {"not": {"arg": "c", "equals": 3}}]},
            ]
        }
        assert allows(cond, {"a": 1})
        assert allows(cond, {"b": 2, "c": 4})
        assert not allows(cond, {"b": 2, "c": 3})
        assert not allows(cond, {})

    def test_not_of_an_error_stays_an_error(self, denies: Denies) -> None:
        # "deny unless the URL is on our host": an unparseable URL must deny, not slip by.
        cond = {"not": {"arg": "url", "url": {"hosts": ["api.example.com"]}}}
        assert denies(cond, {"url": "https://api.example.com/x"}).effect is Verdict.ALLOW
        assert denies(cond, {"url": "https://evil.com/x"}).effect is Verdict.DENY
        broken = denies(cond, {"url": "https://api.example.com@evil.com/"})
        assert broken.effect is Verdict.DENY
        assert broken.rules[0].truth is Truth.ERROR

    def test_an_error_in_an_allow_rule_never_allows(self, allows: Allows) -> None:
        cond = {"any": [{"arg": "n", "number": {"max": 5}}, {"arg": "m", "equals": 1}]}
        assert not allows(cond, {"n": "not a number"})
        assert allows(cond, {"n": "not a number", "m": 1})  # another branch truly holds


class TestSubjects:
    def test_principal_roles_and_attributes(self, allows: Allows) -> None:
        cond = {"principal": "roles", "contains_any": ["finance", "admin"]}
        assert allows(cond, {}, principal=Principal(roles={"finance"}))
        assert not allows(cond, {}, principal=Principal(roles={"support"}))
        assert not allows(cond, {})  # no principal: no roles
        cond = {"principal": "attributes.region", "in": ["eu", "uk"]}
        assert allows(cond, {}, principal=Principal(attributes={"region": "eu"}))
        assert not allows(cond, {}, principal=Principal(attributes={"region": "us"}))
        assert allows({"principal": "id", "equals": "u1"}, {}, principal=Principal(id="u1"))

    def test_arguments_cannot_impersonate_the_principal(self, allows: Allows) -> None:
        cond = {"principal": "roles", "contains": "admin"}
        assert not allows(cond, {"roles": ["admin"], "principal": {"roles": ["admin"]}})

    def test_task_subject(self, allows: Allows) -> None:
        cond = {"task": "attributes.channel", "equals": "email"}
        assert allows(cond, {}, task_scope=TaskScope(attributes={"channel": "email"}))
        assert not allows(cond, {}, task_scope=TaskScope(attributes={"channel": "chat"}))
        assert not allows(cond, {})
