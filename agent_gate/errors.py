"""The one base error every agent-gate failure derives from.

Callers catch ``AgentGateError`` to handle anything the gate refuses, without
catching unrelated bugs. Messages carry counts, offsets, indexes and ids, never
payload text: errors end up in logs, and logs are not where arguments go.
"""

from __future__ import annotations


class AgentGateError(Exception):
    """Base class of every error agent-gate raises on purpose."""
