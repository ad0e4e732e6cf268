"""Operators from an identity provider: ``agent-gate serve`` takes the signed assertion
of the proxy in front of it (here Cloudflare Access's header), verified against the
provider's JWKS served on loopback with keys made in the test, and maps its email and
groups to an operator and rights. Then the attacker's view: every token that must not
let anyone in, the header sent to a server that does not read it, both credentials at
once, and what a refusal says (nothing of what was sent)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import jwt
import pytest
from identity_world import (
    AUDIENCE,
    HEADER,
    ISSUER,
    Provider,
    b64,
    config,
    decided_by,
    forge,
    provider,
    rsa_key,
)
from serve_world import Running, World, serving

from agent_gate.serve import auth
from agent_gate.serve.identity import IdentityConfig
from agent_gate.serve.jwks import JwksCache
from agent_gate.serve.webhooks import ServeConfig


@contextmanager
def idp_server(world: World, **changes: Any) -> Iterator[tuple[Provider, Running]]:
    with provider() as idp, serving(world, config(idp, **changes)) as running:
        yield idp, running


def api(server: Running, path: str, assertion: str | None = None, *,
        token: str | None = None, body: dict[str, Any] | None = None,
        **headers: str) -> httpx.Response:
    sent = dict(headers)
    if assertion is not None:
        sent[HEADER] = assertion
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    if body is not None:
        return httpx.post(server.base + path, json=body, headers=sent)
    return httpx.get(server.base + path, headers=sent)


def refusals(world: World) -> list[tuple[str | None, str]]:
    return [(e.actor, (e.detail or {}).get("reason", "")) for e in world.audit()
            if e.event == "operator_identity"]


def test_the_proxys_assertion_makes_an_operator_with_the_rights_mapped_from_its_claims(
        world: World) -> None:
    assert world.call("t2", "refund-2", "refund", {"order": "o-2", "cents": 200}) \
        == "awaiting_approval"
    with idp_server(world) as (idp, server):
        dana = idp.sign()
        listed = api(server, "/api/approvals", dana)
        path, body = world.answer("t1", "mail-1", reason="read it")
        approved = api(server, path + "/approve", dana, body=body)
        # erin is no named operator: her rights come from her group, signed with EC.
        erin = idp.sign(idp.claims("erin@example.com", groups=["finance", "staff"]),
                        kid="e1")
        refund_path, refund_body = world.answer("t2", "refund-2")
        own = api(server, refund_path + "/approve", erin, body=refund_body)
        fetches = idp.fetches
    assert listed.status_code == 200 and [c["call_id"] for c in listed.json()] == [
        "mail-1", "refund-2"]
    assert approved.status_code == 200, approved.text
    assert decided_by(world, "t1", "mail-1") == ["dana@example.com"]
    assert own.status_code == 200, own.text
    assert decided_by(world, "t2", "refund-2") == ["erin@example.com"]
    assert fetches == 1  # one fetch of the key set served every request


def test_rights_are_the_claims_and_nothing_more(world: World) -> None:
    assert world.call("t2", "refund-2", "refund", {"order": "o-2", "cents": 200}) \
        == "awaiting_approval"
    with idp_server(world) as (idp, server):
        path, body = world.answer("t2", "refund-2")
        dana = api(server, path + "/approve", idp.sign(), body=body)  # send_email only
        erin = idp.sign(idp.claims("erin@example.com", groups=["staff"]))
        nobody = api(server, "/api/approvals", erin)
        no_name = api(server, "/api/approvals", idp.sign(idp.claims(None)))
        bad_name = api(server, "/api/approvals", idp.sign(idp.claims("a b@example.com")))
    assert dana.status_code == 403 and "may not approve 'refund'" in dana.text
    assert (nobody.status_code, no_name.status_code, bad_name.status_code) == (403, 403, 403)
    assert "erin" not in nobody.text and "staff" not in nobody.text
    assert ("identity:erin@example.com", "no rights") in refusals(world)
    assert ("anonymous", "no operator name") in refusals(world)


def test_the_browser_is_signed_in_by_the_assertion_and_its_session_needs_it(
        world: World) -> None:
    with idp_server(world) as (idp, server), httpx.Client(
            base_url=server.base, headers={"Origin": server.base}) as browser:
        dana = {HEADER: idp.sign()}
        page = browser.get("/inbox", headers=dana)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        ref, args_hash = world.shown("t1", "mail-1")
        form = {"csrf": csrf.group(1) if csrf else "", "args_hash": args_hash,
                "expires_in": "24h"}
        # The session cookie without the assertion (the proxy bypassed) is nobody.
        stolen = browser.get("/inbox")
        cookie_only = browser.post(f"/inbox/calls/{ref}/approve", data=form)
        again = browser.get("/inbox", headers=dana)
        csrf = re.search(r'name="csrf" value="([^"]+)"', again.text)
        form["csrf"] = csrf.group(1) if csrf else ""
        answered = browser.post(f"/inbox/calls/{ref}/approve", data=form, headers=dana)
        login = browser.get("/login", headers=dana)
    assert page.status_code == 200 and "dana@example.com" in page.text and csrf
    assert "agent_gate_session" in page.headers.get("set-cookie", "")
    assert "HttpOnly" in page.headers["set-cookie"]
    assert stolen.status_code == 303 and stolen.headers["location"] == "/login"
    assert cookie_only.status_code == 403
    assert answered.status_code == 303, answered.text
    assert decided_by(world, "t1", "mail-1") == ["dana@example.com"]
    assert login.status_code == 303 and login.headers["location"] == "/inbox"
    logins = [e for e in world.audit() if e.event == "operator_login"]
    assert [(e.actor, (e.detail or {}).get("via")) for e in logins] == [
        ("operator:dana@example.com", "identity")] * 2


def _attacks(idp: Provider, attacker_url: str) -> dict[str, tuple[str, str]]:
    """Name -> (token, the reason the audit must give)."""
    idp.add("k2", rsa_key(), "RS256", publish=False)  # never published
    idp.add("mallet", rsa_key(), "RS256", publish=False)
    kid_of_rsa = "k1"  # the header names the published RSA key
    claims = idp.claims()
    tampered = idp.sign().split(".")
    other = idp.sign(idp.claims("alice@example.com")).split(".")
    return {
        "expired": (idp.sign(idp.claims(exp=int(claims["iat"]) - 120)), "expired"),
        "not yet valid": (idp.sign(idp.claims(nbf=int(claims["iat"]) + 600)),
                          "not yet valid"),
        "no expiry": (idp.sign(idp.claims(exp=None)), "missing claim"),
        "wrong audience": (idp.sign(idp.claims(aud="another-app")), "audience"),
        "wrong issuer": (idp.sign(idp.claims(iss="https://evil.example.test")), "issuer"),
        "alg none": (forge({"alg": "none", "kid": kid_of_rsa, "typ": "JWT"}, claims),
                     "algorithm"),
        "HS256 keyed with the public key": (
            forge({"alg": "HS256", "kid": kid_of_rsa, "typ": "JWT"}, claims,
                  mac_key=idp.public_pem()), "algorithm"),
        "ES256 signed, naming the RSA key": (_relabel(idp, claims), "algorithm"),
        "unknown kid": (idp.sign(claims, kid="k2"), "unknown key"),
        "jku to the attacker's set": (
            idp.sign(claims, kid="mallet", jku=attacker_url, x5u=attacker_url),
            "unknown key"),
        "payload swapped": (".".join([tampered[0], other[1], tampered[2]]), "signature"),
        "no kid": (_without_kid(idp, claims), "no key id"),
        "garbage": ("not.a.jwt", "not a JWT"),
    }


def _relabel(idp: Provider, claims: dict[str, Any]) -> str:
    """A token signed with the EC key but naming the RSA key's kid."""
    token: str = idp.sign(claims, kid="e1")
    head, body, sig = token.split(".")
    header = json.loads(base64.urlsafe_b64decode(head + "=="))
    header["kid"] = "k1"
    return ".".join([b64(json.dumps(header).encode()), body, sig])


