"""One word, one concept (issue 31): a public class name means one class, the
canonical JSON text and its hash have one definition that every caller imports,
and a decision's verdict maps to a transition in one table (``ledger.states``).

These read the package's source with ``ast`` (as ``test_layers`` does), so a second
definition or a caller that goes around the one definition fails here by name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import agent_gate
from agent_gate.ledger.states import ARROWS, VERDICTS, CallState, Event, verdict_arrow
from agent_gate.policy import Verdict

PACKAGE = Path(agent_gate.__file__).parent

SHARED_CLASS_NAMES: dict[str, set[str]] = {}
"""Public class names allowed to mean two classes: none (serve's answer as a request
hands it in is ``OperatorAnswer`` since issue 31; ``Answer`` is the gate's). Never grow it."""

ONE_DEFINITION = {"canonical_json", "canonical_bytes", "sha256_hex"}
"""Defined in ``agent_gate/plainjson.py`` only, and imported from there only."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [(path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text("utf-8")))
            for path in sorted(PACKAGE.rglob("*.py"))]


def test_a_public_class_name_means_one_class() -> None:
    defined: dict[str, set[str]] = defaultdict(set)
    for module, tree in _modules():
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined[node.name].add(module)
    shared = {name: where for name, where in defined.items() if len(where) > 1}
    unexpected = {name: sorted(where) for name, where in shared.items()
                  if not where <= SHARED_CLASS_NAMES.get(name, set())}
    assert not unexpected, f"one class name, several classes: {unexpected}"


def test_canonical_json_and_its_hash_have_one_definition_every_caller_imports() -> None:
    wrong: list[str] = []
    for module, tree in _modules():
        for node in ast.walk(tree):
            if (isinstance(node, ast.FunctionDef) and node.name in ONE_DEFINITION
                    and module != "plainjson.py"):
                wrong.append(f"{module}:{node.lineno} defines {node.name}")
            if isinstance(node, ast.ImportFrom) and node.module != "agent_gate.plainjson":
                for alias in node.names:
                    if alias.name in ONE_DEFINITION:
                        wrong.append(f"{module}:{node.lineno} imports {alias.name} "
                                     f"from {node.module}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("state", [CallState.RECEIVED, CallState.AUTHORIZED,
                                   CallState.AWAITING_APPROVAL])
def test_every_verdict_has_one_legal_arrow_from_each_state_it_is_decided_in(
    state: CallState,
) -> None:
    for verdict in Verdict:
        event, _ = verdict_arrow(state, verdict)
        assert (state, event) in ARROWS, f"{verdict} from {state} takes no legal arrow"
    assert {key for key in VERDICTS if key[0] is state} == {(state, v.value) for v in Verdict}
    # A deny never authorizes; an allow never rejects.
    assert verdict_arrow(state, Verdict.DENY).event in (Event.REJECT, Event.DENY)
    assert verdict_arrow(state, Verdict.ALLOW).event in (Event.ALLOW, Event.CLAIM, Event.APPROVE)


def test_a_verdict_is_not_decided_where_no_decision_is_taken() -> None:
    with pytest.raises(ValueError, match="executing"):
        verdict_arrow(CallState.EXECUTING, Verdict.ALLOW)


def test_the_gate_maps_no_verdict_to_an_arrow_itself() -> None:
    # The if-chain and the table gate/decide.py had are gone: it asks ledger.states.
    source = (PACKAGE / "gate" / "decide.py").read_text("utf-8")
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {ast.unparse(k) for k in node.keys if k is not None}
            values = " ".join(ast.unparse(v) for v in node.values)
            assert not (keys & {"Verdict.ALLOW", "Verdict.DENY"} and "Event." in values), (
                f"gate/decide.py:{node.lineno} maps verdicts to events"
            )


def test_the_glossary_names_modules_that_define_its_terms() -> None:
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text("utf-8")
    table = text.split("<!-- glossary:begin -->")[1].split("<!-- glossary:end -->")[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 20
    seen: set[str] = set()
    for row in rows[1:]:
        term, _, where = (cell.strip() for cell in row.strip("|").split("|"))
        path = PACKAGE.parent / where.strip("`")
        assert path.is_file(), f"glossary: {term} names {where}, which is gone"
        tree = ast.parse(path.read_text("utf-8"))
        names = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
        names |= {t.id for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)
                  for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                  if isinstance(t, ast.Name)}
        for name in (part.strip("` ") for part in term.split(",") if "`" in part):
            assert name in names, f"glossary: {name} is not defined in {where}"
            assert name not in seen, f"glossary: {name} defined twice"
            seen.add(name)
