"""``agent-gate policy check`` and ``agent-gate policy explain``.

``check`` is for CI and editors: one ``file:line:column: key: message`` line per
problem on standard error, exit status 1 if any file has one. ``explain`` is for
the person writing a policy: it evaluates one call exactly as the gate would and
shows the decision, the ids that decided it and every rule's outcome. Neither
prints the call's arguments back: explanations name fields, not values.
"""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent_gate.cli._options import role_option
from agent_gate.cli.policy_backtest import backtest_command, shadow_report_command
from agent_gate.cli.policy_test import load_schemas, schema_options, test_command
from agent_gate.policy import (
    Policy,
    PolicyDecision,
    PolicyLoadError,
    Principal,
    TaskHistory,
    TaskScope,
    Verdict,
)
from agent_gate.policy.cedarload import cedar_problems
from agent_gate.policy.reach import dead_rules

_STYLE = {
    Verdict.ALLOW: "bold green",
    Verdict.APPROVE: "bold yellow",
    Verdict.DENY: "bold red",
}
_TRUTH_STYLE = {"true": "green", "false": "dim", "error": "red"}


def _json_option(value: str, what: str) -> Any:
    """Parse an option holding JSON, ``@path`` or ``-`` (stdin) without echoing it on error."""
    if value == "-":
        text = sys.stdin.read()
    elif value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(f"cannot read {value[1:]}: {exc.strerror}") from None
    else:
        text = value
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"{what} is not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})"
        ) from None


def _attr_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _principal(
    principal_json: str | None,
    principal_id: str | None,
    roles: tuple[str, ...],
    attrs: tuple[str, ...],
) -> Principal:
    if principal_json is not None:
        if principal_id is not None or roles or attrs:
            raise click.UsageError("give either --principal JSON or --principal-id/--role/--attr")
        data = _json_option(principal_json, "--principal")
        if not isinstance(data, dict) or not set(data) <= {"id", "roles", "attributes"}:
            raise click.BadParameter(
                'must be an object with keys among "id", "roles", "attributes"',
                param_hint="--principal",
            )
        pid, proles, pattrs = data.get("id"), data.get("roles", []), data.get("attributes", {})
        if pid is not None and not isinstance(pid, str):
            raise click.BadParameter('"id" must be a string', param_hint="--principal")
        if not isinstance(proles, list) or not all(isinstance(r, str) for r in proles):
            raise click.BadParameter('"roles" must be a list of strings', param_hint="--principal")
        if not isinstance(pattrs, dict):
            raise click.BadParameter('"attributes" must be an object', param_hint="--principal")
        return Principal(id=pid, roles=frozenset(proles), attributes=pattrs)
    attributes: dict[str, Any] = {}
    for item in attrs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter("expected KEY=VALUE", param_hint="--attr")
        attributes[key] = _attr_value(value)
    return Principal(id=principal_id, roles=frozenset(roles), attributes=attributes)


def _usage(
    policy: Policy, tool: str, given: tuple[str, ...]
) -> tuple[dict[str, Decimal], list[str]]:
    counters = sorted({limit.key for limit in policy.limits(tool)})
    usage: dict[str, Decimal] = {key: Decimal(0) for key in counters}
    assumed = set(counters)
    for item in given:
        key, sep, value = item.rpartition("=")
        if not sep or not key:
            raise click.BadParameter("expected COUNTER=NUMBER", param_hint="--usage")
        if key not in usage:
            known = ", ".join(counters) or "none"
            raise click.BadParameter(
                f"unknown counter {key!r}; counters of {tool!r}: {known}", param_hint="--usage"
            )
        try:
            usage[key] = Decimal(value)
        except ArithmeticError:
            raise click.BadParameter(f"{key}: not a number", param_hint="--usage") from None
        assumed.discard(key)
    return usage, sorted(assumed)


