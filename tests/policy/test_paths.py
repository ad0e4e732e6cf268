"""``policy.paths``: how a policy names a field inside a call's arguments.

What a wrong answer would cost: a path that silently addresses another element
(``01`` read as ``1``, ``-1`` as the last item) lets a condition judge a value the
author never meant, and a pointer escape decoded in the wrong order reaches another
key. These are the module's own rules, checked directly on plain values.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_gate.policy.paths import MISSING, display, iter_matches, parse_path, resolve

ARGS: dict[str, Any] = {
    "recipient": {"email": "a@example.com"},
    "items": [{"price": 5}, {"price": 7}],
    "odd.key": {"a/b": 1, "~t": 2},
    "empty": None,
}


@pytest.mark.parametrize(("text", "expected"), [
    ("recipient.email", "a@example.com"),
    ("items.1.price", 7),
    ("/odd.key/a~1b", 1),  # ~1 is "/"
    ("/odd.key/~0t", 2),  # ~0 is "~"
    ("empty", None),  # present, null: not MISSING
])
def test_a_path_reaches_the_value_it_names(text: str, expected: object) -> None:
    assert resolve(ARGS, parse_path(text)) == expected


@pytest.mark.parametrize("text", [
    "items.01.price",  # not canonical: never the element at 1
    "items.-1.price",  # no counting from the end
    "items.2.price",  # past the end
    "items.price",  # a key on a list
    "recipient.email.domain",  # into a string
    "nobody",
])
def test_a_path_that_fits_nothing_is_missing_not_an_error(text: str) -> None:
    found = resolve(ARGS, parse_path(text))
    assert found is MISSING and not found


@pytest.mark.parametrize(("text", "reason"), [
    ("", "must not be empty"),
    ("a..b", "empty segment"),
    ("items.*.price", "only allowed in redaction paths"),
    (".".join("a" * 33), "deeper than 32"),
])
def test_a_path_a_policy_may_not_use_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_path(text)


def test_the_wildcard_reaches_every_element_for_redaction() -> None:
    path = parse_path("items.*.price", wildcard=True)
    assert [container[key] for container, key in iter_matches(ARGS, path)] == [5, 7]
    assert list(iter_matches(ARGS, parse_path("items.01.price", wildcard=True))) == []


@pytest.mark.parametrize("text", ["recipient.email", "/odd.key/a~1b", "/odd.key/~0t"])
def test_a_path_is_displayed_so_that_it_parses_back(text: str) -> None:
    assert display(parse_path(text)) == text
