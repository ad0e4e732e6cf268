"""The layer rule: every import inside ``agent_gate`` points down the table below.

Why a test: a layer that imports the one above it cannot be read, tested or replaced
on its own, and such an arrow is easy to add by accident (a helper "just" reaching for
the package root). The table is the one statement of the layering; the architecture
page (``docs/architecture.md``) shows it between ``<!-- layers:begin -->`` and
``<!-- layers:end -->``, and a test here holds the page to the table
(``python tests/test_layers.py --write`` rewrites that block).

How imports are found: every module of the package is parsed with :mod:`ast`, without
importing it, and every ``import``/``from ... import`` statement counts, wherever it is
(module level, inside functions, under ``if TYPE_CHECKING:``), as does
``importlib.import_module("agent_gate....")`` with a literal name. A module imported
under a name computed at run time cannot be seen this way: the package root's lazy
table and the CLI's command list name modules that their static imports (the
``TYPE_CHECKING`` block, the same package) already cover.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = "agent_gate"


@dataclass(frozen=True)
class Layer:
    """One layer: the modules it holds and why it sits where it does."""

    name: str
    modules: tuple[str, ...]
    why: str


# Bottom first. An entry names a module or a package (covering every module under it);
# the longest entry that covers a module decides its layer. The package root
# ``agent_gate`` (its ``__init__``) is an entry of its own and covers only itself.
# A module may import its own layer and any layer below; never one above.
LAYERS: tuple[Layer, ...] = (
    Layer(
        "base",
        ("agent_gate.errors", "agent_gate._lazy", "agent_gate._speedups",
         "agent_gate.plainjson", "agent_gate.strict_json"),
        "the base error, lazy package names, the one fast-path switch, plain and strict "
        "JSON: used everywhere",
    ),
    Layer(
        "evidence formats",
        ("agent_gate.evidence.merkle", "agent_gate.evidence.note",
         "agent_gate.evidence.checkpoint"),
        "RFC 6962 trees, C2SP signed notes and checkpoints: pure formats the ledger's "
        "checkpoints and any offline verifier share",
    ),
    Layer(
        "telemetry",
        ("agent_gate.telemetry",),
        "traces, metrics and logs behind one observer; the gate and the transport both "
        "report to it, so it imports nothing of agent_gate",
    ),
    Layer("sse", ("agent_gate.sse",), "bytes to events, sans-IO; knows no provider"),
    Layer(
        "transport",
        ("agent_gate.transport",),
        "httpx responses to SSE events, reconnects and limits; needs only the decoder "
        "(it sits under the gate because the gate's live wiring drives it)",
    ),
    Layer("providers", ("agent_gate.providers",),
          "one module per wire protocol, all emitting the same normalized events"),
    Layer(
        "accumulate",
        ("agent_gate.calls", "agent_gate.turn", "agent_gate.known_path",
         "agent_gate.accumulate", "agent_gate.autodetect"),
        "normalized events to tool calls known to be complete, and the response's end",
    ),
    Layer("tools", ("agent_gate.tools", "agent_gate.schema"),
          "tool declarations, the registry, argument validation"),
    Layer("policy", ("agent_gate.policy",),
          "the policy file format and its default-deny evaluator"),
    Layer(
        "privacy",
        ("agent_gate.privacy",),
        "sealing, scrubbing, keeping results: applies the policy's redaction rules to "
        "what the ledger will store, so a result goes gate -> privacy -> ledger",
    ),
    Layer("ledger", ("agent_gate.ledger",),
          "the durable record: states, transitions, audit chain, approvals, quotas"),
    Layer("evidence", ("agent_gate.evidence",),
          "proofs and bundles of the ledger's trail, checked offline with a public key"),
    Layer(
        "gate",
        ("agent_gate.gate", "agent_gate.authorize", "agent_gate.heartbeat"),
        "a complete call in, at most one execution, an outcome out",
    ),
    Layer("api", ("agent_gate",), "the curated top level: `from agent_gate import Gate, ...`"),
    Layer(
        "integrations",
        ("agent_gate.integrations",),
        "MCP and agent frameworks put behind a gate; each an optional extra",
    ),
    Layer("serve", ("agent_gate.serve",),
          "`agent-gate serve`: the operators' JSON API and web inbox over a gate"),
    Layer("stream_server", ("agent_gate.stream_server",),
          "a fault-injecting loopback SSE server for tests and the demo"),
    Layer("demo", ("agent_gate.demo",), "what `agent-gate demo` streams and runs"),
    Layer("cli", ("agent_gate.cli", "agent_gate.__main__"), "the `agent-gate` command"),
)

# Upward imports known today, each with who removes it. The rule test passes over
# these; a test below fails once one is gone, so the entry is deleted with the fix.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

PAGE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
BEGIN, END = "<!-- layers:begin -->", "<!-- layers:end -->"


def package_dir() -> Path:
    """The directory of the ``agent_gate`` that ``import agent_gate`` would load."""
    spec = importlib.util.find_spec(ROOT)
    assert spec is not None and spec.submodule_search_locations, "agent_gate is not importable"
    return Path(next(iter(spec.submodule_search_locations)))


def package_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name, found on disk (nothing is imported)."""
    base = package_dir()
    modules: dict[str, Path] = {}
    for path in sorted(base.rglob("*.py")):
        parts = (ROOT, *path.relative_to(base).with_suffix("").parts)
        if any(not part.isidentifier() for part in parts):
            continue  # not importable as a module (e.g. a data directory)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def layer_of(module: str) -> int | None:
    """The index in ``LAYERS`` of the longest entry covering ``module``; None if none does."""
    best: tuple[int, int] | None = None
    for index, layer in enumerate(LAYERS):
        for entry in layer.modules:
            covers = module == entry or (entry != ROOT and module.startswith(entry + "."))
            if covers and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    return None if best is None else best[1]


