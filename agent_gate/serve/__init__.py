"""``agent-gate serve``: an authenticated JSON API and web inbox over a ledger.

Operators (``agent-gate operator add``) log in with a token and approve, deny or
resolve the calls their rights cover; every action, allowed or refused, lands in the
audit chain under their name. Needs the ``serve`` extra (FastAPI, uvicorn, Jinja2).
"""

from __future__ import annotations

from agent_gate.serve.app import create_app

__all__ = ["create_app"]
