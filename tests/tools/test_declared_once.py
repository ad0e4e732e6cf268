"""Tools declared once: a typed function is its schema, and every API gets that schema."""

from __future__ import annotations

import asyncio
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import pytest
from anthropic.types import ToolParam
from mcp.types import Tool as McpTool
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam
from pydantic import BaseModel, Field, TypeAdapter

from agent_gate import Gate, ToolRegistry
from agent_gate.errors import UnknownProviderError
from agent_gate.tools import ArgumentsInvalid, Effect, Idempotency, ToolDefinitionError
from agent_gate.tools.definitions import DEFINITION_FORMATS


class Args(BaseModel):
    n: int


def declared() -> tuple[ToolRegistry, list[tuple[str, Any]]]:
    tools = ToolRegistry()
    seen: list[tuple[str, Any]] = []

    @tools.tool(effect="write", idempotency="key")
    def refund(
        order: Annotated[str, Field(pattern=r"^o-\d+$", description="the order id")],
        cents: Annotated[int, Field(gt=0, le=10_000)],
        on: date | None = None,
    ) -> str:
        """Refund part of an order.

        Refunds go back to the card the order was paid with.
        """
        seen.append(("refund", (order, cents, on)))
        return f"refunded {cents}"

    @tools.tool
    async def weather(city: str, days: int = 3) -> str:
        """Look the weather up."""
        seen.append(("weather", (city, days)))
        return f"{city}:{days}"

    return tools, seen


def test_a_typed_function_declares_its_schema_from_hints_and_docstring() -> None:
    tools, _ = declared()
    spec = tools["refund"].spec
    props = spec.schema["properties"]
    assert spec.schema["required"] == ["order", "cents"]
    assert spec.schema["additionalProperties"] is False
    assert props["order"]["pattern"] == r"^o-\d+$"
    assert props["order"]["description"] == "the order id"
    assert (props["cents"]["exclusiveMinimum"], props["cents"]["maximum"]) == (0, 10_000)
    assert spec.description is not None and spec.description.startswith("Refund part")
    assert (spec.effect, spec.idempotency) == (Effect.WRITE, Idempotency.KEY)
    assert tools["weather"].is_async


def test_constraints_are_enforced_without_values_in_the_error() -> None:
    tools, _ = declared()
    with pytest.raises(ArgumentsInvalid) as info:
        tools.validate("refund", {"order": "o-1", "cents": 0, "extra": "secret-xyz"})
    assert {(e.pointer, e.keyword) for e in info.value.errors} == {
        ("", "additionalProperties"), ("/cents", "exclusiveMinimum"),
    }
    assert "secret-xyz" not in str(info.value)


def test_the_gate_hands_the_function_its_coerced_keyword_arguments(tmp_path: Path) -> None:
    tools, seen = declared()
    with Gate(tools, f"sqlite:///{tmp_path / 'l.db'}", create=True) as gate:
        out = gate.execute("t", {"call_id": "c1", "name": "refund",
                                 "arguments": {"order": "o-7", "cents": 250, "on": "2026-01-02"}})
        assert out.result == "refunded 250"
        assert seen == [("refund", ("o-7", 250, date(2026, 1, 2)))]
        # The same call again is answered from the ledger: the function ran once.
        again = gate.execute("t", {"call_id": "c1", "name": "refund",
                                   "arguments": {"order": "o-7", "cents": 250, "on": "2026-01-02"}})
        assert again.replayed and len(seen) == 1
        weather = asyncio.run(gate.aexecute("t", {"call_id": "c2", "name": "weather",
                                                  "arguments": {"city": "Oslo"}}))
        assert weather.result == "Oslo:3"
        bad = gate.execute("t", {"call_id": "c3", "name": "refund",
                                 "arguments": {"order": "x", "cents": 5}})
        assert bad.state.value == "rejected" and len(seen) == 2


def test_an_explicit_schema_still_wins_and_a_model_parameter_still_gets_the_model() -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    def explicit(**kwargs: Any) -> Any:
        return kwargs

    @tools.tool
    def modelled(args: Args) -> int:
        return args.n

    explicit_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert tools["explicit"].spec.schema == explicit_schema
    assert tools["explicit"].invoke(tools.validate("explicit", {"n": 1})) == {"n": 1}
    assert tools["modelled"].spec.model is Args
    assert tools["modelled"].invoke(tools.validate("modelled", {"n": 4})) == 4


@pytest.mark.parametrize(
    "source, problem",
    [
        ("def f(*args: int) -> None: ...", "parameter 'args' cannot be a JSON object member"),
        ("def f(**kw: int) -> None: ...", "parameter 'kw' cannot be a JSON object member"),
        ("def f(a: int, /) -> None: ...", "parameter 'a' cannot be a JSON object member"),
        ("def f(a) -> None: ...", "parameter 'a' needs a type hint"),
        ("def f(a: 'Missing') -> None: ...", "cannot resolve annotations"),
    ],
)
def test_signatures_that_are_not_a_json_object_are_refused(source: str, problem: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    tools = ToolRegistry()
    with pytest.raises(ToolDefinitionError, match=problem):
        tools.register(namespace["f"])
    assert "f" not in tools


def test_each_api_gets_its_own_shape_of_the_one_schema() -> None:
    tools, _ = declared()
    schema = dict(tools["refund"].spec.schema)

    responses = tools.definitions("openai-responses")
    for item in responses:
        TypeAdapter(FunctionToolParam).validate_python(item)
    assert responses[0]["parameters"] == schema and responses[0]["strict"] is False

    chat = tools.definitions("openai-chat")
    for item in chat:
        TypeAdapter(ChatCompletionFunctionToolParam).validate_python(item)
    assert chat[0]["function"]["parameters"] == schema

    anthropic = tools.definitions("anthropic")
    for item in anthropic:
        TypeAdapter(ToolParam).validate_python(item)
    assert anthropic[0]["input_schema"] == schema

    (gemini,) = tools.definitions("gemini")
    assert [d["name"] for d in gemini["functionDeclarations"]] == ["refund", "weather"]
    assert gemini["functionDeclarations"][0]["parametersJsonSchema"] == schema

    mcp_tools = [McpTool.model_validate(t) for t in tools.definitions("mcp")]
    assert mcp_tools[0].input_schema == schema
    hints = mcp_tools[0].annotations
    assert hints is not None
    assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
        False, False, False,
    )
    assert mcp_tools[1].annotations is not None and mcp_tools[1].annotations.read_only_hint


def test_definitions_are_copies_and_unknown_providers_are_named() -> None:
    tools, _ = declared()
    tools.definitions("anthropic")[0]["input_schema"]["properties"].clear()
    assert "order" in tools["refund"].spec.schema["properties"]
    with pytest.raises(UnknownProviderError) as info:
        tools.definitions("cohere")
    assert info.value.known == DEFINITION_FORMATS
    assert ToolRegistry().definitions("gemini") == []
