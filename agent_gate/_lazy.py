"""Names resolved on first use: a package's public names (PEP 562), a module's siblings.

Why: importing one module of a package runs the package's ``__init__``; a package
that imports its public names eagerly makes ``import agent_gate.sse`` pay for the
ledger, or ``agent-gate approve`` pay for the whole gate. A package hands its table
of name -> module here and keeps the imports for type checkers only.

A facade over several modules (``ledger.store``) has the same problem one level
down: a read-only command that opens the ledger must not import the write path.
``deferred`` binds a module-level name to a stand-in that imports its module on
first use and then puts the module itself in its place, so that every later use is
the plain global lookup it was: nothing is added to the hot path.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["deferred", "exports"]


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


class _Deferred:
    """Stands for a module not yet imported; replaced by the module on first use."""

    __slots__ = ("_module", "_name", "_namespace")

    def __init__(self, name: str, module: str, namespace: dict[str, Any]) -> None:
        self._name = name
        self._module = module
        self._namespace = namespace

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._module)
        self._namespace[self._name] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<module {self._module!r}, imported on first use>"


def deferred(table: Mapping[str, str], namespace: dict[str, Any]) -> None:
    """Bind each name of ``table`` in ``namespace`` (a module's ``globals()``) to the
    module it names, imported when an attribute of it is first read.

    The module keeps ``import`` statements for these names under ``TYPE_CHECKING``
    (for type checkers and the layer test); a stand-in is only ever read through an
    attribute (``flows.transition``), never passed on as a module object.
    """
    for name, module in table.items():
        namespace[name] = _Deferred(name, module, namespace)
