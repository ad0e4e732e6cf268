"""The gate where tools are really dispatched: MCP, agent frameworks, durable engines.

Each module adapts one outside package (the ``mcp`` SDK, the OpenAI Agents SDK,
pydantic-ai, LangGraph, DBOS, Celery) to an ordinary :class:`agent_gate.Gate`, taking each tool's
schema from the framework's own definition so that nothing is declared twice. Every
module imports its framework lazily and is an optional extra: importing this package
costs nothing when none is installed.
"""
