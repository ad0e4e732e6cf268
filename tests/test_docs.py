"""The documentation names what the package holds, no more and no less.

Why a test: a map that misses a module, or still shows one that is gone, is worse than
no map. The architecture page's module tree (between ``<!-- modules:begin -->`` and
``<!-- modules:end -->`` in ``docs/architecture.md``) must list every module of
``agent_gate`` (found on disk, as ``tests/test_layers.py`` finds them), each with the
one line saying its job; the API reference must cover every public subpackage; and
the README's links into ``docs/`` must lead somewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from test_layers import ROOT, package_dir, package_modules

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
ARCHITECTURE = DOCS / "architecture.md"
BEGIN, END = "<!-- modules:begin -->", "<!-- modules:end -->"
INDENT = 2

# Public subpackages without an API page, each with where it is documented instead.
NOT_IN_API = {
    "agent_gate.cli": "a command: `agent-gate --help` and the guides document it",
    "agent_gate.demo": "the demo's own transcript and tools: the demo guide shows them",
}


class TreeError(ValueError):
    """The module tree on the page is not a well-formed tree."""


def parse_tree(block: str) -> dict[str, str]:
    """The modules a tree block names, by dotted name, with the job each line gives.

    The block is a fenced code block: ``agent_gate/`` first, then one line per file or
    folder, indented two spaces per level; a folder ends in ``/``, a module line is
    ``name.py`` followed by its job.
    """
    modules: dict[str, str] = {}
    stack: list[str] = []
    for number, line in enumerate(block.splitlines(), 1):
        if not line.strip() or line.startswith("```"):
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent % INDENT:
            raise TreeError(f"line {number}: indent {indent} is not a multiple of {INDENT}")
        depth = indent // INDENT
        if depth > len(stack):
            raise TreeError(f"line {number}: indented under no folder: {line.strip()!r}")
        del stack[depth:]
        name, _, job = line.strip().partition(" ")
        if name.endswith("/"):
            stack.append(name[:-1])
            continue
        if not name.endswith(".py"):
            raise TreeError(f"line {number}: neither a folder nor a .py file: {name!r}")
        if not job.strip():
            raise TreeError(f"line {number}: {name} says nothing about its job")
        parts = [*stack, name[: -len(".py")]]
        if parts[-1] == "__init__":
            parts.pop()
        dotted = ".".join(parts)
        if dotted in modules:
            raise TreeError(f"line {number}: {dotted} is listed twice")
        modules[dotted] = job.strip()
    return modules


def page_tree() -> dict[str, str]:
    text = ARCHITECTURE.read_text(encoding="utf-8")
    match = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, re.DOTALL)
    assert match is not None, f"{ARCHITECTURE} has no {BEGIN} ... {END} block"
    return parse_tree(match.group(1))


def file_of(module: str, is_package: bool) -> str:
    """How the tree spells a module: ``agent_gate/sse/decoder.py``."""
    path = module.replace(".", "/")
    return f"{path}/__init__.py" if is_package else f"{path}.py"


def test_the_module_tree_lists_every_module_and_nothing_gone() -> None:
    on_disk = package_modules()
    on_page = page_tree()
    base = package_dir().parent
    missing = [
        file_of(m, on_disk[m].name == "__init__.py") for m in on_disk if m not in on_page
    ]
    gone = [m for m in on_page if m not in on_disk]
    problems = []
    if missing:
        problems.append(
            "add to the module tree in docs/architecture.md, each with a line saying its "
            "job: " + ", ".join(missing)
        )
    if gone:
        problems.append(
            "remove from the module tree in docs/architecture.md (no such module under "
            f"{base}): " + ", ".join(gone)
        )
    assert not problems, "\n".join(problems)


def test_the_tree_parser_reads_folders_and_rejects_a_bare_line() -> None:
    tree = parse_tree(
        "```text\nagent_gate/\n  __init__.py  the top\n  sse/\n    decoder.py  bytes in\n"
        "  calls.py  values\n```"
    )
    assert tree == {"agent_gate": "the top", "agent_gate.sse.decoder": "bytes in",
                    "agent_gate.calls": "values"}
    for bad in ("agent_gate/\n  calls.py", "agent_gate/\n   calls.py  odd indent",
                "agent_gate/\n    calls.py  too deep"):
        try:
            parse_tree(bad)
        except TreeError:
            continue
        raise AssertionError(f"accepted {bad!r}")


def test_every_public_subpackage_has_an_api_page() -> None:
    """Each public subpackage (and the top level) is rendered by a ``:::`` directive."""
    rendered = set()
    for page in (DOCS / "reference").glob("*.md"):
        rendered |= set(re.findall(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.M))
    public = {ROOT} | {
        m for m, path in package_modules().items()
        if m.count(".") == 1 and path.name == "__init__.py" and not m.split(".")[1].startswith("_")
    }
    missing = sorted(public - rendered - set(NOT_IN_API))
    assert not missing, f"add an API page under docs/reference/ with `::: NAME` for: {missing}"


def test_the_readme_links_into_docs_lead_somewhere() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#\s]+)", readme)
    assert links, "the README links to no page under docs/"
    broken = [link for link in links if not (REPO / link).is_file()]
    assert not broken, f"README links to missing pages: {broken}"
