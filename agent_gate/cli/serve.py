"""``agent-gate serve``: the JSON API and web inbox where operators answer calls.

FastAPI, uvicorn and Jinja2 are imported only when the command runs (the ``serve``
extra): ``agent-gate --help`` and every other command stay as light as before.
"""

from __future__ import annotations

import socket

import click

from agent_gate.cli._exit import CliError, ExitCode
from agent_gate.cli._operator import failures, open_ledger
from agent_gate.cli._options import (
    db_option,
    gate_policy,
    parse_duration,
    parse_listen,
    shadow_option,
)


@click.command(name="serve")
@db_option
@click.option("--policy", "policy_file", default=None, type=click.Path(dir_okay=False),
              help="Judge approvals under this policy (its approvers, self_approval).")
@shadow_option
@click.option("--config", "config_file", default=None, type=click.Path(dir_okay=False),
              help="A YAML file: base_url for links, notify:/mail:/slack: the channels "
                   "to tell people on, identity: operators from an identity provider's "
                   "signed assertion (see agent_gate.serve.webhooks and .identity).")
@click.option("--listen", default="127.0.0.1:8765", show_default=True, metavar="HOST:PORT",
              help="Where to listen (port 0: any free port, printed). Plain HTTP: keep it "
                   "on loopback or behind a TLS proxy.")
@click.option("--checkpoint-every", "checkpoint_every", default=None, metavar="DURATION",
              help="Take an audit checkpoint this often (30m, 2h, 1d) or never. Default: "
                   "the config file's checkpoint_every, else every 10 minutes.")
def serve_command(url: str | None, policy_file: str | None, shadow_file: str | None,
                  config_file: str | None,
                  listen: str, checkpoint_every: str | None) -> None:
    """Serve the JSON API (/api, schema at /openapi.json) and the web inbox (/inbox).

    Every route but /health needs an operator's token (`agent-gate operator add NAME
    --approve TOOLS` prints one), or the identity provider's assertion when the
    config file's identity: section names one. The server also takes the audit trail's checkpoints
    (--checkpoint-every). Stop with Ctrl-C.
    """
    host, port = parse_listen(listen, any_port=True)
    try:
        import uvicorn

        from agent_gate.serve import create_app
        from agent_gate.serve.webhooks import ServeConfig, load_config
    except ImportError as exc:
        raise CliError(f"agent-gate serve needs the serve extra ({exc.name} is missing): "
                       "pip install 'agent-gate[serve]'", ExitCode.USAGE) from None
    from agent_gate.ledger.backend.dialect import resolve_url

    with failures():
        resolved = resolve_url(url)
        open_ledger(resolved).close()  # a missing or old ledger fails here, as one line
        config = load_config(config_file) if config_file else ServeConfig()
        if checkpoint_every is not None:
            every = parse_duration(checkpoint_every, param_hint="--checkpoint-every")
            config = config.model_copy(update={"checkpoint_every": every})
        app = create_app(resolved, gate_policy(policy_file, shadow_file), config=config)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        # Listening before the address is printed: a client that reads the line and
        # connects at once waits in the backlog until uvicorn accepts, never refused.
        sock.listen(2048)
    except OSError as exc:
        raise CliError(f"cannot listen on {listen}: {exc.strerror}") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    click.echo(f"agent-gate serve: http://{shown}:{bound}/inbox (API /api, schema "
               "/openapi.json); Ctrl-C stops", err=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])

