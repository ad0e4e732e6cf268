"""``agent-gate mcp proxy``: put the gate in front of an existing MCP server.

The command only reads its options; the proxy itself is
``agent_gate.integrations.mcp.proxy``. The ``mcp`` package is imported when the
command runs, so the rest of the CLI works without the ``mcp`` extra.
"""

from __future__ import annotations

import click

from agent_gate.cli._operator import failures
from agent_gate.cli._options import (
    db_option,
    gate_policy,
    parse_duration,
    parse_listen,
    role_option,
    shadow_option,
)

_EPILOG = """\b
Examples:
  agent-gate mcp proxy --policy policy.yaml --task notes -- python server.py
  agent-gate mcp proxy --policy policy.yaml --upstream-url http://127.0.0.1:9000/mcp \\
      --listen 127.0.0.1:8765
A client names a call itself with "_meta": {"agent-gate/call-id": "..."} on tools/call;
otherwise a write with the same tool and arguments runs at most once per task, or,
with --dedupe TOOL=FIELD,..., a write with the same values of those fields.
An upstream that goes away is started (or, with --upstream-url, reached) again
after a backoff; meanwhile calls get an "upstream unavailable, retry" result and
are not recorded. A call cut off mid-way is in doubt: agent-gate resolve.
"""


@click.group(name="mcp")
def mcp_group() -> None:
    """Model Context Protocol: gate the tools of an MCP server."""


