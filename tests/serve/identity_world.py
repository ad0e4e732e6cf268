"""An identity provider for the serve tests: keys made in the test, a JWKS on loopback.

``Provider`` holds RSA and EC key pairs generated here, serves the public halves as a
JSON Web Key Set from a real HTTP server on 127.0.0.1 (counting each fetch, and
serving whatever set the test puts there next: a rotation), and signs assertions as
Cloudflare Access, IAP or Pomerium would. ``forge`` builds the tokens an attacker
would, byte by byte, where PyJWT rightly refuses to (``none``, HS256 keyed with the
published public key).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from serve_world import World

from agent_gate.ledger import Ledger
from agent_gate.serve.identity import IdentityConfig, Rights
from agent_gate.serve.webhooks import ServeConfig

ISSUER = "https://team.example.test"
AUDIENCE = "aud-tag-for-agent-gate"
HEADER = "Cf-Access-Jwt-Assertion"


def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def public_jwk(key: Any, kid: str, alg: str | None) -> dict[str, Any]:
    make = RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else ECAlgorithm
    jwk: dict[str, Any] = make.to_jwk(key.public_key(), as_dict=True)
    jwk.update({"kid": kid, "use": "sig"})
    if alg is not None:
        jwk["alg"] = alg
    return jwk


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], claims: dict[str, Any], mac_key: bytes | None = None) -> str:
    """A token built by hand: unsigned (``none``) or HMAC-SHA256 under ``mac_key``."""
    head = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    if mac_key is None:
        return head + "."
    return head + "." + b64(hmac.new(mac_key, head.encode(), hashlib.sha256).digest())


@dataclass
class Provider:
    """The identity provider: its keys, its published set, and who fetched it."""

    url: str = ""
    keys: dict[str, tuple[Any, str]] = field(default_factory=dict)
    published: list[str] = field(default_factory=list)
    fetches: int = 0
    up: bool = True

    def add(self, kid: str, key: Any, alg: str, *, publish: bool = True) -> None:
        self.keys[kid] = (key, alg)
        if publish:
            self.published.append(kid)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [public_jwk(self.keys[k][0], k, self.keys[k][1])
                         for k in self.published]}

    def claims(self, email: str | None = "dana@example.com", **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        out: dict[str, Any] = {"iss": ISSUER, "aud": [AUDIENCE], "iat": now, "nbf": now,
                               "exp": now + 600, "sub": "user-1", "type": "app"}
        if email is not None:
            out["email"] = email
        out.update(changes)
        return {k: v for k, v in out.items() if v is not None}

    def sign(self, claims: dict[str, Any] | None = None, kid: str = "k1",
             **headers: Any) -> str:
        key, alg = self.keys[kid]
        return jwt.encode(claims if claims is not None else self.claims(), key,
                          algorithm=alg, headers={"kid": kid, **headers})

    def public_pem(self, kid: str = "k1") -> bytes:
        pem: bytes = self.keys[kid][0].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        return pem


@contextmanager
def provider() -> Iterator[Provider]:
    """A provider with an RSA key ``k1`` (RS256) and an EC key ``e1`` (ES256), its
    JWKS served on a loopback port until the block ends."""
    state = Provider()
    state.add("k1", rsa_key(), "RS256")
    state.add("e1", ec.generate_private_key(ec.SECP256R1()), "ES256")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.fetches += 1
            if not state.up:
                self.send_response(503)
                self.end_headers()
                return
            body = json.dumps(state.jwks()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/cdn-cgi/access/certs"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


def config(idp: Provider, **changes: Any) -> ServeConfig:
    identity = IdentityConfig(
        header=HEADER, jwks_url=idp.url, issuer=ISSUER, audience=(AUDIENCE,),
        algorithms=("RS256", "ES256"), name_claim="email", groups_claim="groups",
        operators={"dana@example.com": Rights(approve=("send_email",))},
        groups={"finance": Rights(approve=("refund",)), "ops": Rights(resolve=("*",))},
        **{"jwks_refresh_interval": 3600.0, **changes})
    return ServeConfig(checkpoint_every=None, identity=identity)


def decided_by(world: World, task: str, call: str) -> list[str]:
    with Ledger(world.url) as ledger:
        details = ledger.call_details(task, call)
    assert details is not None
    return [a.decided_by for a in details.approvals]
