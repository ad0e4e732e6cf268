"""Each transition a gate commits reaches OpenTelemetry as a log record (the SDK's logging
bridge on the ``agent_gate.gate`` logger), with ids and states and no argument value: what
a collector ships beside the trail's OCSF feed."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_gate import Gate, ToolRegistry

SECRET = "PLUM-ORCHID-7731"


@pytest.fixture
def exported() -> Iterator[Any]:
    """The SDK's in-memory exporter behind a LoggingHandler on the gate's logger."""
    from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
    logger = logging.getLogger("agent_gate.gate")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield exporter
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        provider.shutdown()


def test_each_transition_is_one_log_record_without_arguments(
    tmp_path: Path, exported: Any
) -> None:
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object"}, effect="write")
    def send(note: str) -> dict[str, bool]:
        return {"sent": True}

    with Gate(tools, f"sqlite:///{tmp_path / 'ledger.db'}", create=True) as gate:
        outcome = gate.execute("t1", {"call_id": "c1", "name": "send",
                                      "arguments": {"note": SECRET}})
        assert outcome.state.value == "succeeded"
    records = exported.get_finished_logs()
    states = [r.log_record.attributes.get("state") for r in records
              if r.log_record.attributes.get("call_id") == "c1"]
    assert states[0] == "received" and states[-1] == "succeeded"
    assert "executing" in states
    for r in records:
        attrs = dict(r.log_record.attributes)
        assert attrs.get("task_id") == "t1" and attrs.get("tool") == "send"
        assert SECRET not in str(r.log_record.body) and SECRET not in str(attrs)

