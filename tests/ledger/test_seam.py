"""The ledger's rules speak only the seam: no fast-path name outside ``ledger/backend/``.

Issue 31: the speed machinery (kept connections, statements on the driver, pipelining,
folded inserts, spare ids, libpq) sits under one interface, ``txn.Txn``, chosen at one
site (``ledger/backend/__init__.py``). A rule module that names the machinery again
(asks ``is_fast``, reads ``opened(conn).pipe``, passes ``later=``, checks
``Rows.processed``...) is the weave this test exists to keep out.

The names are derived from what the machinery exports (its modules' ``__all__``), the
fields of its rows that the seam's ``txn.StatementResult`` does not have, and the modules' own
names, plus a few words it never exported (``EXTRA_WORDS``); only identifiers count
(names, attributes, parameters, keywords, imports), not prose.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import agent_gate.ledger
from agent_gate.ledger import txn
from agent_gate.ledger.backend import prepared

LEDGER = Path(agent_gate.ledger.__file__).resolve().parent
MACHINERY = ("prepared", "pg_pipeline", "_libpq", "spares", "_sa_private", "fast",
             "sqlite_fast", "pg_fast")
"""The backend modules that are speed, not seam (``core`` is the reference and
``dialect`` the portable differences; ``__init__`` is the site that picks)."""
EXTRA_WORDS = frozenset({"later", "pipe", "pipeline", "libpq", "is_fast", "FAST_CACHE",
                         "processed"})
"""Words of the fast path no machinery module exports that the rules used to speak:
``cas.compare_and_set``'s ``later=`` list, an open transaction's pipeline
(``prepared.Open.pipe``), the modules' names before the move, ``backend``'s old
test of the choice (the seam answers it by picking a class) and the flag that told
Core's rows from the driver's (``Rows.processed``)."""
PICKING = ("chosen", "is_fast", "txn_class")
"""What tells one backend from another: asked by ``backend/__init__.py`` alone."""


def fast_path_names() -> frozenset[str]:
    names: set[str] = set(EXTRA_WORDS)
    for module in MACHINERY:
        names.add(module)
        names.update(importlib.import_module(f"agent_gate.ledger.backend.{module}").__all__)
    seam_result = {n for n in dir(txn.StatementResult) if not n.startswith("_")}
    names.update(set(prepared.Rows._fields) - seam_result)
    return frozenset(names)


def identifiers(tree: ast.AST) -> set[str]:
    """Every name the code itself uses: not strings, docstrings or comments."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg is not None):
            found.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.update(node.name.split("."))
            if node.asname:
                found.add(node.asname)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(node.module.split("."))
    return found


def rule_modules() -> list[Path]:
    return sorted(p for p in LEDGER.rglob("*.py") if "backend" not in p.relative_to(LEDGER).parts)


def _named(path: Path, words: frozenset[str]) -> list[str]:
    return sorted(identifiers(ast.parse(path.read_text())) & words)


def test_the_derived_names_cover_the_fast_path_vocabulary() -> None:
    """The derivation finds the words the rules used to speak (a check of the check)."""
    names = fast_path_names()
    for word in ("opened", "prepare", "Pending", "Folded", "Later", "processed", "pipe",
                 "Unexpected", "spares", "Rows", "track", "Wire", "forget_in_children"):
        assert word in names, word
    # The seam's own words are not among them.
    for word in ("rowcount", "rows", "Txn", "run", "writing", "reading", "transact"):
        assert word not in names, word


def test_no_ledger_module_outside_the_backends_names_the_fast_path() -> None:
    names = fast_path_names()
    found = {
        str(path.relative_to(LEDGER)): sorted(identifiers(ast.parse(path.read_text())) & names)
        for path in rule_modules()
    }
    offending = {module: words for module, words in found.items() if words}
    assert not offending, (
        "ledger modules outside ledger/backend/ name the fast path (go through txn.Txn "
        f"and ledger.backend's seam instead): {offending}"
    )


def test_one_site_picks_the_implementation() -> None:
    """Only ``backend/__init__.py`` imports the three implementations' modules."""
    pickers = []
    for path in LEDGER.rglob("*.py"):
        imported = {
            node.module for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module
        }
        if imported & {"agent_gate.ledger.backend.core", "agent_gate.ledger.backend.sqlite_fast",
                       "agent_gate.ledger.backend.pg_fast"}:
            pickers.append(str(path.relative_to(LEDGER)))
    assert pickers == ["backend/__init__.py"]


