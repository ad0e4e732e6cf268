"""``agent-gate mcp check``: what the proxy would offer of an upstream, and why not the rest.

The proxy leaves a tool out rather than stop: an entry of the upstream's list that is
not a tool at all (no ``inputSchema``...), a schema the gate cannot check, a tool the
policy does not name. Each is one warning on the proxy's stderr, easily missed; this
lists them all at once, before a client finds a tool missing.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import mcp.types as mt

from agent_gate.gate import Gate
from agent_gate.integrations.mcp.calls import GatedCalls
from agent_gate.integrations.mcp.proxy import ProxyConfig, connect_upstream
from agent_gate.tools import ToolRegistry

__all__ = ["CheckReport", "check_upstream"]

NOT_NAMED = "the policy does not name it (a tool it does not name is denied)"


@dataclass(frozen=True, slots=True)
class CheckReport:
    """What the proxy would offer of an upstream."""

    server: str
    features: tuple[str, ...]
    """The upstream's capabilities, which the proxy forwards and advertises."""
    offered: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]
    """(tool, why) for each tool the upstream lists that the proxy would not offer."""

    @property
    def broken(self) -> tuple[tuple[str, str], ...]:
        """Tools left out for what they are, not because the policy does not name them."""
        return tuple((name, why) for name, why in self.left_out if why != NOT_NAMED)


async def check_upstream(policy: str | Path, config: ProxyConfig) -> CheckReport:
    """Connect to ``config``'s upstream once and judge its tools as the proxy would.
    ``UpstreamUnavailable`` (one line) when it cannot be reached."""
    with tempfile.TemporaryDirectory(prefix="agent-gate-check-") as tmp:
        db = f"sqlite:///{Path(tmp) / 'check.db'}"
        with Gate(ToolRegistry(), db, policy=policy, create=True) as gate:
            async with connect_upstream(config) as session:
                calls = GatedCalls(gate, session, dedupe=config.dedupe)
                tools = await calls.load_tools()
                shown = {t.name for t in calls.visible(tools)}
                left_out = list(calls.registered.refused)
                left_out += [(t.name, NOT_NAMED) for t in tools
                             if t.name in gate.tools and t.name not in shown]
                info = session.initialize_result
                name = info.server_info.name if info is not None else "upstream"
                return CheckReport(name, _features(session.server_capabilities),
                                   tuple(t.name for t in tools if t.name in shown),
                                   tuple(left_out))


def _features(caps: mt.ServerCapabilities | None) -> tuple[str, ...]:
    if caps is None:
        return ()
    said: list[str] = []
    if caps.tools is not None:
        said.append("tools")
    if caps.resources is not None:
        said.append("resources (subscribe)" if caps.resources.subscribe else "resources")
    for feature in ("prompts", "logging", "completions"):
        if getattr(caps, feature) is not None:
            said.append(feature)
    return tuple(said)
