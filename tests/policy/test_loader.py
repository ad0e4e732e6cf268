"""Load errors name file, line and key; the policy hash ignores formatting only."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent_gate.policy import Policy, PolicyLoadError


def load_error(text: str, tmp_path: Path, name: str = "p.yaml") -> PolicyLoadError:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(path)
    return info.value


GOOD = """
version: 1
tools:
  send_email:
    rules:
      - id: internal
        effect: allow
        when:
          - arg: to
            email_domain: [example.com]
"""


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        (  # misspelled predicate
            """
            version: 1
            tools:
              send_email:
                rules:
                  - id: internal
                    effect: allow
                    when:
                      - arg: to
                        regexp: '.*@example[.]com'
            """,
            9,
            "tools.send_email.rules[0].when[0].regexp",
            "unknown key: not a predicate",
        ),
        (  # misspelled key of a tool
            """
            version: 1
            tools:
              send_email:
                efect: write
            """,
            4,
            "tools.send_email.efect",
            "unknown key",
        ),
        (  # bad effect value
            """
            version: 1
            tools:
              send_email:
                rules:
                  - id: internal
                    effect: permit
            """,
            6,
            "tools.send_email.rules[0].effect",
            "'allow', 'approve' or 'deny'",
        ),
        (  # two predicates in one condition
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: allow
                    when:
                      - arg: n
                        number: {max: 5}
                        equals: 3
            """,
            8,
            "tools.t.rules[0].when[0]",
            "exactly one predicate",
        ),
        (  # required key missing: the parent's line, the missing key named
            """
            version: 1
            tools:
              t:
                rules:
                  - effect: allow
            """,
            5,
            "tools.t.rules[0].id",
            "required key is missing",
        ),
        (  # YAML would coerce; the model does not
            """
            version: 1
            tools:
              t:
                limits:
                  - id: l
                    max_calls: "5"
            """,
            6,
            "tools.t.limits[0].max_calls",
            "valid integer",
        ),
        (  # a CIDR with host bits
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: deny
                    when:
                      - arg: ip
                        ip_in:
                          - 10.0.0.0/8
                          - 192.168.1.1/16
            """,
            11,
            "tools.t.rules[0].when[0].ip_in[1]",
            "host bits set",
        ),
        (  # a YAML date is not a JSON value
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: allow
                    when:
                      - arg: day
                        equals: 2024-01-01
            """,
            9,
            "tools.t.rules[0].when[0].equals",
            "quote dates",
        ),
        (  # unsupported format version
            """
            version: 2
            tools: {}
            """,
            1,
            "version",
            "format version 1",
        ),
    ],
)
def test_shape_errors_name_file_line_and_key(
    tmp_path: Path, text: str, line: int, key: str, message: str
) -> None:
    error = load_error(text, tmp_path)
    problem = error.problems[0]
    assert (problem.source, problem.line, problem.key) == (str(tmp_path / "p.yaml"), line, key)
    assert message in problem.message
    # The exception's text is what a user sees: "file:line:column: key: message".
    assert str(error).startswith(f"{tmp_path / 'p.yaml'}:{line}:")
    assert f" {key}: " in str(error)


def test_all_problems_are_reported_in_line_order(tmp_path: Path) -> None:
    error = load_error(
        """
        version: 1
        tools:
          a:
            efect: read
          b:
            rules:
              - id: r
                effect: maybe
        """,
        tmp_path,
    )
    assert [(p.line, p.key) for p in error.problems] == [
        (4, "tools.a.efect"),
        (8, "tools.b.rules[0].effect"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        (  # duplicate mapping key: PyYAML would silently keep the last
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: deny
                    effect: allow
            """,
            7,
            "tools.t.rules[0].effect",
            "duplicate key",
        ),
        (
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: allow
                    when: &c
                      - arg: x
                        equals: 1
              u:
                rules:
                  - id: r2
                    effect: allow
                    when: *c
            """,
            14,
            "tools.u.rules[0].when",
            "aliases",
        ),
        (
            """
            version: 1
            tools:
              t: {rules: [{id: r, effect: allow}]
            """,
            4,
            "",
            "invalid YAML",
        ),
    ],
)
def test_yaml_level_errors_are_located(
    tmp_path: Path, text: str, line: int, key: str, message: str
) -> None:
    problem = load_error(text, tmp_path).problems[0]
    assert (problem.line, problem.key) == (line, key)
    assert message in problem.message


