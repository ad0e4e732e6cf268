"""The ``agent-gate serve`` application: the JSON API and the web inbox on one ledger.

``create_app`` builds it (FastAPI: the API's OpenAPI schema comes from its typed
routes, and Starlette underneath serves the inbox's forms); ``agent-gate serve``
runs it with uvicorn. ``/health`` is the one route that needs no token: the schema
(``/openapi.json``) takes one too, and no documentation UI is served (its page would
load a script from a CDN into the inbox's origin). Every response carries the
headers of ``headers``. A request the API cannot take is 422 without quoting what
was sent: a value may be a secret, and NaN or Infinity cannot be written as JSON.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from agent_gate.authorize import PolicyAuthorizer
from agent_gate.errors import AgentGateError, UnknownRouteRole
from agent_gate.evidence.note import read_signer
from agent_gate.ledger.sweeper import DeadlineSweeper
from agent_gate.serve import api, inbox, slack
from agent_gate.serve.api import Op, needs_token, request_operator, unauthorized
from agent_gate.serve.auth import COOKIE, LoginLimiter, Sessions
from agent_gate.serve.bodies import ApiBounds, FormBounds
from agent_gate.serve.checkpointer import Checkpointer
from agent_gate.serve.headers import SecurityHeaders
from agent_gate.serve.identity import IdentityGate
from agent_gate.serve.proxied import NEW_SESSION
from agent_gate.serve.service import InboxService, status_of
from agent_gate.serve.webhooks import Notifier, ServeConfig, check_route_roles
from agent_gate.tools import ToolRegistry

__all__ = ["create_app"]


def create_app(url: str, policy: str | PolicyAuthorizer | None = None, *,
               limiter: LoginLimiter | None = None,
               config: ServeConfig | None = None,
               tools: ToolRegistry | None = None) -> FastAPI:
    """The server for the ledger at ``url`` (answers judged under ``policy``, if given;
    ``config``: where links point, the webhooks to send, how often to take an audit
    checkpoint and to sweep approval deadlines, ``webhooks.ServeConfig``; its defaults
    without one; ``tools``: whose JSON Schemas check an approver's edit, none: edits are
    refused). A route whose ``roles:`` names a role the policy never escalates to
    is refused here (``webhooks.check_route_roles``)."""
    config = config if config is not None else ServeConfig()
    service = InboxService(url, policy, tools)
    rules = service.gate.rules
    try:
        check_route_roles(config, rules.policy if rules is not None else None)
    except UnknownRouteRole:
        service.close()
        raise
    notifier = (Notifier(url, config, rules.policy if rules is not None else None)
                if config.notify or config.mail or config.slack else None)
    every = config.checkpoint_every
    signer = (read_signer(Path(config.checkpoint_signing_key))
              if config.checkpoint_signing_key is not None else None)
    checkpointer = (Checkpointer(url, every, signer=signer,
                                 publish=config.checkpoint_publish)
                    if every is not None else None)
    sweeper = (DeadlineSweeper(url, config.sweep_every)
               if config.sweep_every is not None else None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for worker in (notifier, checkpointer, sweeper):
            if worker is not None:
                worker.start()
        try:
            yield
        finally:
            for worker in (notifier, checkpointer, sweeper):
                if worker is not None:
                    worker.stop()
            service.close()

    app = FastAPI(title="agent-gate", summary="Operators answer the calls that wait for them.",
                  lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None,
                  # No redirect to the path without its trailing slash: it answered before
                  # any token was asked for, to a Location built from the Host header.
                  redirect_slashes=False)

    # Added first, so inside the token's check below: only a known operator's body is
    # read, and none past its bound (``bodies``).
    app.add_middleware(ApiBounds)

    @app.middleware("http")
    async def token_first(request: Request, call_next: Any) -> Response:
        if needs_token(request.url.path):
            op, status = await run_in_threadpool(request_operator, request)
            if op is None:
                refused = unauthorized(status)
                return JSONResponse({"detail": refused.detail}, status_code=status,
                                    headers=refused.headers)
            request.state.operator = op
        response: Response = await call_next(request)
        sid = getattr(request.state, NEW_SESSION, None)
        if sid is not None:  # a session opened from the proxy's assertion (``proxied``)
            response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/",
                                secure=request.url.scheme == "https")
        return response

    app.add_middleware(FormBounds)  # inside SecurityHeaders: its refusals carry them too
    app.add_middleware(SecurityHeaders)
    app.state.service = service
    app.state.checkpointer = checkpointer
    app.state.sweeper = sweeper
    app.state.sessions = Sessions()
    app.state.identity = IdentityGate(config.identity) if config.identity else None
    app.state.slack_routes = list(config.slack)
    app.state.link_secrets = [os.environ[m.link_secret_env].encode() for m in config.mail
                              if os.environ.get(m.link_secret_env)]
    app.state.limiter = limiter or LoginLimiter()

    @app.get("/health", summary="Liveness: no token needed")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        """Nothing (browsers ask for it on every page; a 404 would be noise)."""
        return Response(status_code=204)

    @app.get("/openapi.json", include_in_schema=False)
    def openapi(op: Op) -> JSONResponse:
        """The API's schema, for an operator's token."""
        return JSONResponse(app.openapi())

    @app.exception_handler(AgentGateError)
    def refused(request: Request, exc: AgentGateError) -> JSONResponse:
        return JSONResponse({"detail": str(exc), "error": type(exc).__name__},
                            status_code=status_of(exc))

    @app.exception_handler(RequestValidationError)
    def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))[:300],
             "type": str(e.get("type", ""))} for e in exc.errors()[:20]]}, status_code=422)

    app.include_router(api.router)
    app.include_router(inbox.router)
    app.include_router(slack.router)
    return app
