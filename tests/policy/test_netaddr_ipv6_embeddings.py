"""IPv6 addresses that carry an IPv4 address are judged as that IPv4 address too.

A translator or relay connects to the embedded address, so a deny on loopback or
private ranges must see ``http://[64:ff9b:1::7f00:1]/`` as 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent_gate.policy import PolicyDecision, Truth, Verdict

Allows = Callable[..., bool]
Denies = Callable[..., PolicyDecision]

LOOPBACK_CARRIERS = [
    "64:ff9b:1::7f00:1",  # RFC 8215 local-use NAT64, /96 layout
    "64:ff9b:1:0:0:0:7f00:1",
    "64:ff9b:1:abcd::127.0.0.1",  # another /96 inside the local-use /48
    "::ffff:0:7f00:1",  # RFC 2765 IPv4-translated
    "::ffff:0:127.0.0.1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1 (obfuscated)
    "::ffff:127.0.0.1",  # IPv4-mapped (already unwrapped before)
    "64:ff9b::7f00:1",  # RFC 6052 well-known prefix (already unwrapped before)
    "2002:7f00:1::",  # 6to4 (already unwrapped before)
]


@pytest.mark.parametrize("address", LOOPBACK_CARRIERS)
def test_url_ip_rules_see_the_embedded_loopback(denies: Denies, address: str) -> None:
    for ranges in (["loopback"], ["127.0.0.0/8"]):
        decision = denies({"arg": "url", "url": {"ip_in": ranges}}, {"url": f"http://[{address}]/"})
        assert decision.effect is Verdict.DENY, (address, ranges)
        assert decision.rules[0].truth is Truth.TRUE


@pytest.mark.parametrize("address", LOOPBACK_CARRIERS)
def test_ip_in_sees_the_embedded_loopback(denies: Denies, address: str) -> None:
    decision = denies({"arg": "host", "ip_in": ["loopback"]}, {"host": address})
    assert decision.effect is Verdict.DENY, address


@pytest.mark.parametrize(
    ("address", "ranges"),
    [
        ("64:ff9b:1::a9fe:a9fe", ["169.254.169.254/32"]),  # cloud metadata via NAT64
        ("64:ff9b:1:ffff::10.1.2.3", ["private"]),
        ("::ffff:0:192.168.0.1", ["private"]),
    ],
)
def test_metadata_and_private_through_a_translator(
    denies: Denies, address: str, ranges: list[str]
) -> None:
    decision = denies({"arg": "url", "url": {"ip_in": ranges}}, {"url": f"https://[{address}]/x"})
    assert decision.effect is Verdict.DENY


def test_a_public_address_behind_a_translator_stays_public(denies: Denies) -> None:
    cond = {"arg": "url", "url": {"ip_in": ["loopback", "private", "link_local"]}}
    for address in ("64:ff9b:1::808:808", "::ffff:0:8.8.8.8", "64:ff9b::8.8.4.4"):
        assert denies(cond, {"url": f"http://[{address}]/"}).effect is Verdict.ALLOW


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b:1::a00:0",  # /96 reads 10.0.0.0, /64 reads 0.0.0.10
        "64:ff9b:1:7f00:0:100::",  # /48 reads 127.0.0.1, /96 reads 0.0.0.0
        "64:ff9b:1:0:100::1",  # the RFC 6052 'u' octet is not zero
    ],
)
def test_an_ambiguous_local_use_nat64_address_fails_closed(
    allows: Allows, denies: Denies, address: str
) -> None:
    decision = denies({"arg": "url", "url": {"ip_in": ["loopback"]}}, {"url": f"http://[{address}]/"})
    assert decision.effect is Verdict.DENY
    assert decision.rules[0].truth is Truth.ERROR
    assert "NAT64" in decision.reasons[0] and address not in decision.explain()
    assert not allows({"arg": "ip", "ip_in": ["0.0.0.0/0", "::/0"]}, {"ip": address})
