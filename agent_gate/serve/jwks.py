"""The identity provider's signing keys (a JWKS URL), cached and refreshed within bounds.

An identity assertion names the key it was signed with (``kid``); its public half is
published as a JSON Web Key Set at a URL the operator configures (Cloudflare Access:
``https://TEAM.cloudflareaccess.com/cdn-cgi/access/certs``, Google IAP:
``https://www.gstatic.com/iap/verify/public_key-jwk``, Pomerium:
``/.well-known/pomerium/jwks.json``). The set is fetched once and kept for
``max_age`` seconds; a ``kid`` it does not hold (the provider rotated its keys)
fetches it again, but never more often than once per ``refresh_interval`` seconds,
failed fetches included: a stream of assertions with made-up key ids costs the
provider at most one request per interval, and the server no more waiting than that.
A key id is only ever looked up here: a URL inside an assertion (``jku``, ``x5u``) is
never fetched.

The set itself is bounded (``max_bytes``, ``max_keys``, no redirects) and only public
signing keys are kept: a symmetric (``oct``) key or one marked for encryption is
dropped, so no shared secret can ever verify an assertion. Parsing a key is PyJWT's
(``PyJWK``); nothing of JOSE is written by hand.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["JwksCache"]

_PUBLIC_KTY = frozenset({"RSA", "EC", "OKP"})


@dataclass
class JwksCache:
    """The key set at ``url``: ``key(kid)`` is the JWK that key id names, or None."""

    url: str
    max_age: float = 300.0
    refresh_interval: float = 30.0
    timeout: float = 5.0
    max_bytes: int = 256 * 1024
    max_keys: int = 64
    clock: Callable[[], float] = time.monotonic
    _keys: dict[str, dict[str, Any]] | None = None
    _fetched: float = 0.0
    _attempted: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    fetches: int = 0
    """How many times the set was asked for (successful or not): what the bound holds."""

    def key(self, kid: str) -> dict[str, Any] | None:
        """The public JWK of ``kid``: from the cache while it is fresh, else fetched
        (at most once per ``refresh_interval``, however many ask)."""
        with self._lock:
            now = self.clock()
            stale = self._keys is None or now - self._fetched >= self.max_age
            if stale and self._may_fetch(now):
                self._refresh(now)
            found = (self._keys or {}).get(kid)
            if found is None and self._may_fetch(now):
                self._refresh(now)
                found = (self._keys or {}).get(kid)
            return found

    def _may_fetch(self, now: float) -> bool:
        return self._attempted is None or now - self._attempted >= self.refresh_interval

    def _refresh(self, now: float) -> None:
        """Fetch the set; on any failure keep what was cached (a provider's outage
        does not log every operator out before the keys' ``max_age`` would)."""
        self._attempted = now
        self.fetches += 1
        try:
            keys = self._fetch()
        except (httpx.HTTPError, ValueError):
            return
        self._keys, self._fetched = keys, now

    def _fetch(self) -> dict[str, dict[str, Any]]:
        with httpx.Client(timeout=self.timeout, follow_redirects=False) as http, \
                http.stream("GET", self.url, headers={"Accept": "application/json"}) as got:
            if got.status_code != 200:
                raise ValueError(f"JWKS answered {got.status_code}")
            body = b""
            for chunk in got.iter_bytes():
                body += chunk
                if len(body) > self.max_bytes:
                    raise ValueError("JWKS too large")
        doc = json.loads(body)
        listed = doc.get("keys") if isinstance(doc, dict) else None
        if not isinstance(listed, list):
            raise ValueError("not a JWK Set")
        keys: dict[str, dict[str, Any]] = {}
        for jwk in listed[: self.max_keys]:
            if (isinstance(jwk, dict) and isinstance(jwk.get("kid"), str)
                    and jwk.get("kty") in _PUBLIC_KTY and jwk.get("use", "sig") == "sig"
                    and "d" not in jwk):
                keys.setdefault(jwk["kid"], jwk)
        return keys