@dataclass(frozen=True)
class Import:
    """One import statement's target inside the package, and where it is written."""

    source: str
    target: str
    path: Path
    line: int


def _is_package(module: str, modules: dict[str, Path]) -> bool:
    return modules[module].name == "__init__.py"


def imports_of(module: str, modules: dict[str, Path]) -> Iterator[Import]:
    """Every import of an ``agent_gate`` module written anywhere in ``module``'s source."""
    path = modules[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if _is_package(module, modules) else module.rpartition(".")[0]
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                origin = ".".join([*parts, node.module] if node.module else parts)
            else:
                origin = node.module or ""
            # ``from agent_gate import strict_json`` imports the module agent_gate.strict_json.
            for alias in node.names:
                name = f"{origin}.{alias.name}"
                targets.append(name if name in modules else origin)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            targets = [node.args[0].value]
        for target in dict.fromkeys(targets):
            if target == ROOT or target.startswith(ROOT + "."):
                yield Import(module, target, path, node.lineno)


def upward_imports() -> list[Import]:
    """Every import that points from a layer to a layer above it."""
    modules = package_modules()
    found = []
    for module in modules:
        own = layer_of(module)
        if own is None:
            continue  # reported by test_every_module_has_a_layer
        for imp in imports_of(module, modules):
            theirs = layer_of(imp.target)
            if theirs is not None and theirs > own:
                found.append(imp)
    return found


def describe(imp: Import) -> str:
    own, theirs = layer_of(imp.source), layer_of(imp.target)
    assert own is not None and theirs is not None
    where = imp.path.relative_to(package_dir().parent)
    return (
        f"{where}:{imp.line}: {imp.source} (layer {LAYERS[own].name}) imports "
        f"{imp.target} (layer {LAYERS[theirs].name}, above it)"
    )


def _package_inits(target: str, source: str, modules: dict[str, Path]) -> list[str]:
    """The packages whose ``__init__`` importing ``target`` runs first, outside
    ``source``'s own packages (those are already running when ``source`` is)."""
    parts = target.split(".")
    found = []
    for end in range(2, len(parts)):
        package = ".".join(parts[:end])
        if package in modules and not (source + ".").startswith(package + "."):
            found.append(package)
    return found


def import_graph(inside: str, modules: dict[str, Path]) -> dict[str, set[str]]:
    """Who imports whom among the modules under ``inside``: every import wherever it
    is written (module level, in a function, under ``TYPE_CHECKING``), and the
    ``__init__`` of every package an import passes through.

    A deferred import in a function is a dependency that waits: the module still
    cannot be read or tested without the other. One under ``TYPE_CHECKING`` is a
    dependency on the other's names: a circle of type hints is two modules that
    each name what the other defines, so neither is the bottom. And importing
    ``agent_gate.policy.x`` runs ``agent_gate/policy/__init__`` first, so a package
    whose ``__init__`` imports back is a circle too.
    """
    def within(name: str) -> bool:
        return name == inside or name.startswith(inside + ".")

    graph: dict[str, set[str]] = {}
    for module in modules:
        if not within(module):
            continue
        targets: set[str] = set()
        for imp in imports_of(module, modules):
            targets.add(imp.target)
            targets.update(_package_inits(imp.target, module, modules))
        graph[module] = {t for t in targets if within(t) and t != module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of ``graph``: each set of two or more modules that reach each other
    (a strongly connected component, Tarjan's algorithm without recursion), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    circle = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        circle.append(member)
                        if member == node:
                            break
                    if len(circle) > 1:
                        found.append(sorted(circle))
    return sorted(found)


def describe_cycle(circle: list[str], graph: dict[str, set[str]]) -> str:
    members = set(circle)
    arrows = [f"  {a} -> {b}" for a in circle for b in sorted(graph[a]) if b in members]
    return f"{len(circle)} modules: {', '.join(circle)}\n" + "\n".join(arrows)


def render_layers() -> str:
    """The architecture page's layer table, top layer first, as the block between markers."""
    rows = ["| layer | modules | why it sits here |", "|---|---|---|"]
    for layer in reversed(LAYERS):
        names = ", ".join(f"`{m}`" for m in layer.modules)
        rows.append(f"| **{layer.name}** | {names} | {layer.why} |")
    return "\n".join(rows)


def _block_match(text: str) -> re.Match[str] | None:
    return re.search(re.escape(BEGIN) + r"\n(.*?)\n?" + re.escape(END), text, re.DOTALL)


def page_block(text: str) -> str | None:
    """What the page shows between the layer markers, or None without them."""
    match = _block_match(text)
    return None if match is None else match.group(1)


# -- the tests -----------------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    missing = [m for m in package_modules() if layer_of(m) is None]
    assert not missing, (
        "modules in no layer of tests/test_layers.py LAYERS (add each to the layer it "
        f"belongs to): {', '.join(missing)}"
    )


def test_no_import_points_up() -> None:
    found = [imp for imp in upward_imports() if (imp.source, imp.target) not in KNOWN_UPWARD]
    assert not found, "imports that point up a layer:\n" + "\n".join(map(describe, found))


def test_known_upward_imports_still_exist() -> None:
    seen = {(imp.source, imp.target) for imp in upward_imports()}
    gone = [pair for pair in KNOWN_UPWARD if pair not in seen]
    assert not gone, (
        "fixed upward imports: delete them from KNOWN_UPWARD in tests/test_layers.py: "
        + ", ".join(f"{s} -> {t}" for s, t in gone)
    )


KNOWN_CIRCLES: dict[frozenset[str], str] = {
}
"""Import circles known today, each with why it stays and who removes it. The rule
test passes over exactly these sets of modules; a test below fails once one is gone
(or changes members), so the entry is deleted or corrected with the fix."""


def package_circles() -> tuple[list[list[str]], dict[str, set[str]]]:
    graph = import_graph(ROOT, package_modules())
    return import_cycles(graph), graph


def test_no_import_cycle_inside_the_package() -> None:
    """No module may import, directly or through others, a module that imports it
    back. A circle has no bottom to read or test from: changing any member can break
    every other (issue 31: the transaction seam once drew one of twelve modules
    through ``txn``, ``backend`` and the rules it sits under)."""
    circles, graph = package_circles()
    new = [circle for circle in circles if frozenset(circle) not in KNOWN_CIRCLES]
    assert not new, "import cycles inside agent_gate:\n" + "\n".join(
        describe_cycle(circle, graph) for circle in new
    )


def test_known_circles_still_exist() -> None:
    circles, _ = package_circles()
    gone = [sorted(known) for known in KNOWN_CIRCLES if sorted(known) not in circles]
    where = Path(__file__).name
    assert not gone, f"broken or changed circles: fix KNOWN_CIRCLES in {where}: {gone}"


def test_the_cycle_finder_sees_deferred_hinted_and_package_circles(tmp_path: Path) -> None:
    """A circle through a function-level import counts, one closed under
    ``TYPE_CHECKING`` counts, one through a package ``__init__`` counts; a chain is
    no circle."""
    files = {
        "a": "from agent_gate.ledger.probe import b\n",
        "b": "def f():\n    from agent_gate.ledger.probe import c\n",
        "c": "import agent_gate.ledger.probe.a\n",
        "d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
             "    from agent_gate.ledger.probe import e\n",
        "e": "from agent_gate.ledger.probe import d\n",
        "f": "from agent_gate.ledger.probe import a\n",
        "g": "from agent_gate.ledger.probe.pkg.h import X\n",
    }
    modules = {"agent_gate.ledger.probe": tmp_path / "__init__.py"}
    modules["agent_gate.ledger.probe"].write_text("", encoding="utf-8")
    for name, source in files.items():
        path = tmp_path / f"{name}.py"
        path.write_text(source, encoding="utf-8")
        modules[f"agent_gate.ledger.probe.{name}"] = path
    (tmp_path / "pkg").mkdir()
    init, h = tmp_path / "pkg" / "__init__.py", tmp_path / "pkg" / "h.py"
    init.write_text("from agent_gate.ledger.probe import g\n", encoding="utf-8")
    h.write_text("X = 1\n", encoding="utf-8")
    modules["agent_gate.ledger.probe.pkg"] = init
    modules["agent_gate.ledger.probe.pkg.h"] = h
    graph = import_graph("agent_gate.ledger.probe", modules)
    probe = "agent_gate.ledger.probe."
    assert import_cycles(graph) == [
        [probe + "a", probe + "b", probe + "c"],
        [probe + "d", probe + "e"],
        [probe + "g", probe + "pkg"],
    ]


def test_the_checker_sees_nested_and_type_checking_imports(tmp_path: Path) -> None:
    """The parser counts imports inside functions, under TYPE_CHECKING and by literal name."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import importlib\n"
        "if TYPE_CHECKING:\n"
        "    from agent_gate.gate import Gate\n"
        "def f():\n"
        "    from ..cli import main\n"
        "    return importlib.import_module('agent_gate.demo')\n"
        "from agent_gate import strict_json\n",
        encoding="utf-8",
    )
    modules = {**package_modules(), "agent_gate.ledger.probe": source}
    found = {(imp.target, imp.line) for imp in imports_of("agent_gate.ledger.probe", modules)}
    assert found == {
        ("agent_gate.gate", 4),
        ("agent_gate.cli", 6),
        ("agent_gate.demo", 7),
        ("agent_gate.strict_json", 8),
    }


def test_the_table_decides_by_longest_entry() -> None:
    """A package's submodule takes its package's layer; the root entry covers only itself."""
    names = [layer.name for layer in LAYERS]
    assert names[layer_of("agent_gate.gate.driver") or 0] == "gate"
    assert names[layer_of("agent_gate.ledger.states") or 0] == "ledger"
    assert names[layer_of("agent_gate") or 0] == "api"
    assert layer_of("agent_gate.nowhere") is None


def test_the_architecture_page_shows_this_table() -> None:
    block = page_block(PAGE.read_text(encoding="utf-8"))
    assert block is not None, f"{PAGE} has no {BEGIN} ... {END} block"
    assert block == render_layers(), (
        f"the layer table in {PAGE.name} differs from tests/test_layers.py LAYERS: "
        "run `python tests/test_layers.py --write`"
    )


def _write_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    match = _block_match(text)
    if match is None:
        raise SystemExit(f"{PAGE} has no {BEGIN} ... {END} block")
    start, end = match.span(1)
    PAGE.write_text(text[:start] + render_layers() + "\n" + text[end:].lstrip("\n"),
                    encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write_page()
    else:
        print(render_layers())
        for imp in upward_imports():
            print(describe(imp))
