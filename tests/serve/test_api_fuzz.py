"""The JSON API fuzzed from its own OpenAPI schema, over real HTTP (hypothesis).

Every operation the served schema (``/openapi.json``, read with a token) declares is
called with values drawn from what the schema says each parameter and body field is
(and, as often, from what it is not: any integer, any text with NUL and control
characters, the wrong type, unknown fields, JSON with NaN and Infinity). A bounded,
derandomized run: whatever is sent, no 5xx, the security headers on every answer, no
answer that quotes a redacted value, and the same request without a token is 401.

Why not schemathesis, which the issue named: no release installs beside this project's
pins. From 4.25 it requires jsonschema-rs < 0.61 (the project vets 0.61; 4.32.5,
installed over that pin by hand, did generate for every operation here, so the pin is
all that stands in the way); 4.24 calls ``CanonicalSchema.is_satisfiable``, gone in
0.61; up to 4.23 it generates through hypothesis-jsonschema 0.23.1, which calls a
Hypothesis internal (``many.more``) the Hypothesis this suite uses no longer has.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_world import Running, World, serving

from agent_gate import Gate
from agent_gate.serve.headers import SECURITY_HEADERS

pytestmark = pytest.mark.slow

SECRET = "TOPSECRET-7d1c"
"""A redacted field's value: stored sealed, shown as a stand-in, never in an answer."""

REDACTING = """
version: 1
tools:
  send_email:
    effect: write
    idempotency: none
    redact: [body]
    rules:
      - {id: mail-needs-a-person, effect: approve, reason: A person reads every mail.}
"""

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["", "\x00", "a\x00b", "../x", "%2e%2e/", "?#&=", "\u202e", "t1", "mail-1", "x" * 300])
_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8)


def value_of(schema: dict[str, Any], components: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value for ``schema``, or (as often) one that breaks it."""
    if "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    options = schema.get("anyOf") or [schema]
    fitting: list[st.SearchStrategy[Any]] = []
    for s in options:
        kind = s.get("type")
        if "enum" in s or "const" in s:
            fitting.append(st.sampled_from(s.get("enum") or [s.get("const")]))
        elif kind == "integer":
            fitting.append(st.integers(s.get("minimum", -(2**70)), s.get("maximum", 2**70)))
        elif kind == "number":
            fitting.append(st.floats(s.get("exclusiveMinimum", s.get("minimum")),
                                     allow_nan=False, allow_infinity=False))
        elif kind == "string":
            pattern = s.get("pattern")
            fitting.append(st.from_regex(pattern, fullmatch=True) if pattern else _TEXT)
        elif kind == "boolean":
            fitting.append(st.booleans())
        elif kind == "null":
            fitting.append(st.none())
        elif kind == "object":
            fitting.append(body_of(s, components))
        else:
            fitting.append(_ANY_JSON)
    return st.one_of(*fitting) | _ANY_JSON | st.integers() | _TEXT


def body_of(schema: dict[str, Any], components: dict[str, Any]) -> st.SearchStrategy[Any]:
    props = schema.get("properties", {})
    required = [k for k in schema.get("required", [])]
    return st.fixed_dictionaries(
        {k: value_of(props[k], components) for k in required},
        optional={**{k: value_of(v, components) for k, v in props.items()
                     if k not in required}, "task": _TEXT, "extra": _ANY_JSON})


def requests_of(schema: dict[str, Any]) -> st.SearchStrategy[tuple[str, str, dict, Any]]:
    """(method, path, query, body) for every operation of the schema."""
    components = schema.get("components", {}).get("schemas", {})
    each = []
    for path, methods in schema["paths"].items():
        for method, op in methods.items():
            params = op.get("parameters", [])
            in_path = {p["name"]: value_of(p["schema"], components)
                       for p in params if p["in"] == "path"}
            in_query = {p["name"]: value_of(p["schema"], components)
                        for p in params if p["in"] == "query"}
            content = op.get("requestBody", {}).get("content", {}).get("application/json")
            body = (value_of(content["schema"], components) | st.sampled_from(
                [b'{"expires_in": NaN}', b'{"result": [Infinity]}', b"{", b"[" * 5000])
                    ) if content else st.none()
            each.append(st.tuples(
                st.just(method.upper()),
                st.fixed_dictionaries(in_path).map(lambda v, p=path: p.format(**{
                    k: quote(str(x), safe="") for k, x in v.items()})),
                st.fixed_dictionaries({}, optional=in_query), body))
    return st.one_of(each)


def recorded(world: World, policy: Path) -> None:
    """A call with a redacted field waiting, a call in doubt, beside the world's mail."""
    with Gate(world.tools(), world.url, policy=str(policy)) as gate:
        out = gate.execute("t6", {"call_id": "secret-1", "name": "send_email",
                                  "arguments": {"to": "x@y.org", "subject": "s",
                                                "body": SECRET}})
    assert out.state.value == "awaiting_approval"
    assert world.call("t2", "charge-1", "charge_card", {"order": "o-7"}) == "in_doubt"


def send(http: httpx.Client, method: str, path: str, query: dict[str, Any], body: Any,
         headers: dict[str, str]) -> httpx.Response:
    params = {k: v if isinstance(v, str) else json.dumps(v) for k, v in query.items()}
    content = body if isinstance(body, bytes) else (
        json.dumps(body).encode() if body is not None else None)
    kind = {"Content-Type": "application/json"} if content is not None else {}
    return http.request(method, path, params=params, content=content,
                        headers={**headers, **kind})


def test_the_api_under_fuzzing(world: World, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_GATE_SEAL_KEY", "5e" * 32)
    policy = tmp_path / "redacting.yaml"
    policy.write_text(REDACTING)
    recorded(world, policy)
    auth = {"Authorization": f"Bearer {world.tokens['carol']}"}
    with serving(world) as server, httpx.Client(base_url=server.base, timeout=30) as http:
        schema = http.get("/openapi.json", headers=auth).json()
        assert len([m for p in schema["paths"].values() for m in p]) >= 13
        seen: set[tuple[str, str, int]] = set()

        @settings(max_examples=250, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(requests_of(schema))
        def fuzz(request: tuple[str, str, dict[str, Any], Any]) -> None:
            method, path, query, body = request
            answered = send(http, method, path, query, body, auth)
            where = (method, path, query)
            assert answered.status_code < 500, (*where, answered.text[:300])
            assert SECRET not in answered.text, where
            for name, value in SECURITY_HEADERS.items():
                assert answered.headers.get(name) == value, (*where, name)
            anonymous = send(http, method, path, query, body, {})
            no_route = {"detail": "Not Found"}  # an empty path parameter: no route matches
            if path != "/health" and not (anonymous.status_code == answered.status_code == 404
                                          and answered.json() == anonymous.json() == no_route):
                assert anonymous.status_code == 401, where
            seen.add((method, path.split("/")[2] if path.count("/") > 1 else path,
                      answered.status_code))

        fuzz()
    statuses = {s for _, _, s in seen}
    assert {200, 404, 422} <= statuses, seen  # it reached real answers, not only refusals
    _ = Running  # the fixture type the serving helper yields
