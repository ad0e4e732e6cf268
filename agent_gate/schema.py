"""The old path of the tool registry and argument validation: ``agent_gate.tools``.

Everything here lives in ``agent_gate.tools`` now (spec, registry, validate,
models, errors); this module only re-exports its public names (and
``json_type_name``, now in ``agent_gate.errors``) so that
``from agent_gate.schema import ToolRegistry`` and the like keep working. New code
imports from ``agent_gate.tools`` (or the top level, ``agent_gate``).
"""

from __future__ import annotations

from agent_gate import tools as _tools
from agent_gate.errors import json_type_name
from agent_gate.tools import *  # noqa: F403 - the old path is exactly the new one's names

__all__ = [*_tools.__all__, "json_type_name"]