def test_only_the_picking_site_asks_which_backend_runs() -> None:
    """Beginning a transaction, compiling a statement, a begin hook: none asks which
    backend a dialect has (``begin_write``/``begin_read`` once did, in ``dialect``);
    ``backend/__init__.py`` picks, and each implementation is what it is."""
    picker = LEDGER / "backend" / "__init__.py"
    asking = {
        str(path.relative_to(LEDGER)): words for path in sorted(LEDGER.rglob("*.py"))
        if path != picker and (words := _named(path, frozenset(PICKING)))
    }
    assert not asking, f"modules that ask which backend runs (only backend/__init__ may): {asking}"


def test_the_reference_names_none_of_the_machinery() -> None:
    """``core.py`` is plain Core: it builds its own statements, shares nothing with the
    fast path (``prepared.CoreStatement`` once was its twin inside the machinery)."""
    assert _named(LEDGER / "backend" / "core.py", fast_path_names()) == []


def test_rules_take_the_transaction_never_a_raw_connection() -> None:
    """A rule's parameter is a ``Txn``, not "``Txn`` or a ``Connection``" (which made it
    reach under the seam for the backend of a bare connection: ``audit.append``,
    ``reads.call_by`` and ``Ledger.lock_task`` once did)."""
    both = []
    for path in rule_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.arg) and node.annotation is not None:
                words = identifiers(node.annotation) | {
                    n.value for n in ast.walk(node.annotation)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                }
                if {"Txn", "Connection"} <= words:
                    both.append(f"{path.relative_to(LEDGER)}:{node.lineno} {node.arg}")
    assert not both, f"parameters that take a Txn or a raw Connection: {both}"


def _is_module(package: str, name: str) -> bool:
    """Whether ``package.name`` is a module (a private module is its package's to
    import: ``backend._libpq``), not a name defined inside ``package``."""
    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except ModuleNotFoundError:  # ``package`` is a module, not a package
        return False


def borrowed_private_names(tree: ast.AST) -> list[str]:
    """Underscore names of other agent_gate modules this module uses: imported
    (``from agent_gate.ledger.flows import _applied``) or read off a module it
    imported (``flows._applied``). Dunders and private modules are not names."""
    modules: set[str] = set()
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(a.asname or a.name.split(".")[0] for a in node.names
                           if a.name.startswith("agent_gate"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agent_gate"):
            for alias in node.names:
                if _is_module(str(node.module), alias.name):
                    modules.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append((node.lineno, f"{node.module}.{alias.name}"))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            found.append((node.lineno, f"{node.value.id}.{node.attr}"))
    return [f"{name} (line {line})" for line, name in sorted(found)]


def test_no_module_borrows_another_modules_private_name() -> None:
    """A ledger module uses only what another one made public (issue 31: ``answers``
    and ``edits`` imported ``flows``' ``_applied``, ``_locked_row`` and ``_reread``;
    ``flows`` now offers ``apply_or_lose`` and ``reread``, documented as the seam
    the answer flows are built from). An underscore name stays its module's own, so
    that module may change it without reading the rest of the ledger. The whole
    package is held to it (``transactional`` set ``runner._current``; ``known_path``
    read ``providers.base._fast_loads``: now ``runner.serving`` and ``fast_loads``)."""
    borrowed = {
        str(path.relative_to(LEDGER.parent)): names
        for path in sorted(LEDGER.parent.rglob("*.py"))
        if (names := borrowed_private_names(ast.parse(path.read_text())))
    }
    assert not borrowed, f"modules using another module's private names: {borrowed}"


def test_the_private_name_check_sees_both_spellings() -> None:
    """The check of the check: an imported underscore name and one read off an
    imported module are found; a private module and a dunder are not names."""
    source = (
        "from agent_gate.ledger.flows import _applied, write\n"
        "from agent_gate.ledger import flows\n"
        "from agent_gate.ledger.backend import _libpq\n"
        "import agent_gate.ledger.txn as t\n"
        "flows._reread(1)\n"
        "t._ROWS_PER_INSERT\n"
        "flows.__doc__\n"
        "self._own\n"
    )
    assert borrowed_private_names(ast.parse(source)) == [
        "agent_gate.ledger.flows._applied (line 1)",
        "flows._reread (line 5)",
        "t._ROWS_PER_INSERT (line 6)",
    ]
