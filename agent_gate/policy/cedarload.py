"""Reading a policy file's Cedar set, and validating it against the tools' schemas.

``load_cedar`` reads the set once, when the policy loads (a ``file:`` is relative to
the policy file), and turns every problem into a located ``PolicyLoadError``, so a
policy that loads has a set that parses. ``cedar_schema`` writes the Cedar schema
the requests of ``cedar.py`` follow, with each action's ``context.args`` typed from
the tool's JSON Schema and its ``cedar.args`` kinds; ``cedar_problems`` runs Cedar's
validator against it (``policy check`` with ``--schemas``/``--tools``), which catches
``context.args.ammount`` or ``decimal < Long`` before any call is judged.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Final

from agent_gate.errors import PolicyLoadError, Problem
from agent_gate.policy.cedar import NAMESPACE, CedarPolicySet, CedarUnavailable
from agent_gate.policy.model import PolicyDocument
from agent_gate.policy.paths import parse_path
from agent_gate.policy.yamlsource import MAX_POLICY_BYTES

__all__ = ["cedar_problems", "cedar_schema", "load_cedar"]

Locate = Callable[[tuple[str | int, ...], str], Problem]

_DECIMAL: Final = {"type": "Extension", "name": "decimal"}
_IPADDR: Final = {"type": "Extension", "name": "ipaddr"}
_KIND_TYPES: Final[dict[str, Any]] = {
    "path": {"type": "String"},
    "decimal": _DECIMAL,
    "ip": _IPADDR,
    "email": {"type": "Record", "attributes": {
        "address": {"type": "String"}, "domain": {"type": "String"}}},
    "url": {"type": "Record", "attributes": {
        "scheme": {"type": "String"}, "host": {"type": "String"},
        "port": {"type": "Long", "required": False}, "ip": {**_IPADDR, "required": False}}},
}


def load_cedar(document: PolicyDocument, source: str, locate: Locate) -> CedarPolicySet | None:
    """The file's Cedar set, parsed; ``PolicyLoadError`` located at ``cedar:`` otherwise."""
    spec = document.cedar
    if spec is None:
        return None
    if spec.file is not None:
        base = os.path.dirname(source) if not source.startswith("<") else ""
        path = os.path.join(base, spec.file)
        try:
            with open(path, "rb") as handle:
                raw = handle.read(MAX_POLICY_BYTES + 1)
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            problem = locate(("cedar", "file"), f"cannot read {path}: {why}")
            raise PolicyLoadError([problem]) from None
        if len(raw) > MAX_POLICY_BYTES:
            raise PolicyLoadError([locate(("cedar", "file"), "Cedar file larger than 1 MiB")])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PolicyLoadError(
                [locate(("cedar", "file"), f"not UTF-8 (byte offset {exc.start})")]
            ) from None
        where: tuple[str | int, ...] = ("cedar", "file")
    else:
        assert spec.policies is not None
        text, where = spec.policies, ("cedar", "policies")
    try:
        return CedarPolicySet.parse(text)
    except CedarUnavailable as exc:
        raise PolicyLoadError([locate(where, str(exc))]) from None
    except ValueError as exc:
        raise PolicyLoadError([locate(where, f"Cedar: {exc}")]) from None


def _type(schema: Any, root: Mapping[str, Any], depth: int = 0) -> dict[str, Any] | None:
    """A JSON Schema as a Cedar type; None where Cedar has no equivalent (a union)."""
    if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and depth < 32:
        ref = schema["$ref"]
        target: Any = root
        for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else ["\0"]:
            target = target.get(part) if isinstance(target, Mapping) else None
        return _type(target, root, depth + 1)
    if not isinstance(schema, Mapping) or depth > 32:
        return None
    kind = schema.get("type")
    if kind == "string" or (kind is None and isinstance(schema.get("enum"), list)
                            and all(isinstance(v, str) for v in schema["enum"])):
        return {"type": "String"}
    if kind == "integer":
        return {"type": "Long"}
    if kind == "number":
        return dict(_DECIMAL)
    if kind == "boolean":
        return {"type": "Boolean"}
    if kind == "array":
        element = _type(schema.get("items"), root, depth + 1)
        return {"type": "Set", "element": element} if element is not None else None
    if kind == "object":
        required = set(schema.get("required") or ())
        attributes = {}
        for name, sub in (schema.get("properties") or {}).items():
            found = _type(sub, root, depth + 1)
            if found is not None:
                attributes[name] = {**found, "required": name in required}
        return {"type": "Record", "attributes": attributes}
    return None


def _args_type(schema: Mapping[str, Any], kinds: Mapping[str, str]) -> dict[str, Any]:
    record = _type(schema, schema) or {"type": "Record", "attributes": {}}
    for text, kind in kinds.items():
        target = record
        path = parse_path(text)
        for segment in path[:-1]:
            target = target.get("attributes", {}).get(segment, {})
        attributes = target.get("attributes")
        if isinstance(attributes, dict):
            required = attributes.get(path[-1], {}).get("required", False)
            attributes[path[-1]] = {**_KIND_TYPES[kind], "required": required}
    return record


def cedar_schema(
    document: PolicyDocument,
    schemas: Mapping[str, Mapping[str, Any]],
    counters: Mapping[str, list[str]],
) -> dict[str, Any]:
    """The Cedar schema (JSON form) of the requests made for the file's Cedar tools."""
    actions = {}
    for name, tool in document.tools.items():
        if tool.cedar is None or name not in schemas:
            continue
        usage = {key: {**_DECIMAL, "required": True} for key in counters.get(name, [])}
        actions[name] = {"appliesTo": {
            "principalTypes": ["Principal"],
            "resourceTypes": ["Task"],
            "context": {"type": "Record", "attributes": {
                "args": _args_type(schemas[name], tool.cedar.args),
                "usage": {"type": "Record", "attributes": usage},
            }},
        }}
    return {NAMESPACE: {
        "entityTypes": {
            "Role": {},
            "Principal": {"memberOfTypes": ["Role"]},
            "Task": {"shape": {"type": "Record", "attributes": {
                "name": {"type": "String", "required": False},
            }}},
        },
        "actions": actions,
    }}


def cedar_problems(
    cedar: CedarPolicySet,
    document: PolicyDocument,
    schemas: Mapping[str, Mapping[str, Any]],
    counters: Mapping[str, list[str]],
) -> list[str]:
    """Cedar's validator on the set, against ``cedar_schema``: one line per error,
    naming the policy by its ``@id``. Empty when no Cedar tool has a schema."""
    schema = cedar_schema(document, schemas, counters)
    if not schema[NAMESPACE]["actions"]:
        return []
    import cedarpy

    result = cedarpy.validate_policies(cedar.text, schema)
    lines = []
    for error in result.errors:
        meta = cedar.meta.get(error.policy_id)
        name = meta.name if meta is not None else error.policy_id
        lines.append(f"{name}: {error.error}")
    return lines
