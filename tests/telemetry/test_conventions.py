"""The GenAI attribute names agent-gate sets are the semantic conventions' own."""

from __future__ import annotations

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes import error_attributes

from agent_gate.telemetry import otel


def test_every_gen_ai_attribute_is_the_conventions_name() -> None:
    for constant, name in otel.GEN_AI.items():
        assert getattr(gen_ai_attributes, constant) == name
    assert gen_ai_attributes.GenAiOperationNameValues.EXECUTE_TOOL.value == otel.EXECUTE_TOOL
    assert error_attributes.ERROR_TYPE == otel.ERROR_TYPE
