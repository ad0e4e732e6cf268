"""``agent-gate policy backtest`` and ``policy shadow-report``: what another policy
would have decided (a draft, over past calls; shadow rules, as recorded).

The ledger's past calls are judged again under the draft (``gate.backtest``), with the
database opened read-only. People get the transitions (allow -> deny, ...) with
counts, the draft's rules that cause them with the first call ids, and the calls the
draft cannot judge; ``--json`` lists every call id. Arguments are never printed.
Exit status 0 whatever changes (it is a report), 1 if the draft is invalid, 2 for a
ledger that cannot be opened.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from agent_gate.cli._listing import parse_since
from agent_gate.cli._options import db_option, json_option
from agent_gate.errors import LedgerConfigError, PolicyLoadError
from agent_gate.gate.backtest import BacktestReport, Change, Unjudged, backtest
from agent_gate.gate.shadow_report import ShadowDiff, ShadowReport, shadow_report
from agent_gate.policy import Policy, Verdict

__all__ = ["backtest_command", "shadow_report_command"]

SHOWN: int = 5
_STYLE = {"allow": "green", "approve": "yellow", "deny": "red"}


def _ids(items: Sequence[Change | Unjudged | ShadowDiff], shown: int = SHOWN) -> str:
    """The first call ids as ``task/call`` (all of them only with ``--json``)."""
    names = [f"{c.call.task_id}/{c.call.call_id}" for c in items[:shown]]
    more = f" (+{len(items) - shown} more)" if len(items) > shown else ""
    return ", ".join(names) + more


def _by_rule(
    title: str, moves_column: str,
    rules: Mapping[str, Sequence[tuple[Verdict, Verdict, Change | ShadowDiff]]],
) -> Table:
    """One table for both reports: per rule, how many calls, which verdict moves
    (``before -> after``) and the first call ids."""
    table = Table(title=title, title_justify="left")
    for column in ("rule", "calls", moves_column, "call ids"):
        table.add_column(column, overflow="fold")
    for rule_id, items in rules.items():
        moves = sorted({f"{before.value} -> {after.value}" for before, after, _ in items})
        table.add_row(Text(rule_id), Text(str(len(items))), Text(", ".join(moves)),
                      Text(_ids([call for _, _, call in items])))
    return table


def _print(report: BacktestReport) -> None:
    console = Console(highlight=False, width=max(100, Console().width))

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)

    say(f"draft: {report.draft_source} {report.draft_hash}")
    say(f"{report.judged} calls judged: {len(report.changes)} would change, "
        f"{report.unchanged} would not ({report.same_verdict_other_rules} by other rules); "
        f"{len(report.unjudged)} cannot be judged")
    if report.changes:
        table = Table(title="changes", title_justify="left")
        for column in ("before", "after", "calls", "call ids"):
            table.add_column(column, overflow="fold")
        for (before, after), items in report.by_transition().items():
            table.add_row(Text(before.value, style=_STYLE[before.value]),
                          Text(after.value, style=_STYLE[after.value]),
                          Text(str(len(items))), Text(_ids(items)))
        console.print(table)
        console.print(_by_rule("by the draft's deciding rule", "changes", {
            rule_id: [(c.before, c.after, c) for c in items]
            for rule_id, items in report.by_rule().items()}))
    for why, unjudged in report.by_reason().items():
        say(f"cannot judge {len(unjudged)}: {why}: {_ids(unjudged)}")


@click.argument("draft")
@click.option("--since", "since", default=None, metavar="WHEN",
              help="Only calls since then: 30m, 2h, 7d ago, or an ISO time.")
@click.option("--task", "task_id", default=None, help="Only the calls of this task.")
@db_option
@json_option
def backtest_command(
    draft: str, since: str | None, task_id: str | None, url: str | None, as_json: bool
) -> None:
    """Judge the ledger's past calls under DRAFT and report every decision that would change.

    Read-only: the ledger is opened so that nothing can be written. Sealed arguments
    are opened with the seal key ($AGENT_GATE_SEAL_KEY, $AGENT_GATE_SEAL_KEY_FILE or the
    key file beside a SQLite ledger) and never printed.
    """
    from agent_gate.ledger.backend.dialect import resolve_url

    try:
        policy = Policy.load(draft)
    except PolicyLoadError as exc:
        for problem in exc.problems:
            click.echo(str(problem), err=True)
        sys.exit(1)
    when = parse_since(since) if since is not None else None
    try:
        report = backtest(policy, resolve_url(url), since=when, task=task_id)
    except LedgerConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(report.to_dict(), ensure_ascii=False))
        return
    _print(report)


def _print_shadow(report: ShadowReport) -> None:
    console = Console(highlight=False, width=max(100, Console().width))
    console.print(f"{report.shadowed} calls decided with a shadow evaluation; "
                  f"{len(report.diffs)} where it differs from the enforced decision",
                  markup=False, highlight=False, soft_wrap=True)
    if not report.diffs:
        return
    console.print(_by_rule("by the shadow decision's rule", "enforced -> shadow", {
        rule_id: [(d.enforced, d.shadow, d) for d in items]
        for rule_id, items in report.by_rule().items()}))


@click.option("--since", "since", default=None, metavar="WHEN",
              help="Only calls since then: 30m, 2h, 7d ago, or an ISO time.")
@click.option("--task", "task_id", default=None, help="Only the calls of this task.")
@db_option
@json_option
def shadow_report_command(
    since: str | None, task_id: str | None, url: str | None, as_json: bool
) -> None:
    """List the calls where shadow rules (mode: shadow, or a shadow policy) would have
    decided otherwise than the enforced policy, by rule, with call ids. Read-only."""
    from agent_gate.ledger.backend.dialect import resolve_url

    when = parse_since(since) if since is not None else None
    try:
        report = shadow_report(resolve_url(url), since=when, task=task_id)
    except LedgerConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(report.to_dict(), ensure_ascii=False))
        return
    _print_shadow(report)
