"""Reading a policy's YAML while keeping every value's line number.

PyYAML's composer builds a node graph with start marks before constructing
Python objects; we keep that graph, so a pydantic error location such as
``('tools', 'send_email', 'rules', 0, 'when', 1, 'regex')`` can be walked back to
the line of the offending key. On the way we refuse the YAML features that make
a policy say something other than what its reader sees:

* duplicate keys (PyYAML silently keeps the last one: a second ``effect:`` under
  a rule would flip it without anyone noticing);
* aliases and merge keys (``*ref``, ``<<``): one edit would change rules far
  away, and alias expansion is the "billion laughs" amplifier;
* more than one document, non-UTF-8 text, over-large or over-deep files.

Only the safe loader is used: no Python object tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from agent_gate.errors import PolicyLoadError, Problem, error_code

__all__ = ["MAX_DEPTH", "MAX_POLICY_BYTES", "YamlDocument", "format_key", "parse_yaml"]

MAX_POLICY_BYTES: Final = 1 << 20
MAX_DEPTH: Final = 64
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"

Loc = tuple[str | int, ...]


def format_key(parts: Sequence[str | int]) -> str:
    """``tools.send_email.rules[0].when[1]`` for a location path."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in part or not part or " " in part:
            out += f"[{part!r}]"
        else:
            out += f".{part}" if out else part
    return out


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """The constructed data of one policy file and the node graph it came from."""

    source: str
    data: Any
    root: Node

    def problem(self, loc: Loc, message: str) -> Problem:
        """A problem located at the deepest node of ``loc`` that exists in the file.

        A segment the file does not have (the name of a missing key, or a marker
        pydantic adds such as ``[key]``) is still named in the key, and the line is
        the one of the nearest mapping or item that does exist.
        """
        node: Node = self.root
        mark_node: Node = self.root
        parts: list[str | int] = []
        for segment in loc:
            if segment == "[key]":
                continue  # a bad mapping key: mark_node already points at that key
            if isinstance(node, MappingNode) and isinstance(segment, str):
                entry = _find_key(node, segment)
                parts.append(segment)
                if entry is None:
                    break
                key_node, value_node = entry
                mark_node, node = key_node, value_node
            elif (
                isinstance(node, SequenceNode)
                and isinstance(segment, int)
                and 0 <= segment < len(node.value)
            ):
                parts.append(segment)
                node = node.value[segment]
                mark_node = node
            else:
                break
        mark = mark_node.start_mark
        return Problem(
            source=self.source,
            line=mark.line + 1,
            column=mark.column + 1,
            key=format_key(parts),
            message=message,
        )


def _find_key(node: MappingNode, key: str) -> tuple[Node, Node] | None:
    for key_node, value_node in node.value:
        if isinstance(key_node, ScalarNode) and key_node.value == key:
            return key_node, value_node
    return None


def _file_problem(
    source: str, message: str, line: int | None = None, column: int | None = None
) -> PolicyLoadError:
    return PolicyLoadError([Problem(source, line, column, "", message)])


def _check_graph(root: Node, source: str) -> list[Problem]:
    """Duplicate keys, aliases, merge keys and depth, each with its line."""
    problems: list[Problem] = []
    seen: set[int] = set()
    # (node, depth, path, where): ``where`` is the node whose mark locates ``node`` in
    # the text. An alias node *is* its anchor's node, so its own mark points at the
    # anchor; the key (or the list) that refers to it points at the alias.
    stack: list[tuple[Node, int, tuple[str | int, ...], Node]] = [(root, 0, (), root)]

    def at(node: Node, path: tuple[str | int, ...], message: str) -> None:
        mark = node.start_mark
        problems.append(Problem(source, mark.line + 1, mark.column + 1, format_key(path), message))

    while stack:
        node, depth, path, where = stack.pop()
        if id(node) in seen:
            at(where, path, "YAML aliases (*name) are not allowed in policies; repeat the value")
            continue
        seen.add(id(node))
        if depth > MAX_DEPTH:
            at(where, path, f"nested deeper than {MAX_DEPTH} levels")
            continue
        if isinstance(node, MappingNode):
            keys: set[tuple[str, str]] = set()
            children: list[tuple[Node, int, tuple[str | int, ...], Node]] = []
            for key_node, value_node in node.value:
                if key_node.tag == _MERGE_TAG:
                    at(key_node, path, "YAML merge keys (<<) are not allowed in policies")
                    continue
                if not isinstance(key_node, ScalarNode):
                    at(key_node, path, "mapping keys must be plain scalars")
                    continue
                child_path = (*path, key_node.value)
                ident = (key_node.tag, key_node.value)
                if ident in keys:
                    at(key_node, child_path, "duplicate key")
                keys.add(ident)
                children.append((value_node, depth + 1, child_path, key_node))
            stack.extend(reversed(children))
        elif isinstance(node, SequenceNode):
            items = list(enumerate(node.value))
            stack.extend(
                (item, depth + 1, (*path, index), node if id(item) in seen else item)
                for index, item in reversed(items)
            )
    problems.sort(key=lambda p: (p.line or 0, p.column or 0))
    return problems


def parse_yaml(raw: bytes | str, source: str) -> YamlDocument:
    """Parse one policy document; raises ``PolicyLoadError`` with located problems."""
    if isinstance(raw, bytes):
        if len(raw) > MAX_POLICY_BYTES:
            raise _file_problem(source, f"policy file larger than {MAX_POLICY_BYTES} bytes")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _file_problem(source, f"not UTF-8 (byte offset {exc.start})") from None
    else:
        text = raw
        if len(text.encode("utf-8", "surrogatepass")) > MAX_POLICY_BYTES:
            raise _file_problem(source, f"policy text larger than {MAX_POLICY_BYTES} bytes")
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise _file_problem(source, "empty policy file")
        problems = _check_graph(root, source)
        if problems:
            raise PolicyLoadError(problems)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        if mark is None:
            raise _file_problem(source, f"invalid YAML: {message}") from None
        raise _file_problem(
            source, f"invalid YAML: {message}", mark.line + 1, mark.column + 1
        ) from None
    except yaml.YAMLError as exc:
        raise _file_problem(source, f"invalid YAML: {error_code(exc)}") from None
    except RecursionError:
        raise _file_problem(source, "YAML nested too deeply") from None
    finally:
        loader.dispose()
    return YamlDocument(source=source, data=data, root=root)