@pytest.mark.parametrize(
    ("text", "line", "key", "message"),
    [
        (
            """
            version: 1
            tools:
              t:
                rules:
                  - id: same
                    effect: allow
                limits:
                  - id: same
                    max_calls: 3
            """,
            8,
            "tools.t.limits[0].id",
            "duplicate id",
        ),
        (
            """
            version: 1
            scopes:
              triage:
                tools: [get_weather, get_wether]
            tools:
              get_weather: {}
            """,
            4,
            "scopes.triage.tools[1]",
            "does not declare",
        ),
        (
            """
            version: 1
            rules:
              - id: g
                effect: deny
                tools: [nope]
            tools:
              t: {}
            """,
            5,
            "rules[0].tools[0]",
            "does not declare",
        ),
        (
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: allow
                    when:
                      - field: x
                        equals: 1
            """,
            8,
            "tools.t.rules[0].when[0].field",
            "only meaningful inside each/some",
        ),
        (
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: allow
                    when:
                      - arg: items
                        each:
                          arg: price
                          number: {max: 5}
            """,
            10,
            "tools.t.rules[0].when[0].each.arg",
            "use 'field: <path>'",
        ),
        (
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: allow
                    when:
                      - equals: 1
            """,
            8,
            "tools.t.rules[0].when[0]",
            "needs a subject",
        ),
        (
            """
            version: 1
            tools:
              t:
                rules:
                  - id: r
                    effect: allow
                    when:
                      - principal: groups
                        contains: admin
            """,
            8,
            "tools.t.rules[0].when[0].principal",
            "must start with one of: id, roles, attributes",
        ),
    ],
)
def test_document_level_errors_are_located(
    tmp_path: Path, text: str, line: int, key: str, message: str
) -> None:
    problem = load_error(text, tmp_path).problems[0]
    assert (problem.line, problem.key) == (line, key)
    assert message in problem.message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty policy file"),
        (b"\xff\xfe version: 1", "not UTF-8"),
        (b"version: 1\ntools: {}\n---\nversion: 1\ntools: {}\n", "invalid YAML"),
        (b"- just\n- a list\n", "valid dictionary"),
        (b"version: 1\ntools: {}\nx: !!python/object:os.system {}\n", "invalid YAML"),
    ],
)
def test_file_level_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(path)
    assert message in str(info.value)
    assert info.value.source == str(path)


def test_missing_file_and_oversized_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError, match="cannot read"):
        Policy.load(tmp_path / "nope.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"version: 1\ntools: {}\n" + b"#" * (1 << 20))
    with pytest.raises(PolicyLoadError, match="larger than"):
        Policy.load(big)


def test_from_text_uses_the_given_source_name() -> None:
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_text("version: 1\ntools:\n  t:\n    bogus: 1\n", source="inline.yaml")
    assert str(info.value).startswith("inline.yaml:4:5: tools.t.bogus: unknown key")


REFORMATTED = """
# the same policy, written differently
tools:
  send_email:
    rules:
    - when: [{email_domain: [example.com], arg: to}]
      effect: allow        # comments don't matter
      id: internal
    redact: []             # an explicit default
version: 1
"""


def test_hash_ignores_formatting_but_not_meaning() -> None:
    base = Policy.from_text(textwrap.dedent(GOOD))
    same = Policy.from_text(REFORMATTED)
    assert base.hash == same.hash
    assert base.hash.startswith("sha256:") and len(base.hash) == len("sha256:") + 64
    assert base.source_sha256 != same.source_sha256  # the bytes differ
    changed = Policy.from_text(textwrap.dedent(GOOD).replace("example.com", "example.org"))
    assert changed.hash != base.hash
    decision = base.evaluate("send_email", {"to": "a@example.com"})
    assert decision.policy_hash == base.hash


def test_equals_null_and_contains_null_hash_differently() -> None:
    def with_condition(op: str) -> Policy:
        return Policy.from_text(
            "version: 1\ntools:\n  t:\n    rules:\n      - id: r\n        effect: allow\n"
            f"        when: [{{arg: x, {op}: null}}]\n"
        )

    assert with_condition("equals").hash != with_condition("contains").hash


@pytest.mark.parametrize("field", ["id", "uri", "reason"])
def test_the_mcp_section_is_as_strict_as_a_rule_about_text(field: str) -> None:
    """A ``!!binary`` value is not text: a rule's id refuses it, and so does every text
    of the ``mcp`` section (its ids are rule ids). The section once took bytes for
    text, so ``id: !!binary aGk=`` loaded as the rule ``hi``."""
    values = {"id": "reads", "uri": '"file:///*"', "reason": "ok"}
    values[field] = "!!binary aGk="
    text = ("version: 1\ntools: {}\nmcp:\n  resources:\n"
            f"    - {{id: {values['id']}, effect: allow, uri: {values['uri']}, "
            f"reason: {values['reason']}}}\n")
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_text(text, source="p.yaml")
    assert info.value.problems[0].key == f"mcp.resources[0].{field}"
    rule = "version: 1\ntools:\n  t:\n    rules: [{id: !!binary aGk=, effect: allow}]\n"
    with pytest.raises(PolicyLoadError):
        Policy.from_text(rule, source="p.yaml")
