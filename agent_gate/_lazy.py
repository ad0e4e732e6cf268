"""A package's public names resolved on first use (PEP 562).

Why: importing one module of a package runs the package's ``__init__``; a package
that imports its public names eagerly makes ``import agent_gate.sse`` pay for the
ledger, or ``agent-gate approve`` pay for the whole gate. A package hands its table
of name -> module here and keeps the imports for type checkers only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["exports"]


def exports(
    package: str, table: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's ``__getattr__`` and ``__dir__``: a name in ``table`` is imported
    from its module when first asked for, then kept in ``namespace`` (the package's
    ``globals()``), so it is resolved once."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
