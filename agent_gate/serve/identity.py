"""Operators from an identity provider: a signed assertion from the proxy in front.

Configured by the ``identity:`` section of ``agent-gate serve --config FILE`` (a file,
not flags: the rights it grants are a list that belongs under review, beside the
rest of the server's configuration)::

    identity:
      header: Cf-Access-Jwt-Assertion        # the header the proxy puts the JWT in
      jwks_url: https://team.cloudflareaccess.com/cdn-cgi/access/certs
      issuer: https://team.cloudflareaccess.com
      audience: [4714c1358e65fe4b408ad6d432a5f878f08194bdb4752441fd56faefa9b2b6f2]
      algorithms: [RS256]                    # asymmetric only; never none, never HS*
      name_claim: email                      # the operator's name
      groups_claim: groups                   # optional: a list of group names
      operators:                             # name -> rights
        alice@example.com: {approve: ["*"], resolve: ["*"]}
      groups:                                # group -> rights (added together)
        finance: {approve: [refund, pay_invoice]}
      allow_tokens: true                     # operator tokens still work without the header

The proxies and their headers: Cloudflare Access ``Cf-Access-Jwt-Assertion``, Google
IAP ``x-goog-iap-jwt-assertion`` (ES256), Pomerium ``X-Pomerium-Jwt-Assertion``
(ES256), oauth2-proxy the ID token in ``Authorization: Bearer`` (its
``--pass-authorization-header``) or a header of one's choosing. A ``Bearer`` prefix
is taken off the header's value.

An assertion is accepted when it is a JWT whose header names an allowed algorithm
and a ``kid`` the key set holds (``jwks.JwksCache``), whose signature that key
verifies under that very algorithm (PyJWT binds the key to its algorithm: an RSA key
never verifies an ES256 or HS256 token), and whose ``iss``, ``aud``, ``exp`` (required)
and ``nbf``/``iat`` (when present) hold, with ``leeway`` seconds of clock skew. Its
``name_claim`` is then the operator's name, and their rights are the union of the
``operators`` entry for that name and the ``groups`` entries of each group the
``groups_claim`` lists. No entry matches: 403.

Which wins: when the header is present, the assertion alone decides. A bearer token or
a session cookie sent with it is not looked at, and an assertion that fails is 401
even if a good token came with it (the proxy vouches for this request; something that
fails its check is not to be rescued by another credential). Without the header, the
operator tokens work as before unless ``allow_tokens`` is false. With no ``identity:``
section the header is never read: a client that sends one is only an unauthenticated
client, whatever it claims.

Refusals say nothing of what was sent: not the token, not a claim, not the key id.
The audit trail records why in one word (``expired``, ``signature``, ``audience``...),
and the verified name when the identity was fine but holds no rights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_gate.ledger.views.operators import Operator
from agent_gate.serve.jwks import JwksCache

__all__ = ["ASYMMETRIC", "IdentityConfig", "IdentityGate", "IdentityVerdict", "Rights"]

ASYMMETRIC = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
                        "ES256", "ES384", "ES512", "EdDSA"})
"""The algorithms an assertion may be signed with: public-key ones only (``none`` and
the HMAC family would let anyone holding the published key sign)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")  # as ledger.views.operators
_HEADER = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}")
_MAX_ASSERTION = 16 * 1024
IDENTITY_DIGEST = "identity:"
"""What a session opened from an assertion is bound to, in place of a token's digest:
no token hashes to it, so such a session is worth nothing without the assertion."""


