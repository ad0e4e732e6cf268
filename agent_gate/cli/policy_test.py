"""``agent-gate policy test``: a policy's test files run as CI runs code tests.

One table row per case (rich), the differences of each failed case, then the rules
and limits no case exercised and the rules that can never match a call the tool's
schema accepts. Exit status 1 when a case fails (or a file cannot be read), 0
otherwise; ``--junit FILE`` writes JUnit XML (one testsuite per test file, one
testcase per case) for CI dashboards. Nothing prints a call's arguments: a case is
named by its name, tool and line.

Schemas, for dead rules, come from the test files' ``schemas:``, ``--schemas FILE``
(JSON or YAML: tool -> schema, or a provider tool list) and ``--tools MODULE[:ATTR]``
(the registry the gate runs), merged in that order.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent_gate.errors import PolicyLoadError
from agent_gate.policy import Policy
from agent_gate.policy.casecheck import TestReport, run_cases
from agent_gate.policy.casefile import LoadedCases, load_cases, schemas_of
from agent_gate.policy.yamlsource import parse_yaml

__all__ = ["load_schemas", "schema_options", "test_command"]

# The commands here are ``policy`` subcommands: ``cli/policy.py`` makes them commands
# of its group (``policy_group.command(name=...)``), so they carry only their options.

_STYLE = {"allow": "green", "approve": "yellow", "deny": "red"}


def load_schemas(schemas_file: str | None, tools_spec: str | None) -> dict[str, Any]:
    """Tool schemas from ``--schemas`` and ``--tools`` (the latter wins on a clash)."""
    found: dict[str, Any] = {}
    if schemas_file is not None:
        try:
            raw = Path(schemas_file).read_bytes()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {schemas_file}: {exc.strerror}", param_hint="--schemas"
            ) from None
        try:
            data = parse_yaml(raw, schemas_file).data  # YAML is a superset of JSON
            found.update(schemas_of(data))
        except PolicyLoadError as exc:
            raise click.BadParameter(str(exc.problems[0]), param_hint="--schemas") from None
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--schemas") from None
    if tools_spec is not None:
        from agent_gate.cli.replay import load_registry

        found.update({tool.name: dict(tool.spec.schema) for tool in load_registry(tools_spec)})
    return found


def schema_options(fn: Any) -> Any:
    """``--schemas FILE`` and ``--tools MODULE[:ATTR]``: where a command finds the tools'
    JSON Schemas (``policy check`` and ``policy test`` name them the same way)."""
    fn = click.option(
        "--tools",
        "tools_spec",
        metavar="MODULE[:ATTR]",
        help="A ToolRegistry whose schemas find rules that can never match.",
    )(fn)
    return click.option(
        "--schemas",
        "schemas_file",
        metavar="FILE",
        help="Tool schemas (JSON/YAML: tool -> JSON Schema, or a provider tool list).",
    )(fn)


def _problems(exc: PolicyLoadError) -> None:
    for problem in exc.problems:
        click.echo(str(problem), err=True)


def _table(report: TestReport) -> Table:
    table = Table(title=f"policy tests: {report.policy.source}", title_justify="left")
    for column in ("", "case", "tool", "expected", "got", "decided by"):
        table.add_column(column, overflow="fold")
    for result in report.results:
        expected = result.case.expect.decision.value
        got = result.decision.effect.value if result.decision is not None else "-"
        ids = ", ".join(result.decision.rule_ids) if result.decision is not None else "-"
        mark = Text("ok", style="green") if result.passed else Text("FAIL", style="bold red")
        table.add_row(
            mark,
            Text(f"{result.name} ({Path(result.source).name}:{result.line})"),
            Text(result.case.tool),
            Text(expected, style=_STYLE[expected]),
            Text(got, style=_STYLE.get(got, "")),
            Text(ids),
        )
    return table


def _print(console: Console, report: TestReport) -> None:
    console.print(_table(report))
    for result in report.failed:
        console.print(f"FAIL {result.source}:{result.line}: {result.name}", markup=False,
                      highlight=False, soft_wrap=True)
        for failure in result.failures:
            console.print(f"  - {failure}", markup=False, highlight=False, soft_wrap=True)
    passed = sum(r.passed for r in report.results)
    console.print(f"{passed} passed, {len(report.failed)} failed", markup=False)
    for item in report.unexercised:
        console.print(f"not exercised: {item.where}", markup=False, highlight=False, soft_wrap=True)
    for _dead, where in report.dead:
        console.print(f"never matches: {where}", markup=False, highlight=False, soft_wrap=True)


def _json(report: TestReport) -> dict[str, Any]:
    return {
        "policy": report.policy.source,
        "policy_hash": report.policy.hash,
        "passed": report.passed,
        "cases": [
            {
                "file": r.source,
                "line": r.line,
                "name": r.name,
                "tool": r.case.tool,
                "expected": r.case.expect.decision.value,
                "got": r.decision.effect.value if r.decision is not None else None,
                "rule_ids": list(r.decision.rule_ids) if r.decision is not None else [],
                "passed": r.passed,
                "failures": list(r.failures),
            }
            for r in report.results
        ],
        "unexercised": [
            {"id": u.id, "kind": u.kind, "line": u.where.line} for u in report.unexercised
        ],
        "never_match": [
            {"id": d.rule_id, "tool": d.tool, "line": where.line, "why": d.why}
            for d, where in report.dead
        ],
    }


def junit_xml(report: TestReport) -> bytes:
    """JUnit XML as CI servers read it: one testsuite per test file."""
    root = ET.Element("testsuites", name=f"agent-gate policy test {report.policy.source}")
    by_file: dict[str, list[Any]] = {}
    for result in report.results:
        by_file.setdefault(result.source, []).append(result)
    for source, results in by_file.items():
        failures = sum(not r.passed for r in results)
        suite = ET.SubElement(
            root, "testsuite", name=source, tests=str(len(results)), failures=str(failures),
            errors="0", skipped="0",
        )
        for result in results:
            case = ET.SubElement(
                suite, "testcase", classname=f"{Path(source).stem}.{result.case.tool}",
                name=result.name, file=source, line=str(result.line or 0),
            )
            if not result.passed:
                failure = ET.SubElement(case, "failure", message=result.failures[0])
                failure.text = "\n".join(result.failures)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


@click.argument("policy_file", metavar="POLICY")
@click.argument("test_files", metavar="TESTS...", nargs=-1, required=True)
@schema_options
@click.option("--junit", "junit_file", metavar="FILE", help="Also write JUnit XML to FILE.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON object.")
def test_command(
    policy_file: str,
    test_files: tuple[str, ...],
    schemas_file: str | None,
    tools_spec: str | None,
    junit_file: str | None,
    as_json: bool,
) -> None:
    """Run the cases of each TESTS file against POLICY; exit 1 if any case fails.

    Also lists the rules and limits no case exercised, and the rules that can never
    match a call the tool's schema accepts (schemas from the test files' `schemas:`,
    --schemas and --tools).
    """
    try:
        policy = Policy.load(policy_file)
    except PolicyLoadError as exc:
        _problems(exc)
        sys.exit(1)
    loaded: list[LoadedCases] = []
    failed_to_load = False
    for name in test_files:
        try:
            raw = Path(name).read_bytes()
        except OSError as exc:
            click.echo(f"{name}: cannot read: {exc.strerror}", err=True)
            failed_to_load = True
            continue
        try:
            loaded.append(load_cases(raw, name))
        except PolicyLoadError as exc:
            _problems(exc)
            failed_to_load = True
    if failed_to_load:
        sys.exit(1)
    report = run_cases(policy, loaded, load_schemas(schemas_file, tools_spec))
    if junit_file is not None:
        Path(junit_file).write_bytes(junit_xml(report))
    if as_json:
        click.echo(json.dumps(_json(report), ensure_ascii=False))
    else:
        _print(Console(highlight=False, width=max(100, Console().width)), report)
    if not report.passed:
        sys.exit(1)
