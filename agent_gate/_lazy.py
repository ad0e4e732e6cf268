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

__all__ = ["deferred", "exports", "exports_of"]


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


def exports_of(
    package: str, source: str, namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose public names are the
    ``from M import N`` statements under its ``if TYPE_CHECKING:`` (``source``: its
    ``__file__``), each resolved from its module on first use.

    Why: a package that names each public name in its imports (for type checkers),
    in a name -> module table (for the lazy lookup) and in ``__all__`` writes each
    three times, and the three drift. Here the table is read off the imports with
    ``ast`` when a name is first asked for (not at import: ``import agent_gate``
    stays as light as it was), and must name exactly ``__all__``: the static list
    type checkers, linters and the API reference read, which no one can derive.
    """
    table: dict[str, str] = {}

    def names() -> dict[str, str]:
        if not table:
            found = _type_checking_imports(source)
            listed = set(namespace.get("__all__", ()))
            if listed != set(found):
                raise ImportError(
                    f"{package}: __all__ and the imports under TYPE_CHECKING differ: "
                    f"only in __all__ {sorted(listed - set(found))}, "
                    f"only imported {sorted(set(found) - listed)}"
                )
            table.update(found)
        return table

    def __getattr__(name: str) -> Any:
        module = names().get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names()))

    return __getattr__, __dir__


def _type_checking_imports(source: str) -> dict[str, str]:
    """Name -> module of every ``from M import N`` under ``if TYPE_CHECKING:``."""
    import ast  # only when a lazy name is first asked for

    with open(source, encoding="utf-8") as f:
        tree = ast.parse(f.read(), source)
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for item in node.body:
                if isinstance(item, ast.ImportFrom) and item.module and item.level == 0:
                    for alias in item.names:
                        found[alias.asname or alias.name] = item.module
    if not found:
        raise ImportError(f"{source}: no imports under 'if TYPE_CHECKING:' to export")
    return found


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