class Rights(BaseModel):
    """Tools whose calls one may approve (or deny) and settle; ``*`` for all."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    approve: tuple[str, ...] = ()
    resolve: tuple[str, ...] = ()


class IdentityConfig(BaseModel):
    """``identity:`` of ``agent-gate serve --config``: whose assertions, mapped how."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    header: str = Field(pattern=_HEADER.pattern)
    jwks_url: str = Field(pattern=r"^https?://")
    issuer: str = Field(min_length=1)
    audience: tuple[str, ...] = Field(min_length=1)
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    name_claim: str = Field(default="email", min_length=1)
    groups_claim: str | None = None
    operators: dict[str, Rights] = {}
    groups: dict[str, Rights] = {}
    allow_tokens: bool = True
    leeway: float = Field(default=30.0, ge=0, le=300)
    jwks_max_age: float = Field(default=300.0, gt=0)
    jwks_refresh_interval: float = Field(default=30.0, ge=0)
    jwks_timeout: float = Field(default=5.0, gt=0, le=60)

    @field_validator("audience", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return (value,) if isinstance(value, str) else value

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [a for a in value if a not in ASYMMETRIC]
        if bad or not value:
            raise ValueError(f"algorithms must be some of {sorted(ASYMMETRIC)} "
                             "(never none or HS*)")
        return value

    @field_validator("operators")
    @classmethod
    def _names(cls, value: dict[str, Rights]) -> dict[str, Rights]:
        for name in value:
            if not _NAME.fullmatch(name):
                raise ValueError(f"operator {name[:40]!r} is not 1-100 letters, digits "
                                 "or ._@-")
        return value


@dataclass(frozen=True, slots=True)
class IdentityVerdict:
    """What an assertion came to: the operator (``status`` 200), or a refusal (401 not
    accepted, 403 accepted but holding no rights) and its one-word reason."""

    status: int
    reason: str
    operator: Operator | None = None
    name: str | None = None
    """The verified name, when there is one (for the audit of a 403)."""


_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "expired"),
    (jwt.ImmatureSignatureError, "not yet valid"),
    (jwt.InvalidAudienceError, "audience"),
    (jwt.InvalidIssuerError, "issuer"),
    (jwt.MissingRequiredClaimError, "missing claim"),
    (jwt.InvalidAlgorithmError, "algorithm"),
    (jwt.InvalidSignatureError, "signature"),
    (jwt.PyJWKError, "key"),
    (jwt.InvalidKeyError, "key"),
)


class IdentityGate:
    """The configured provider: which header to read, and what an assertion grants."""

    def __init__(self, config: IdentityConfig, keys: JwksCache | None = None) -> None:
        self.config = config
        self.header = config.header.lower()
        self.keys = keys or JwksCache(config.jwks_url, max_age=config.jwks_max_age,
                                      refresh_interval=config.jwks_refresh_interval,
                                      timeout=config.jwks_timeout)

    def assertion(self, headers: Mapping[str, str]) -> str | None:
        """The assertion the request carries (a ``Bearer`` prefix taken off), or None
        when the header is absent. With ``Authorization`` as the header, an operator
        token (never a dotted JWT) is left to the token path."""
        value = headers.get(self.header)
        if value is None:
            return None
        scheme, _, rest = value.strip().partition(" ")
        if scheme.lower() == "bearer":
            value = rest.strip()
        if self.header == "authorization" and value.count(".") != 2:
            return None
        return value

    def check(self, assertion: str) -> IdentityVerdict:
        """Verify ``assertion`` and map it to an operator (see the module's text)."""
        claims, why = self._claims(assertion)
        if claims is None:
            return IdentityVerdict(401, why)
        name = claims.get(self.config.name_claim)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            return IdentityVerdict(403, "no operator name")
        rights = self._rights(name, claims)
        if not rights:
            return IdentityVerdict(403, "no rights", name=name)
        approve = _union(r.approve for r in rights)
        resolve = _union(r.resolve for r in rights)
        return IdentityVerdict(200, "ok", Operator(name, approve, resolve, datetime.now(UTC)), name)

    def _claims(self, assertion: str) -> tuple[dict[str, Any] | None, str]:
        if len(assertion) > _MAX_ASSERTION:
            return None, "too long"
        try:
            header = jwt.get_unverified_header(assertion)
        except jwt.PyJWTError:
            return None, "not a JWT"
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in self.config.algorithms:
            return None, "algorithm"
        if not isinstance(kid, str) or not kid:
            return None, "no key id"
        jwk = self.keys.key(kid)
        if jwk is None:
            return None, "unknown key"
        if jwk.get("alg") not in (None, alg):
            return None, "algorithm"
        try:
            key = jwt.PyJWK(jwk, algorithm=alg)
            claims = jwt.decode(
                assertion, key=key, algorithms=[alg], audience=list(self.config.audience),
                issuer=self.config.issuer, leeway=self.config.leeway,
                options={"require": ["exp", "iss", "aud"]})
        except jwt.PyJWTError as exc:
            return None, next((w for t, w in _REASONS if isinstance(exc, t)), "invalid")
        return (claims, "ok") if isinstance(claims, dict) else (None, "invalid")

    def _rights(self, name: str, claims: dict[str, Any]) -> list[Rights]:
        found = [self.config.operators[name]] if name in self.config.operators else []
        if self.config.groups_claim is not None:
            groups = claims.get(self.config.groups_claim)
            if isinstance(groups, str):
                groups = [groups]
            if isinstance(groups, list):
                found += [self.config.groups[g] for g in dict.fromkeys(groups)
                          if isinstance(g, str) and g in self.config.groups]
        return found


def _union(lists: Any) -> tuple[str, ...]:
    tools = tuple(dict.fromkeys(t for tools in lists for t in tools))
    return ("*",) if "*" in tools else tools