def _without_kid(idp: Provider, claims: dict[str, Any]) -> str:
    key, _ = idp.keys["k1"]
    return jwt.encode(claims, key, algorithm="RS256")


def test_what_an_attacker_sends_is_refused_401_and_never_echoed(world: World) -> None:
    with provider() as attacker, idp_server(world) as (idp, server):
        attacks = _attacks(idp, attacker.url)
        got = {name: api(server, "/api/approvals", token)
               for name, (token, _) in attacks.items()}
        path, body = world.answer("t1", "mail-1")
        answer = api(server, path + "/approve", attacks["expired"][0], body=body)
        page = httpx.get(server.base + "/inbox", headers={HEADER: attacks["expired"][0]})
        fetches, stolen = idp.fetches, attacker.fetches
    for name, response in got.items():
        assert response.status_code == 401, (name, response.text)
        token = attacks[name][0]
        for part in (token, "dana", "k1", "e1", "mallet", "evil", "another-app"):
            assert part not in response.text, (name, part)
    assert answer.status_code == 401 and decided_by(world, "t1", "mail-1") == []
    assert page.status_code == 401 and "not accepted" in page.text
    assert stolen == 0  # the jku/x5u URL was never fetched
    assert fetches == 1  # unknown kids did not refetch within the refresh interval
    reasons = [r for _, r in refusals(world)]
    for name, (_, why) in attacks.items():
        assert why in reasons, (name, why, reasons)


def test_the_header_means_nothing_to_a_server_without_identity(world: World) -> None:
    with provider() as idp, serving(world, ServeConfig(checkpoint_every=None)) as server:
        forged = {HEADER: idp.sign(), "X-Forwarded-Email": "alice",
                  "X-Auth-Request-Email": "alice", "X-Forwarded-User": "alice",
                  "X-Goog-Authenticated-User-Email": "accounts.google.com:alice"}
        listed = httpx.get(server.base + "/api/approvals", headers=forged)
        page = httpx.get(server.base + "/inbox", headers=forged)
        fetches = idp.fetches
    assert listed.status_code == 401
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert fetches == 0