@mcp_group.command(name="proxy", epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.option("--policy", "policy_file", required=True, type=click.Path(dir_okay=False),
              help="The policy file every tools/call is judged by.")
@shadow_option
@db_option
@click.option("--task", "task_id", default=None,
              help="Record every call in this task (default: one task per client session). "
                   "Give it to have calls repeated after a restart answered from the ledger.")
@click.option("--principal", "principal_id", default=None,
              help="Who the agent acts for (the policy's `principal: id`).")
@role_option
@click.option("--approval-wait", "approval_wait", default="50s", show_default=True,
              help="How long a call waiting for approval holds its request open: 90s, 5m, 1h "
                   "(keep it under the client's request timeout: 60s for most clients).")
@click.option("--upstream-url", "upstream_url", default=None,
              help="Reach the upstream MCP server over Streamable HTTP at this URL "
                   "instead of starting COMMAND.")
@click.option("--listen", "listen", default=None, metavar="HOST:PORT",
              help="Serve Streamable HTTP (resumable) on HOST:PORT instead of stdio.")
@click.option("--dedupe", "dedupe", multiple=True, metavar="TOOL=FIELD[,FIELD...]",
              help="Calls of TOOL with the same values of these arguments are one call in "
                   "the task: run at most once (repeatable).")
@click.option("--upstream-restart/--no-upstream-restart", "restart", default=True,
              show_default=True,
              help="Start (or reach) the upstream again after it goes away, with a backoff; "
                   "with --no-upstream-restart the proxy stops with an error instead.")
@click.option("--upstream-backoff", "backoff", default="0.1s,5s", show_default=True,
              metavar="FIRST,MAX", help="Wait FIRST before the first restart, doubling up to "
              "MAX between failed ones (each shortened by up to a quarter at random).")
@click.option("--upstream-timeout", "start_timeout", default="30s", show_default=True,
              help="How long the upstream has to start and answer initialize.")
@click.option("--max-upstream-sessions", "max_upstreams", default=64, show_default=True,
              type=click.IntRange(min=1),
              help="With --listen: how many client sessions may each have their own upstream "
                   "session (a child process, for COMMAND) at once; more are asked to retry.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def proxy_command(
    policy_file: str, shadow_file: str | None, url: str | None, task_id: str | None,
    principal_id: str | None,
    roles: tuple[str, ...], approval_wait: str, upstream_url: str | None, listen: str | None,
    dedupe: tuple[str, ...], restart: bool, backoff: str, start_timeout: str,
    max_upstreams: int, command: tuple[str, ...],
) -> None:
    """Serve the MCP server COMMAND (after --) with every tool call gated."""
    if bool(command) == bool(upstream_url):
        raise click.UsageError("give the upstream server as -- COMMAND [ARGS...] or "
                               "--upstream-url URL (one of them)")
    wait = parse_duration(approval_wait, param_hint="--approval-wait")
    first, _, most = backoff.partition(",")
    delays = (parse_duration(first, param_hint="--upstream-backoff"),
              parse_duration(most or first, param_hint="--upstream-backoff"))
    timeout = parse_duration(start_timeout, param_hint="--upstream-timeout")
    if None in delays or delays[0] > delays[1]:  # type: ignore[operator]
        raise click.BadParameter(f"{backoff!r} is not FIRST,MAX with FIRST <= MAX",
                                 param_hint="--upstream-backoff")
    try:
        import anyio

        from agent_gate.integrations.mcp.link import Backoff
        from agent_gate.integrations.mcp.proxy import (
            ProxyConfig,
            parse_dedupe,
            principal_of,
            serve,
        )
    except ImportError as exc:
        raise click.ClickException(
            f"the MCP proxy needs the mcp extra: pip install 'agent-gate[mcp]' ({exc.name})"
        ) from None
    address = parse_listen(listen, any_port=False) if listen is not None else None
    try:
        keys = parse_dedupe(dedupe)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--dedupe") from None
    config = ProxyConfig(
        upstream_command=command, upstream_url=upstream_url, task=task_id,
        principal=principal_of(principal_id, roles),
        approval_wait=wait if wait is not None else float("inf"), listen=address, dedupe=keys,
        restart=restart, backoff=Backoff(first=delays[0] or 0.1, most=delays[1] or 5.0),
        start_timeout=timeout if timeout is not None else float("inf"),
        max_upstreams=max_upstreams,
    )
    from agent_gate.gate import Gate
    from agent_gate.ledger.backend.dialect import resolve_url
    from agent_gate.tools import ToolRegistry

    with failures(), Gate(ToolRegistry(), resolve_url(url),
                          policy=gate_policy(policy_file, shadow_file),
                          create=True) as gate:
        anyio.run(serve, gate, config)


@mcp_group.command(name="check", context_settings={"max_content_width": 100})
@click.option("--policy", "policy_file", required=True, type=click.Path(dir_okay=False),
              help="The policy file the proxy would run under.")
@click.option("--upstream-url", "upstream_url", default=None,
              help="Reach the upstream MCP server over Streamable HTTP at this URL "
                   "instead of starting COMMAND.")
@click.option("--upstream-timeout", "start_timeout", default="30s", show_default=True,
              help="How long the upstream has to start and answer initialize.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def check_command(
    policy_file: str, upstream_url: str | None, start_timeout: str, command: tuple[str, ...],
) -> None:
    """List what `mcp proxy` would offer of the upstream COMMAND (after --), and each tool
    it would leave out with the reason. Exit status 1 when a tool is left out for what it
    is (malformed, a schema the gate cannot check); tools the policy does not name are
    listed but expected."""
    if bool(command) == bool(upstream_url):
        raise click.UsageError("give the upstream server as -- COMMAND [ARGS...] or "
                               "--upstream-url URL (one of them)")
    timeout = parse_duration(start_timeout, param_hint="--upstream-timeout")
    try:
        import anyio

        from agent_gate.integrations.mcp.check import check_upstream
        from agent_gate.integrations.mcp.proxy import ProxyConfig
    except ImportError as exc:
        raise click.ClickException(
            f"the MCP proxy needs the mcp extra: pip install 'agent-gate[mcp]' ({exc.name})"
        ) from None
    config = ProxyConfig(upstream_command=command, upstream_url=upstream_url, restart=False,
                         start_timeout=timeout if timeout is not None else float("inf"))
    with failures():
        report = anyio.run(check_upstream, policy_file, config)
    click.echo(f"upstream: {report.server} ({', '.join(report.features) or 'no capabilities'})")
    click.echo(f"offered: {', '.join(report.offered) or '(none)'}")
    for name, why in report.left_out:
        click.echo(f"left out: {name!r}: {why}")
    if report.broken:
        raise SystemExit(1)