def _line(console: Console, text: str) -> None:
    """Plain text: no markup (details contain brackets), no re-wrapping of long reasons."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def _print_decision(
    console: Console, policy: Policy, decision: PolicyDecision, assumed: list[str]
) -> None:
    headline = Text("decision: ")
    headline.append(decision.effect.value, style=_STYLE[decision.effect])
    console.print(headline)
    _line(console, f"tool:       {decision.tool}")
    _line(console, f"decided by: {', '.join(decision.rule_ids) or '-'}")
    _line(console, f"policy:     {policy.source} {decision.policy_hash}")
    _line(console, "why:")
    for reason in decision.reasons:
        _line(console, f"  - {reason}")
    if decision.rules:
        table = Table(title="rules", title_justify="left", show_lines=False)
        table.add_column("rule", overflow="fold")
        table.add_column("effect")
        table.add_column("holds")
        table.add_column("detail", overflow="fold")
        for rule in decision.rules:
            table.add_row(
                Text(rule.id),
                Text(rule.effect.value),
                Text(rule.truth.value, style=_TRUTH_STYLE[rule.truth.value]),
                Text(rule.detail),
            )
        console.print(table)
    if decision.limits:
        table = Table(title="limits", title_justify="left")
        for column in ("limit", "counter", "used", "max", "over"):
            table.add_column(column, overflow="fold")
        for limit in decision.limits:
            used = "-" if limit.used is None else str(limit.used)
            table.add_row(
                Text(limit.id),
                Text(limit.key),
                Text(used),
                Text(str(limit.maximum)),
                Text("yes" if limit.exceeded else "no", style="red" if limit.exceeded else ""),
            )
        console.print(table)
    if decision.shadow is not None:
        shadow = decision.shadow
        differs = "differs" if shadow.differs else "same verdict"
        _line(console, f"shadow (not enforced): {shadow.effect.value} by "
                       f"{', '.join(shadow.rule_ids) or '-'} ({differs})")
    if assumed:
        _line(console, "note: no ledger here; usage assumed 0 for: " + ", ".join(assumed))


@click.group(name="policy")
def policy_group() -> None:
    """Validate policy files and explain the decisions they make."""


# subcommands whose modules carry only their options (see cli/policy_test.py)
policy_group.command(name="test")(test_command)
policy_group.command(name="backtest")(backtest_command)
policy_group.command(name="shadow-report")(shadow_report_command)


@policy_group.command(name="check")
@click.argument("files", nargs=-1, required=True)
@schema_options
def check(files: tuple[str, ...], schemas_file: str | None, tools_spec: str | None) -> None:
    """Validate each policy FILE; print file:line:column: key: message per problem.

    With --schemas or --tools, also warn (file:line:column: key: warning: ...) about
    rules that can never match a call the tool's schema accepts, and run Cedar's
    validator on the file's Cedar set against a schema generated from the tools'
    JSON Schemas (its errors fail). Exits 1 if any file has a problem, 0 if all are
    valid (warnings do not fail).
    """
    schemas = load_schemas(schemas_file, tools_spec)
    failed = False
    for file in files:
        try:
            policy = Policy.load(file)
        except PolicyLoadError as exc:
            failed = True
            for problem in exc.problems:
                click.echo(str(problem), err=True)
            continue
        document = policy.document
        for dead in dead_rules(document, schemas):
            where = policy.locate(
                dead.loc,
                f"warning: rule {dead.rule_id} can never match a valid call of "
                f"{dead.tool!r}: {dead.why}",
            )
            click.echo(str(where), err=True)
        if policy.cedar is not None and schemas:
            counters = {name: sorted({lim.key for lim in policy.limits(name)})
                        for name in document.tools}
            invalid = cedar_problems(policy.cedar, document, schemas, counters)
            for line in invalid:
                click.echo(str(policy.locate(("cedar",), f"Cedar validator: {line}")), err=True)
            if invalid:
                failed = True
                continue
        rules = len(document.rules) + sum(len(t.rules) for t in document.tools.values())
        limits = sum(len(t.limits) for t in document.tools.values())
        click.echo(
            f"ok {file}: {len(document.tools)} tools, {rules} rules, {limits} limits, {policy.hash}"
        )
    if failed:
        sys.exit(1)


@policy_group.command(name="explain")
@click.argument("file")
@click.option("--tool", required=True, help="Tool name, as the model would call it.")
@click.option(
    "--args",
    "args_json",
    required=True,
    help="The call's arguments: a JSON object, @FILE to read it from a file, or - for stdin.",
)
@click.option(
    "--principal",
    "principal_json",
    help='Who the agent acts for, as JSON: {"id": ..., "roles": [...], "attributes": {...}}.',
)
@click.option("--principal-id", help="Principal id (instead of --principal).")
@role_option
@click.option(
    "--attr",
    "attrs",
    multiple=True,
    help="Principal attribute KEY=VALUE (repeatable); VALUE is JSON if it parses, else text.",
)
@click.option("--scope", "scope_name", help="Name of a task scope declared in the policy.")
@click.option("--scope-tools", help="Comma-separated tools the task is limited to.")
@click.option(
    "--usage",
    "usage_items",
    multiple=True,
    help="Per-task usage COUNTER=NUMBER, e.g. refund/sum/amount=1500 (default 0).",
)
@click.option("--shadow", "shadow_file", default=None, metavar="FILE",
              help="A policy evaluated in shadow beside FILE: its would-be decision is shown.")
@click.option("--json", "as_json", is_flag=True, help="Print the decision as one JSON object.")
def explain(
    file: str,
    tool: str,
    args_json: str,
    principal_json: str | None,
    principal_id: str | None,
    roles: tuple[str, ...],
    attrs: tuple[str, ...],
    scope_name: str | None,
    scope_tools: str | None,
    usage_items: tuple[str, ...],
    shadow_file: str | None,
    as_json: bool,
) -> None:
    """Evaluate one call of --tool with --args against policy FILE and say why.

    The exit status is 0 whatever the decision (read it from the output, or from
    "effect" with --json); 1 if the policy is invalid, 2 for bad options.
    """
    try:
        policy = Policy.load(file)
        if shadow_file is not None:
            policy = policy.with_shadow(Policy.load(shadow_file))
    except PolicyLoadError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        sys.exit(1)
    arguments = _json_option(args_json, "--args")
    principal = _principal(principal_json, principal_id, roles, attrs)
    task_scope = None
    if scope_name is not None or scope_tools is not None:
        tools = None
        if scope_tools is not None:
            tools = frozenset(t.strip() for t in scope_tools.split(",") if t.strip())
        task_scope = TaskScope(name=scope_name, tools=tools)
    usage, assumed = _usage(policy, tool, usage_items)
    history = TaskHistory() if policy.history_tools(tool) else None  # no earlier calls here
    decision = policy.evaluate(
        tool, arguments, principal=principal, task_scope=task_scope, usage=usage,
        history=history,
    )
    if as_json:
        payload = decision.to_dict()
        payload["policy_source"] = policy.source
        payload["assumed_zero_usage"] = assumed
        click.echo(json.dumps(payload, ensure_ascii=False))
        return
    _print_decision(Console(highlight=False), policy, decision, assumed)
