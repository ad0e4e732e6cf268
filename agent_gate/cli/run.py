"""``agent-gate run``: a live event stream through the whole pipeline.

The same pipeline as ``agent-gate replay``, with the stream read from an HTTP
endpoint instead of a file: a real provider (with its key in a ``--header``), or
the local server (``python -m agent_gate.stream_server``). A cut connection is
re-subscribed with ``Last-Event-ID`` when the request may be sent again (a GET, or
``--resumable``); a POST that would generate a new answer is never re-sent.

Header values are secrets: they are sent, never printed, and no message of this
command quotes them (transport errors carry status, counts and a redacted excerpt
of a JSON error body only).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from agent_gate.cli._exit import EXIT_CODES_HELP, CliError
from agent_gate.cli._operator import failures
from agent_gate.cli._options import (
    F,
    db_option_as,
    gate_policy,
    next_input_option,
    shadow_option,
    stream_task_options,
)
from agent_gate.cli._progress import finish, watching
from agent_gate.cli.replay import echo_outcomes, load_registry, write_next_input
from agent_gate.providers import AUTO, provider_names

# httpx, SQLAlchemy and the gate are imported inside the command: assembling the
# CLI for `agent-gate sse ...` must not load them.

if TYPE_CHECKING:
    from agent_gate.gate.live import LiveResult


def parse_headers(values: tuple[str, ...]) -> dict[str, str]:
    """``NAME:VALUE`` pairs; a malformed one is named by position, never quoted."""
    headers: dict[str, str] = {}
    for position, raw in enumerate(values, start=1):
        name, sep, value = raw.partition(":")
        name = name.strip()
        if not sep or not name or any(c.isspace() for c in name):
            raise click.BadParameter(
                f"header #{position} is not NAME:VALUE (its value is not shown)",
                param_hint="--header",
            )
        headers[name] = value.strip()
    return headers


def _timeout_option(flag: str, default: float, help: str) -> Callable[[F], F]:
    """A positive number of seconds, shown with its default: both stream timeouts."""
    return click.option(
        flag,
        type=click.FloatRange(min=0, min_open=True),
        default=default,
        show_default=True,
        help=help,
    )


def _has(headers: dict[str, str], name: str) -> bool:
    return any(k.lower() == name.lower() for k in headers)


def _summary(result: LiveResult) -> dict[str, object]:
    stats = result.stats
    return {
        "events": stats.events,
        "heartbeats": stats.heartbeats,
        "connections": stats.connections,
        "reconnects": stats.reconnects,
        "replayed_events": result.calls.replayed_events,
        "last_event_id": stats.last_event_id,
        "status": stats.status,
    }


@click.command(name="run", epilog=EXIT_CODES_HELP)
@click.option(
    "--provider",
    required=True,
    type=click.Choice([*provider_names(), AUTO]),
    help="Wire protocol of the stream.",
)
@click.option("--url", required=True, help="The streaming endpoint.")
@click.option(
    "--header",
    "header_values",
    multiple=True,
    metavar="NAME:VALUE",
    help="Request header, repeatable (e.g. 'Authorization: Bearer ...'). Never printed.",
)
@click.option(
    "--body",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Request body file (sent as application/json when it is JSON).",
)
@click.option(
    "--method",
    default=None,
    help="HTTP method (default: POST with --body, else GET).",
)
@click.option(
    "--resumable",
    is_flag=True,
    help="Re-sending this (non-GET) request with Last-Event-ID continues the same answer.",
)
@click.option(
    "--resume",
    "resume_with",
    type=click.Choice(["last-event-id", "openai-background"]),
    default="last-event-id",
    show_default=True,
    help="How a cut stream is re-subscribed: Last-Event-ID (a GET or --resumable), or "
    "OpenAI Responses background mode (GET .../responses/ID?stream=true&starting_after=N; "
    "create the response with \"background\": true).",
)
@stream_task_options
@click.option(
    "--policy",
    "policy_file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Policy file deciding each call (default: every registered tool with valid "
    "arguments is allowed).",
)
@shadow_option
@db_option_as("url_db")
@_timeout_option(
    "--idle-timeout", 60.0, "Seconds with no byte at all before the stream is abandoned."
)
@_timeout_option(
    "--progress-timeout",
    300.0,
    "Seconds without an event that is not a heartbeat before the stream is abandoned.",
)
@click.option(
    "--max-reconnects",
    type=click.IntRange(min=0),
    default=50,
    show_default=True,
    help="Re-subscriptions allowed for this stream.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object per call, then a summary object."
)
@next_input_option
def run_command(
    provider: str,
    url: str,
    header_values: tuple[str, ...],
    body: Path | None,
    method: str | None,
    resumable: bool,
    resume_with: str,
    task_id: str,
    tools_spec: str,
    policy_file: str | None,
    shadow_file: str | None,
    url_db: str | None,
    idle_timeout: float,
    progress_timeout: float,
    max_reconnects: int,
    as_json: bool,
    next_input: Path | None,
) -> None:
    """Stream URL through accumulator, ledger and tools, each complete call at most once.

    Prints one line per call (call id, tool, final state, replayed or new, reason)
    and how the response ended. Calls already in the ledger for TASK are answered
    from it and not executed again. With --policy, each new call is decided by that
    policy file: allowed calls run, others are rejected or wait for an approval
    (`agent-gate approve`, then `agent-gate resume`). While it runs, each call's
    state as it changes, the stream's events, heartbeats and reconnects show on
    standard error (live on a terminal, else one line per change). Exits 1 when the
    stream itself failed (an error status, a wrong content type, a timeout, a cut
    that could not be resumed); the calls it held are then recorded as not run.
    """
    import httpx

    from agent_gate.gate import Gate
    from agent_gate.gate.live import run_live
    from agent_gate.transport import OpenAIResponsesResume, ReconnectPolicy, StreamLimits

    if resume_with == "openai-background" and provider != "openai-responses":
        raise click.BadParameter(
            "openai-background resumes OpenAI Responses streams only: name "
            "--provider openai-responses", param_hint="--resume"
        )
    headers = parse_headers(header_values)
    registry = load_registry(tools_spec)
    content = body.read_bytes() if body is not None else None
    if content is not None and not _has(headers, "content-type"):
        try:
            json.loads(content)
        except ValueError:
            pass
        else:
            headers["Content-Type"] = "application/json"
    verb = (method or ("POST" if content is not None else "GET")).upper()
    try:
        with (failures(), Gate(registry, url_db, policy=gate_policy(policy_file, shadow_file),
                   create=True) as gate,
              watching(gate.ledger, task_id, as_json=as_json) as progress):
            result = run_live(
                gate,
                url,
                provider=provider,
                task_id=task_id,
                method=verb,
                headers=headers,
                content=content,
                resumable=resumable,
                resume=OpenAIResponsesResume() if resume_with == "openai-background" else None,
                limits=StreamLimits(idle_timeout=idle_timeout, progress_timeout=progress_timeout),
                reconnect=ReconnectPolicy(max_reconnects=max_reconnects),
                on_event=progress.event if progress is not None else None,
                on_reconnect=progress.reconnect if progress is not None else None,
            )
    except httpx.InvalidURL:
        # Rejected before anything was sent; the URL is not quoted (it may carry a key).
        raise click.BadParameter("expected an http:// or https:// URL (not shown: it may "
                                 "carry a key)", param_hint="--url") from None
    terminal = str(result.terminal) if result.terminal is not None else None
    if provider == AUTO and result.provider not in (None, AUTO):
        click.echo(f"provider: detected {result.provider}", err=True)
    echo_outcomes(result.outcomes, as_json=as_json)
    summary = _summary(result)
    if not as_json:
        click.echo(f"terminal: {terminal}")
        click.echo(
            "stream: {events} events ({heartbeats} heartbeats) over {connections} "
            "connection(s), {replayed_events} replayed after a reconnect".format(**summary)
        )
    elif result.error:
        click.echo(json.dumps({"terminal": terminal, "error": result.error, "stream": summary,
                               "exit_code": 1}))
    if result.error:
        raise CliError(f"the stream was abandoned: {result.error}")
    write_next_input(result, provider, next_input)
    finish((o.state.value for o in result.outcomes),
           summary={"terminal": terminal, "error": None, "stream": summary} if as_json
           else None)
