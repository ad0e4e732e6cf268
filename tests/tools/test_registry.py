"""The tool registry: declaring tools, and validating arguments without leaking them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel, Field, field_validator

from agent_gate import ToolRegistry
from agent_gate.tools import (
    ArgumentError,
    ArgumentsInvalid,
    ArgumentsNotObject,
    Effect,
    Idempotency,
    ToolDefinitionError,
    UnknownTool,
)

SEND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "format": "email"},
        "subject": {"type": "string", "maxLength": 20},
        "amount": {"type": "integer", "minimum": 1},
        "items": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["to", "subject"],
    "additionalProperties": False,
}


def make_registry() -> ToolRegistry:
    tools = ToolRegistry()

    @tools.tool(schema=SEND_SCHEMA, effect="write", idempotency="none", dedupe=["to", "subject"])
    def send_mail(to: str, subject: str, amount: int = 1, items: list[str] | None = None) -> str:
        """Send one e-mail."""
        return f"sent {subject}"

    return tools


def test_decorator_registers_spec_and_returns_function_unchanged() -> None:
    tools = make_registry()
    tool = tools["send_mail"]
    assert tool.spec.effect is Effect.WRITE
    assert tool.spec.idempotency is Idempotency.NONE
    assert tool.spec.dedupe == ("to", "subject")
    assert tool.spec.description == "Send one e-mail."
    assert tools.names() == ["send_mail"]
    assert "send_mail" in tools and "other" not in tools
    # The decorated function is still a plain function.
    validated = tools.validate("send_mail", {"to": "a@example.com", "subject": "hi"})
    assert tool.invoke(validated) == "sent hi"


def test_validator_is_compiled_once_per_tool() -> None:
    tools = make_registry()
    tool = tools["send_mail"]
    first = tool.validator
    for _ in range(3):
        tool.validate({"to": "a@example.com", "subject": "hi"})
    assert tool.validator is first


def test_errors_give_pointers_and_keywords_never_values() -> None:
    tools = make_registry()
    secret = "top-secret-subject-line-that-is-long"
    with pytest.raises(ArgumentsInvalid) as info:
        tools.validate(
            "send_mail",
            {"to": "not-an-email", "subject": secret, "amount": 0, "items": ["ok", 7], "zz": 1},
        )
    errors = info.value.errors
    assert ArgumentError("/to", "format") in errors
    assert ArgumentError("/subject", "maxLength") in errors
    assert ArgumentError("/amount", "minimum") in errors
    assert ArgumentError("/items/1", "type") in errors
    assert ArgumentError("", "additionalProperties") in errors
    text = str(info.value)
    assert "/amount (minimum)" in text
    for value in (secret, "not-an-email"):
        assert value not in text
        assert all(value not in str(e) for e in errors)


def test_missing_required_points_at_the_missing_member() -> None:
    tools = make_registry()
    with pytest.raises(ArgumentsInvalid) as info:
        tools.validate("send_mail", {"to": "a@example.com"})
    assert info.value.errors == (ArgumentError("/subject", "required"),)


def test_pointer_escapes_slash_and_tilde() -> None:
    tools = ToolRegistry()
    tools.register(
        lambda **kw: None,
        name="t",
        schema={"type": "object", "properties": {"a/b~c": {"type": "integer"}}},
    )
    with pytest.raises(ArgumentsInvalid) as info:
        tools.validate("t", {"a/b~c": "x"})
    assert info.value.errors == (ArgumentError("/a~1b~0c", "type"),)


@pytest.mark.parametrize(
    ("value", "json_type"),
    [([1, 2], "array"), ("text", "string"), (3, "number"), (None, "null"), (True, "boolean")],
)
def test_arguments_must_be_an_object(value: object, json_type: str) -> None:
    tools = make_registry()
    with pytest.raises(ArgumentsNotObject) as info:
        tools.validate("send_mail", value)
    assert info.value.json_type == json_type
    assert f"JSON {json_type}" in str(info.value)


def test_unknown_tool() -> None:
    tools = make_registry()
    with pytest.raises(UnknownTool) as info:
        tools.validate("drop_tables", {})
    assert info.value.name == "drop_tables"
    assert tools.get("drop_tables") is None


def test_format_checking_uses_2020_12_formats() -> None:
    tools = ToolRegistry()
    tools.register(
        lambda **kw: None,
        name="t",
        schema={
            "type": "object",
            "properties": {
                "when": {"type": "string", "format": "date-time"},
                "site": {"type": "string", "format": "uri"},
            },
        },
    )
    tools.validate("t", {"when": "2024-01-02T03:04:05Z", "site": "https://example.com/x"})
    with pytest.raises(ArgumentsInvalid) as info:
        tools.validate("t", {"when": "yesterday", "site": "not a uri"})
    assert {(e.pointer, e.keyword) for e in info.value.errors} == {
        ("/when", "format"),
        ("/site", "format"),
    }


class Refund(BaseModel):
    order_id: str
    amount: int = Field(gt=0)

    @field_validator("order_id")
    @classmethod
    def known_prefix(cls, v: str) -> str:
        if not v.startswith("ord_"):
            raise ValueError("bad order")
        return v


def test_pydantic_model_schema_and_instance() -> None:
    tools = ToolRegistry()
    received: list[Refund] = []

    @tools.tool(effect="write", idempotency="key")
    def refund(req: Refund) -> int:
        received.append(req)
        return req.amount

    tool = tools["refund"]
    assert tool.spec.model is Refund
    assert tool.spec.schema["properties"]["amount"]["exclusiveMinimum"] == 0
    value = tools.validate("refund", {"order_id": "ord_1", "amount": 5})
    assert isinstance(value, Refund)
    assert tool.invoke(value) == 5
    assert received == [Refund(order_id="ord_1", amount=5)]

    with pytest.raises(ArgumentsInvalid) as info:
        tools.validate("refund", {"order_id": "ord_1", "amount": 0})
    assert info.value.errors == (ArgumentError("/amount", "exclusiveMinimum"),)
    # A pydantic-only rule (not expressible in JSON Schema) still reports a pointer.
    with pytest.raises(ArgumentsInvalid) as info:
        tools.validate("refund", {"order_id": "xx_secret_order", "amount": 3})
    assert info.value.errors == (ArgumentError("/order_id", "value_error"),)
    assert "xx_secret_order" not in str(info.value)


def test_async_tools_are_detected() -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"})
    async def fetch() -> str:
        return "ok"

    tool = tools["fetch"]
    assert tool.is_async
    assert asyncio.run(tool.invoke({})) == "ok"


def test_wrap_existing_dispatcher() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def dispatch(name: str, arguments: dict[str, Any]) -> str:
        seen.append((name, arguments))
        return name.upper()

    tools = ToolRegistry().wrap(
        dispatch,
        specs={
            "lookup": {"schema": {"type": "object", "properties": {"q": {"type": "string"}}}},
            "delete": {"schema": {"type": "object"}, "effect": "destructive",
                       "idempotency": "natural"},
        },
    )
    assert tools.names() == ["delete", "lookup"]
    assert tools["delete"].spec.effect is Effect.DESTRUCTIVE
    assert tools["lookup"].invoke(tools.validate("lookup", {"q": "x"})) == "LOOKUP"
    assert seen == [("lookup", {"q": "x"})]
    with pytest.raises(ArgumentsInvalid):
        tools.validate("lookup", {"q": 1})


def test_wrap_async_dispatcher() -> None:
    async def dispatch(name: str, arguments: dict[str, Any]) -> Any:
        return (name, arguments)

    tools = ToolRegistry().wrap(dispatch, specs={"a": {"schema": {"type": "object"}}})
    assert tools["a"].is_async
    assert asyncio.run(tools["a"].invoke({"x": 1})) == ("a", {"x": 1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"schema": {"type": "object", "properties": {"a": {"type": 5}}}},
            "not valid Draft 2020-12",
        ),
        ({"schema": {"type": "array"}}, "must describe a JSON object"),
        ({"schema": {"type": "object"}, "effect": "explode"}, "effect must be one of"),
        ({"schema": {"type": "object"}, "idempotency": "maybe"}, "idempotency must be one of"),
        ({"schema": {"type": "object", "properties": {"a": {}}}, "dedupe": ["b"]},
         "dedupe names arguments the schema does not declare: b"),
        ({"schema": {"type": "object"}, "dedupe": "a"}, "dedupe must be a non-empty list"),
        ({"schema": {"type": "object"}, "timeout": 0}, "timeout must be positive"),
        ({"schema": {"type": "object"}, "dispatch": "whenever"}, "dispatch must be one of"),
        ({"schema": "nope"}, "schema must be a JSON Schema dict or a pydantic model"),
    ],
)
def test_bad_definitions_fail_at_registration(kwargs: dict[str, Any], message: str) -> None:
    tools = ToolRegistry()
    with pytest.raises(ToolDefinitionError, match=message):
        tools.register(lambda **kw: None, name="t", **kwargs)
    assert "t" not in tools


def test_duplicate_name_and_missing_schema() -> None:
    tools = make_registry()
    with pytest.raises(ToolDefinitionError, match="already registered"):
        tools.register(lambda **kw: None, name="send_mail", schema={"type": "object"})

    with pytest.raises(ToolDefinitionError, match="needs a type hint, or give schema="):

        @tools.tool
        def no_schema(x) -> int:  # type: ignore[no-untyped-def]
            return x  # type: ignore[no-any-return]


def test_dispatch_accepts_enum_like_values() -> None:
    class Mode:
        value = "on_call_complete"

    tools = ToolRegistry()
    tools.register(lambda **kw: None, name="t", schema={"type": "object"}, dispatch=Mode())
    assert tools["t"].spec.dispatch == "on_call_complete"


def test_unknown_options_are_refused_by_every_declaration_form() -> None:
    tools = ToolRegistry()
    with pytest.raises(TypeError, match="efect"):
        tools.register(lambda **kw: None, name="t", schema={"type": "object"}, efect="write")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="efect"):
        tools.tool(name="u", schema={"type": "object"}, efect="write")(lambda **kw: None)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="efect"):
        tools.wrap(lambda name, args: None, {"v": {"schema": {"type": "object"}, "efect": "x"}})
    assert len(tools) == 0


def test_the_old_path_is_the_new_one() -> None:
    import agent_gate.schema as old
    import agent_gate.tools as new
    from agent_gate.errors import json_type_name

    for name in new.__all__:
        assert getattr(old, name) is getattr(new, name), name
    assert old.json_type_name is json_type_name
    assert set(old.__all__) == {*new.__all__, "json_type_name"}


@pytest.mark.parametrize(
    ("value", "json_type"),
    [
        ({"a": 1}, "object"),
        ((1, 2), "array"),
        (1.5, "number"),
        (b"x", "bytes"),
        (frozenset(), "frozenset"),
    ],
)
def test_json_type_name_never_shows_the_value(value: object, json_type: str) -> None:
    from agent_gate.errors import json_type_name

    assert json_type_name(value) == json_type


def test_error_code_names_the_type_never_the_text() -> None:
    from agent_gate.errors import error_code

    assert error_code(ValueError("ana@example.com")) == "ValueError"
    odd = type("x y@example.com", (Exception,), {})
    assert error_code(odd("text")) == "<unprintable>"
