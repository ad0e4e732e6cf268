"""``agent-gate pending``: the calls that wait for a person, across every task.

The command line's inbox: calls awaiting approval (and, with ``--state``, calls in
doubt), oldest first, with their tool, the rules that asked for a person, how long
they have waited, the deadline of the wait (an approve rule's ``approval: timeout``:
when, and what then happens) and a short preview of their arguments, where a field the policy
redacts is its stand-in (never unsealed). The same filters as the web inbox's list
(``ledger.views.inbox``), keyset-paged and streamed a page at a time like ``tasks``.

With ``--policy`` (the file the calls wait under), a call a quorum rule sent shows its
progress ("1 of 2", as the inbox does) and stays listed after one approval. With
``--operator``, only the calls that operator may answer: the calls awaiting approval
of their ``approve`` tools and the calls in doubt of their ``resolve`` tools (each
state by its own right, also with ``--state all``), and no call escalated to a role
the policy's ``operators:`` does not give them (without ``--policy`` nobody holds a
role, so no escalated call is listed: ``approve`` would refuse it too).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from agent_gate.cli._listing import PagedTable, pages, parse_since
from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import ledger_options
from agent_gate.cli._output import cell, console, emit_json, state_style

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from agent_gate.authorize import PolicyAuthorizer
    from agent_gate.ledger.views.inbox import InboxRow

_STATES = {"waiting": ("awaiting_approval",), "in-doubt": ("in_doubt",),
           "all": ("awaiting_approval", "in_doubt")}


def _age(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@click.command(name="pending")
@click.option("--state", type=click.Choice(list(_STATES)), default="waiting",
              show_default=True, help="Calls awaiting approval, in doubt, or both.")
@click.option("--tool", default=None, help="Only this tool's calls.")
@click.option("--task", "task_id", default=None, metavar="TASK", help="Only this task's calls.")
@click.option("--rule", default=None, metavar="RULE",
              help="Only calls this policy rule decided (asked a person for).")
@click.option("--older-than", "older", default=None, metavar="AGE",
              help="Only calls waiting at least this long: 30m, 2h, 7d.")
@click.option("--search", default=None, metavar="ID",
              help="Only calls whose call id or task id starts with this.")
@click.option("--operator", "operator", default=None, metavar="NAME",
              help="Only the calls this operator may answer (agent-gate operator list): "
                   "waiting calls of their approve tools, calls in doubt of their resolve "
                   "tools, no call escalated to a role they do not hold.")
@click.option("--policy", "policy_file", default=None, type=click.Path(dir_okay=False),
              help="The policy the calls wait under: a quorum's progress (1 of 2), and the "
                   "roles of --operator (its operators: section).")
@click.option("--answered", is_flag=True,
              help="Also the calls already approved that wait for a gate to run them.")
@click.option("--newest-first", is_flag=True, help="Newest call first (default: oldest).")
@click.option("--limit", type=click.IntRange(1, 10_000), default=None,
              help="Show at most this many calls (one page); default: all, streamed.")
@click.option("--after", type=click.IntRange(1), default=None, metavar="REF",
              help="Continue after this call (the REF the last page ended at).")
@ledger_options
def pending_command(
    state: str, tool: str | None, task_id: str | None, rule: str | None, older: str | None,
    search: str | None, operator: str | None, policy_file: str | None, answered: bool,
    newest_first: bool, limit: int | None, after: int | None, url: str | None,
    as_json: bool,
) -> None:
    """List the calls that wait for a person across tasks (oldest first).

    Each call is named by its REF (the ledger's id for it, as the inbox names it) and
    its call and task ids; answer one with `agent-gate approve CALL --task TASK`
    (or the inbox), read it whole with `agent-gate call show CALL --task TASK`.
    """
    from dataclasses import replace

    from agent_gate.cli._exit import CliError
    from agent_gate.cli._options import gate_policy
    from agent_gate.ledger.states import CallState
    from agent_gate.ledger.views.inbox import MAX_INBOX_PAGE, InboxQuery, read_inbox
    from agent_gate.ledger.views.operators import Operators
    from agent_gate.policy.approval import quorum_rule_ids

    before = parse_since(older) if older is not None else None
    table: PagedTable | None = None
    shown, last = 0, None
    now = datetime.now(UTC)
    with failures(), open_ledger(url) as ledger:
        rules = gate_policy(policy_file, None)
        tools: tuple[tuple[CallState, tuple[str, ...] | None], ...] | None = None
        roles: tuple[str, ...] | None = None
        closed: tuple[tuple[tuple[str, ...] | None, str], ...] = ()
        if operator is not None:
            found = [o for o in Operators(ledger.engine).list() if o.name == operator]
            if not found:
                raise CliError(f"no operator {operator!r} (agent-gate operator list)")
            # each state by its own right (approve, resolve), in the statement: one
            # list for both would list calls in doubt an approve right cannot resolve
            tools = found[0].tools_by_state()
            # only a role's holders answer a call escalated to it (gate.desk): left out
            # in the statement, so --limit and the pages count the calls shown
            roles = rules.policy.roles_of(operator) if rules is not None else ()
            # nor one a quorum that counts denials and names roles they lack sent
            # (``Policy.closed_rules``): they may neither approve nor deny it
            closed = rules.policy.closed_rules(operator) if rules is not None else ()
        query = InboxQuery(
            states=tuple(CallState(s) for s in _STATES[state]), tool=tool, task_id=task_id,
            rule=rule, waiting_before=before, search=search, tools_by_state=tools, roles=roles,
            closed_rules=closed, newest_first=newest_first, answered=answered,
            quorum_rules=quorum_rule_ids(rules.policy.document) if rules is not None else ())

        def fetch(cursor: int | None, n: int) -> list[InboxRow]:
            rows, _ = read_inbox(ledger.engine, replace(
                query, after=cursor, limit=min(n, MAX_INBOX_PAGE)))
            return rows

        for page in pages(fetch, lambda r: r.ref, after, limit):
            shown += len(page)
            last = page[-1].ref
            quorum = _quorum(ledger.engine, rules, page)
            if as_json:
                for r in page:
                    emit_json({**r.to_dict(now), "quorum": quorum.get(r.ref)})
                continue
            if table is None:
                table = PagedTable(console(), ("ref", "tool", "call", "task", "rules",
                                               "waiting", "deadline", "arguments"),
                                   ids=("call", "task"), right=("ref", "waiting"))
            table.print([_row(r, now, quorum.get(r.ref)) for r in page])
    if not as_json and shown == 0:
        console().print("no call waits for a person" if state == "waiting"
                        else "no call matches")
    elif not as_json and limit is not None and shown == limit and last is not None:
        click.echo(f"more may follow: agent-gate pending --after {last} --limit {limit}",
                   err=True)


def _quorum(engine: Engine, rules: PolicyAuthorizer | None,
            page: list[InboxRow]) -> dict[int, str]:
    """The "1 of 2" of each waiting call on the page a quorum rule sent: those calls and
    their answers in two statements for the page (``views.details.answers_page``)."""
    if rules is None:
        return {}
    from agent_gate.gate.answered import progress
    from agent_gate.ledger.states import CallState
    from agent_gate.ledger.views.details import answers_page
    from agent_gate.policy.approval import quorum_rule_ids

    wanted = set(quorum_rule_ids(rules.policy.document))
    refs = [r.ref for r in page
            if r.state is CallState.AWAITING_APPROVAL and wanted & set(r.rule_ids)]
    out: dict[int, str] = {}
    for rec, answers in answers_page(engine, refs):
        shown = progress(rules, rec, answers)
        out[rec.row_id] = f"{len(shown['approved_by'])} of {shown['min']}"
    return out


def _row(r: InboxRow, now: datetime, quorum: str | None) -> list[Any]:
    d = r.to_dict(now)
    tool = cell(r.tool, state_style(r.state.value)) if r.state.value == "in_doubt" \
        else cell(r.tool)
    rules = ", ".join(r.rule_ids) or "-"
    return [cell(r.ref), tool, cell(r.call_id), cell(r.task_id),
            cell(f"{rules} ({quorum})" if quorum else rules), cell(_age(d["age_seconds"])),
            cell(_deadline(r)), cell(d["preview"])]


def _deadline(r: InboxRow) -> str:
    """When the wait ends (UTC, by the ledger's clock) and what then happens."""
    if r.deadline is None:
        return "-"
    return f"{r.deadline.due_at:%Y-%m-%d %H:%M:%S}Z {r.deadline.summary()}"