def test_plain_identity_headers_mean_nothing_either_when_identity_is_on(world: World) -> None:
    with idp_server(world) as (_, server):
        plain = api(server, "/api/approvals", **{"X-Forwarded-Email": "dana@example.com",
                                                 "X-Auth-Request-Email": "dana@example.com"})
        empty = api(server, "/api/approvals", "")
    assert (plain.status_code, empty.status_code) == (401, 401)


def test_with_both_the_assertion_decides(world: World) -> None:
    with idp_server(world) as (idp, server):
        path, body = world.answer("t1", "mail-1")
        carol = world.tokens["carol"]  # a token for refunds, not mail
        erin = idp.sign(idp.claims("erin@example.com", groups=["finance"]))
        # alice's token may approve anything; erin's assertion may not approve mail.
        both = api(server, path + "/approve", erin, token=world.tokens["alice"], body=body)
        bad_assertion = api(server, "/api/approvals", "not.a.jwt", token=world.tokens["alice"])
        token_alone = api(server, "/api/approvals", token=carol)
    assert both.status_code == 403 and "erin@example.com" in both.text  # her own name
    assert bad_assertion.status_code == 401
    assert token_alone.status_code == 200  # no header: tokens still work (allow_tokens)
    assert decided_by(world, "t1", "mail-1") == []


def test_tokens_can_be_turned_off(world: World) -> None:
    with idp_server(world, allow_tokens=False) as (idp, server):
        token = api(server, "/api/approvals", token=world.tokens["alice"])
        login = httpx.post(server.base + "/login", data={"token": world.tokens["alice"]},
                           headers={"Origin": server.base})
        assertion = api(server, "/api/approvals", idp.sign())
    assert token.status_code == 401 and login.status_code == 403
    assert assertion.status_code == 200


def test_a_rotated_key_is_fetched_on_its_first_use(world: World) -> None:
    with idp_server(world, jwks_refresh_interval=0.0) as (idp, server):
        before = api(server, "/api/approvals", idp.sign())
        idp.add("k9", rsa_key(), "RS256")
        idp.published.remove("k1")  # rotated: k1 is gone, k9 signs from now on
        rotated = api(server, "/api/approvals", idp.sign(kid="k9"))
        retired = api(server, "/api/approvals", idp.sign(kid="k1"))
        fetches = idp.fetches
    assert (before.status_code, rotated.status_code, retired.status_code) == (200, 200, 401)
    assert fetches == 3  # the first, k9 unknown, k1 unknown again


def test_an_unreachable_key_set_refuses_rather_than_fails(world: World) -> None:
    with idp_server(world) as (idp, server):
        idp.up = False
        got = api(server, "/api/approvals", idp.sign())
    assert got.status_code == 401


@pytest.mark.parametrize("bad", [["HS256"], ["none"], ["RS256", "HS512"], []])
def test_a_configuration_with_a_symmetric_or_no_algorithm_is_refused(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="never none or HS"):
        IdentityConfig(header=HEADER, jwks_url="https://idp.example/jwks", issuer=ISSUER,
                       audience=AUDIENCE, algorithms=tuple(bad))


def test_the_key_cache_fetches_at_most_once_per_interval_and_expires() -> None:
    """The bound on the provider, by the cache's own clock: a hundred unknown key ids
    within one interval cost one fetch; a rotated key is found once the interval has
    passed; a set older than max_age is fetched again (a retired key stops working)."""
    now = [1000.0]
    with provider() as idp:
        cache = JwksCache(idp.url, max_age=300.0, refresh_interval=30.0,
                          clock=lambda: now[0])
        assert cache.key("k1") is not None and idp.fetches == 1
        assert all(cache.key(f"made-up-{i}") is None for i in range(100))
        assert idp.fetches == 1
        idp.add("k9", rsa_key(), "RS256")
        now[0] += 10
        assert cache.key("k9") is None and idp.fetches == 1  # within the interval
        now[0] += 25
        assert cache.key("k9") is not None and idp.fetches == 2
        idp.published.remove("k1")
        now[0] += 100
        assert cache.key("k1") is not None and idp.fetches == 2  # still fresh, cached
        now[0] += 300
        assert cache.key("k1") is None and idp.fetches == 3  # expired: fetched again
        idp.up = False
        now[0] += 400
        assert cache.key("k9") is not None and idp.fetches == 4  # outage: kept keys


def test_sessions_opened_per_page_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client behind the proxy that keeps no cookie opens a session per page; the
    server keeps at most MAX_SESSIONS, the ended ones dropped first, then the oldest."""
    monkeypatch.setattr(auth, "MAX_SESSIONS", 3)
    now = [0.0]
    sessions = auth.Sessions(clock=lambda: now[0])
    first, _ = sessions.start("dana@example.com", "identity:dana@example.com")
    now[0] = auth.SESSION_SECONDS + 1  # the first has ended
    ids = [sessions.start("dana@example.com", "identity:dana@example.com")[0]
           for _ in range(4)]
    assert sessions.get(first) is None and sessions.get(ids[0]) is None
    assert all(sessions.get(i) is not None for i in ids[1:])
    assert len(sessions._by_id) == 3
