"""``agent-gate replay``: run a recorded event stream through the whole pipeline.

Decodes the file with the strict SSE decoder, feeds the provider's events to the
accumulator and executes each complete call through the gate, against the ledger
at ``--db``. Running it again on the same task executes nothing: every call is
answered from the ledger.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from agent_gate.cli._exit import EXIT_CODES_HELP, CliError
from agent_gate.cli._operator import failures
from agent_gate.cli._options import db_option, next_input_option, stream_task_options
from agent_gate.cli._progress import counted, finish, watching
from agent_gate.errors import AgentGateError
from agent_gate.providers import AUTO, provider_names

if TYPE_CHECKING:
    from agent_gate.gate import Outcome, RunResult
    from agent_gate.gate.live import LiveResult
    from agent_gate.tools import ToolRegistry

_READ_SIZE = 65536


def load_registry(spec: str) -> ToolRegistry:
    """Import ``MODULE[:ATTR]`` (ATTR defaults to ``tools``), also from the cwd."""
    from agent_gate.tools import ToolRegistry

    module_name, _, attr = spec.partition(":")
    attr = attr or "tools"
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}", param_hint="--tools"
        ) from None
    registry = getattr(module, attr, None)
    if not isinstance(registry, ToolRegistry):
        raise click.BadParameter(
            f"{module_name}:{attr} is not a ToolRegistry", param_hint="--tools"
        )
    return registry


def _events(source: BinaryIO) -> Iterator[Any]:
    from agent_gate.sse import SSEDecoder

    decoder = SSEDecoder()
    while chunk := source.read(_READ_SIZE):
        yield from decoder.feed(chunk)
    decoder.end()


def _human(outcomes: list[Outcome]) -> list[str]:
    rows = [
        (o.call_id, o.tool, o.state.value, "replayed" if o.replayed else "new", o.reason or "")
        for o in outcomes
    ]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(4)]
    return [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r[:4])) + "  " + r[4]
        for r in rows
    ]


def echo_outcomes(outcomes: Iterable[Outcome], *, as_json: bool) -> None:
    """One line per call: aligned text, or one JSON object each (``--json``).

    Shared with ``agent-gate run`` so both commands report calls the same way.
    """
    listed = list(outcomes)
    if as_json:
        for o in listed:
            record = {"call_id": o.call_id, "tool": o.tool, "state": o.state.value,
                      "replayed": o.replayed, "reason": o.reason}
            click.echo(json.dumps(record, ensure_ascii=False))
    else:
        for line in _human(listed):
            click.echo(line.rstrip())


def write_next_input(
    result: RunResult | LiveResult, provider: str, path: Path | None
) -> None:
    """``--next-input``: the turn to send back, as JSON, in the protocol the stream
    was read as. Shared with ``agent-gate run``."""
    if path is None:
        return
    try:
        items = result.next_input(result.provider or provider)
    except AgentGateError as exc:
        raise CliError(str(exc)) from None
    path.write_text(json.dumps(items, ensure_ascii=False, indent=1), "utf-8")


@click.command(name="replay", epilog=EXIT_CODES_HELP)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--provider",
    required=True,
    type=click.Choice([*provider_names(), AUTO]),
    help="Wire protocol of the recorded stream (auto: told from its first events).",
)
@stream_task_options
@db_option
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per call, then the terminal."
)
@next_input_option
def replay_command(
    file: Path,
    provider: str,
    task_id: str,
    tools_spec: str,
    url: str | None,
    as_json: bool,
    next_input: Path | None,
) -> None:
    """Run FILE (a recorded text/event-stream) through accumulator, ledger and tools.

    Prints one line per call (call id, tool, final state, replayed or new, reason)
    and the response's terminal state; while it runs, each call's state as it
    changes (on standard error: live on a terminal, else one line per change).
    Calls already in the ledger for TASK are answered from it and not executed again.
    """
    from agent_gate.gate import Gate

    registry = load_registry(tools_spec)
    with (failures(), Gate(registry, url, create=True) as gate, file.open("rb") as source,
          watching(gate.ledger, task_id, as_json=as_json) as progress):
        result = gate.run(counted(_events(source), progress), task_id=task_id,
                          provider=provider)
    if provider == AUTO and result.provider not in (None, AUTO):
        click.echo(f"provider: detected {result.provider}", err=True)
    terminal = str(result.terminal) if result.terminal is not None else None
    echo_outcomes(result.outcomes, as_json=as_json)
    if not as_json:
        click.echo(f"terminal: {terminal}")
    if result.error:
        raise CliError(f"the stream was abandoned: {result.error}")
    write_next_input(result, provider, next_input)
    finish((o.state.value for o in result.outcomes),
           summary={"terminal": terminal} if as_json else None)
