"""``agent-gate call show CALL``: everything the ledger holds about one call.

What an operator reads before approving, denying or resolving it: the arguments as
stored (redacted fields as their stand-ins, never unsealed), the schema verdict,
the policy's decision with its rules and reasons, every answer a person gave, every
audit entry, the attempts, and the stored result or error (bounded). The JSON form
is ``CallDetails.to_dict()``, the value an HTTP API serves too.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from agent_gate.cli._operator import failures, find_call, open_ledger
from agent_gate.cli._options import call_options
from agent_gate.cli._output import cell, console, emit_json, state_cell, table, when

if TYPE_CHECKING:
    from rich.console import Console

    from agent_gate.ledger.views.details import CallDetails


@click.group(name="call")
def call_group() -> None:
    """Read one call: `agent-gate call show CALL [--task T]`."""


@call_group.command(name="show")
@click.argument("call_id")
@click.option("--max-result", "max_shown", type=click.IntRange(min=100), default=4000,
              show_default=True, help="Characters of the stored result shown.")
@click.option("--reveal", "reveal_fields", multiple=True, metavar="FIELD",
              help="Also print this redacted field in clear (repeatable): needs --by an "
                   "operator with rights on the tool, --policy, and the seal key; audited.")
@click.option("--by", "by", default=None, metavar="OPERATOR",
              help="The operator who reads a field with --reveal (agent-gate operator list).")
@click.option("--policy", "policy", default=None, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="The policy file (it says which fields no person may see).")
@call_options
def show_command(
    call_id: str, max_shown: int, reveal_fields: tuple[str, ...], by: str | None,
    policy: str | None, task_id: str | None, url: str | None, as_json: bool
) -> None:
    """Show CALL_ID: arguments, schema verdict, decision, approvals, history, result.

    Redacted argument fields appear as their stand-ins (digest, size, preview), unless
    --reveal FIELD asks for one in clear for the operator --by names (their rights
    must cover the tool, the policy must not mark the field `reveal: never`; each
    reveal is in the audit trail under their name). Name the task with --task when
    the id repeats.
    """
    revealed: dict[str, Any] = {}
    with failures(), open_ledger(url) as ledger:
        rec = find_call(ledger, call_id, task_id)
        details = ledger.call_details(rec.task_id, rec.call_id, max_shown=max_shown)
        if reveal_fields:
            revealed = _reveal(ledger, rec, reveal_fields, by, policy)
    if details is None:  # the row cannot vanish (never deleted); kept for the type
        raise click.ClickException(f"no call {call_id!r} in the ledger")
    if as_json:
        emit_json({**details.to_dict(), **({"revealed": revealed} if revealed else {})})
        return
    _print(console(), details)
    for field, value in revealed.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False,
                                                                indent=2)
        console().print(cell(f"{'revealed':<12}", "bold") + cell(f"{field} (audited):"))
        for line in text.splitlines() or [""]:
            console().print(cell("  " + line))


def _reveal(ledger: Any, rec: Any, fields: tuple[str, ...], by: str | None,
            policy: str | None) -> dict[str, Any]:
    """Each field in clear for the operator ``by`` (``gate.reveal``), or a refusal."""
    from agent_gate.cli._exit import CliError
    from agent_gate.gate.admission import Arguments
    from agent_gate.gate.reveal import reveal
    from agent_gate.ledger.views.operators import Operators
    from agent_gate.policy import Policy

    if by is None or not by.strip():
        raise CliError("--reveal needs --by OPERATOR: each reveal is audited under a name")
    operators = Operators(ledger.engine)
    found = [o for o in operators.list() if o.name == by.strip()]
    if not found:
        raise CliError(f"no operator {by.strip()!r} (agent-gate operator list)")
    keys = Arguments(None, ledger.url, None)
    rules = Policy.load(policy) if policy is not None else None
    return {f: reveal(rec, f, op=found[0], operators=operators, keys=keys,
                      policy=rules).value for f in fields}


def _field(out: Console, name: str, value: object, style: str = "") -> None:
    out.print(cell(f"{name:<12}", "bold") + cell(value, style))


def _print(out: Console, d: CallDetails) -> None:
    c = d.call
    out.print(cell(f"call {c.call_id} of task {c.task_id}", "bold"))
    _field(out, "tool", f"{c.tool} (effect {c.effect}, idempotency {c.idempotency})")
    if c.trace_id:
        _field(out, "trace", f"{c.trace_id} (span {c.span_id or '-'})")
    out.print(cell(f"{'state':<12}", "bold") + state_cell(c.state.value)
              + cell(f"  {c.reason_code or ''}: {c.reason or ''}" if c.reason else ""))
    note = " (redacted fields show their stand-ins; the values are sealed)" if d.redacted else ""
    _field(out, "arguments", f"hash {c.args_hash}{note}")
    text = "null" if c.arguments is None else json.dumps(c.arguments, indent=2,
                                                          ensure_ascii=False, sort_keys=True)
    for line in text.splitlines():
        out.print(cell("  " + line))
    errors = ", ".join(f"{e.get('pointer') or '/'} ({e.get('keyword')})" for e in d.schema.errors)
    _field(out, "schema", d.schema.status + (f": {errors}" if errors else ""),
           "" if d.schema.status == "valid" else "red")
    if d.decision is not None:
        dec = d.decision
        _field(out, "decision", f"{dec.verdict or dec.code} · rules "
               f"{', '.join(dec.rule_ids) or '-'} · policy {dec.policy_hash or '-'}")
        for reason in dec.reasons:
            out.print(cell(f"  - {reason}"))
    elif c.state.value == "received":
        _field(out, "decision", "none yet")
    else:
        _field(out, "decision", f"none: {c.reason_code or c.state.value} before any policy")
    _approvals(out, d)
    _field(out, "attempts", str(c.attempt) if d.attempts else "none")
    for a in d.attempts:
        end = f"ended {when(a.ended_at)} in {a.ended_in} ({a.code or '-'})" if a.ended_at \
            else "still running"
        out.print(cell(f"  #{a.number} by {a.owner or '-'}, started {when(a.started_at)}, {end}"))
    _outcome(out, d)
    shown = table("history")
    for name in ("#", "time (UTC)", "event", "state", "actor"):
        shown.add_column(name, overflow="fold")
    for e in d.history:
        state: Any = state_cell(e.to_state)
        if e.from_state and e.to_state and e.from_state != e.to_state:
            state = cell(f"{e.from_state} → ") + state
        shown.add_row(cell(e.seq), cell(when(e.at)), cell(e.event), state, cell(e.actor))
    out.print(shown)


def _approvals(out: Console, d: CallDetails) -> None:
    if d.deadline is not None:
        _field(out, "deadline", f"{when(d.deadline.due_at)} UTC by the ledger's clock · "
               f"{d.deadline.summary()} (rule {d.deadline.rule_id or '-'})")
    _field(out, "approvals", str(len(d.approvals)) if d.approvals else "none")
    for a in d.approvals:
        expires = f"expires {when(a.expires_at)} UTC" if a.expires_at else "never expires"
        used = (f"used by attempt {a.consumed_attempt}" if a.consumed
                else "expired" if a.expired() else "unused")
        out.print(cell(f"  #{a.id} {a.verdict} by {a.decided_by} at {when(a.decided_at)} UTC, "
                       f"{expires}, {used}" + (f": {a.reason}" if a.reason else "")))
        out.print(cell(f"     bound to arguments {a.args_hash}, policy {a.policy_hash or '-'}"))


def _outcome(out: Console, d: CallDetails) -> None:
    c = d.call
    if c.error is not None:
        _field(out, "error", json.dumps(c.error, ensure_ascii=False), "red")
    if c.result_omitted:
        _field(out, "result", f"not kept ({c.result_bytes} bytes, sha256 {c.result_sha256})")
    elif d.result_text is not None:
        cut = " (cut; --max-result shows more)" if d.result_truncated else ""
        _field(out, "result", d.result_text + cut)
