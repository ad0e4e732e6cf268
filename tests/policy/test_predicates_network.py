"""URL, host/IP-in-CIDR and e-mail domain operators, against known bypass tricks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent_gate.policy import PolicyDecision, Truth, Verdict

Allows = Callable[..., bool]
Denies = Callable[..., PolicyDecision]

API_ONLY = {"arg": "url", "url": {"schemes": ["https"], "hosts": ["api.example.com"]}}
WILDCARD = {"arg": "url", "url": {"hosts": ["*.example.com"]}}


class TestUrlHost:
    @pytest.mark.parametrize(
        "url",
        [
            "https://api.example.com/v1?q=1",
            "https://API.Example.COM/",  # hosts are case-insensitive
            "https://api.example.com./",  # one trailing dot is the same DNS name
            "https://api.example.com:443/",
        ],
    )
    def test_listed_host(self, allows: Allows, url: str) -> None:
        assert allows(API_ONLY, {"url": url})

    @pytest.mark.parametrize(
        "url",
        [
            "https://evil.com?x=api.example.com",  # host appears only in the query
            "https://evil.com/api.example.com",  # ... in the path
            "https://evil.com#@api.example.com",  # ... in the fragment
            "https://api.example.com.evil.com/",  # listed name as a prefix
            "https://evilapi.example.com/",
            "https://api.example.com@evil.com/",  # userinfo: actually goes to evil.com
            "https://api.example.com:443@evil.com/",
            "https://evil.com\\@api.example.com/",  # backslash: parsers disagree
            "https://evil.com%2F@api.example.com/",
            "http://api.example.com/",  # wrong scheme
            "javascript://api.example.com/%0aalert(1)",
            "https:api.example.com/x",  # no authority
            "//api.example.com/x",  # no scheme
            "https://api.example.com /",  # whitespace
            "https://\u0430pi.example.com/",  # Cyrillic 'a'
            "https://api%2eexample.com/",  # percent-escaped host
            "",
        ],
    )
    def test_tricks_do_not_pass(self, allows: Allows, url: str) -> None:
        assert not allows(API_ONLY, {"url": url})

    def test_userinfo_and_backslash_are_errors_so_deny_rules_fire(self, denies: Denies) -> None:
        deny_evil = {"arg": "url", "url": {"hosts": ["evil.com"]}}
        for url in ("https://api.example.com@evil.com/", "https://evil.com\\@api.example.com/"):
            decision = denies(deny_evil, {"url": url})
            assert decision.effect is Verdict.DENY
            assert decision.rules[0].truth is Truth.ERROR
        assert denies(deny_evil, {"url": "https://good.org/"}).effect is Verdict.ALLOW

    @pytest.mark.parametrize(
        ("url", "ok"),
        [
            ("https://a.example.com/", True),
            ("https://a.b.example.com/", True),
            ("https://example.com/", False),  # *. needs at least one more label
            ("https://badexample.com/", False),  # suffix only on a label boundary
            ("https://example.com.evil.com/", False),
            ("https://a.example.com.evil.com/", False),
        ],
    )
    def test_wildcard_suffix_on_label_boundary(self, allows: Allows, url: str, ok: bool) -> None:
        assert allows(WILDCARD, {"url": url}) is ok

    def test_ports_use_the_scheme_default(self, allows: Allows) -> None:
        cond = {"arg": "url", "url": {"ports": [443]}}
        assert allows(cond, {"url": "https://x.org/"})
        assert not allows(cond, {"url": "https://x.org:8443/"})
        assert not allows(cond, {"url": "http://x.org/"})
        assert not allows(cond, {"url": "https://x.org:99999/"})  # invalid port: error
        assert not allows(cond, {"url": "gopher://x.org/"})  # no default port: error

    def test_hosts_never_match_ip_literals(self, allows: Allows) -> None:
        assert not allows(WILDCARD, {"url": "https://93.184.216.34/"})
        assert allows({"arg": "url", "url": {"ip_literal": False}}, {"url": "https://x.org/"})
        assert not allows(
            {"arg": "url", "url": {"ip_literal": False}}, {"url": "http://2130706433/"}
        )


LOOPBACK_FORMS = [
    "127.0.0.1",
    "127.1",  # short form
    "2130706433",  # one decimal integer
    "0x7f000001",  # one hex integer
    "0x7f.1",  # hex + short form
    "0x7F.0.0.1",
    "017700000001",  # one octal integer
    "0177.0.0.01",  # octal parts
    "127.0.0.1.",  # trailing dot
    "::1",
    "[::1]",
    "0:0:0:0:0:0:0:1",
    "::ffff:127.0.0.1",  # IPv4-mapped IPv6
    "::ffff:7f00:1",  # the same, written in hex
    "[::ffff:127.0.0.1]",
    "64:ff9b::7f00:1",  # NAT64 well-known prefix
    "::127.0.0.1",  # deprecated IPv4-compatible form
]


class TestIpIn:
    @pytest.mark.parametrize("host", LOOPBACK_FORMS)
    def test_every_loopback_spelling_is_denied(self, denies: Denies, host: str) -> None:
        cond = {"arg": "host", "ip_in": ["127.0.0.0/8", "::1/128"]}
        decision = denies(cond, {"host": host})
        assert decision.effect is Verdict.DENY, decision.reasons
        assert decision.rules[0].truth is Truth.TRUE
        named = denies({"arg": "host", "ip_in": ["loopback"]}, {"host": host})
        assert named.effect is Verdict.DENY

    def test_octal_parts_are_octal(self, denies: Denies) -> None:
        # CVE-2021-29662 style: 012.0.0.1 is 10.0.0.1, a private address.
        cond = {"arg": "host", "ip_in": ["10.0.0.0/8"]}
        assert denies(cond, {"host": "012.0.0.1"}).effect is Verdict.DENY
        assert denies(cond, {"host": "12.0.0.1"}).effect is Verdict.ALLOW

    @pytest.mark.parametrize(
        "host",
        [
            "1.2.3.4.5",
            "08.0.0.1",
            "0x7g.1",
            "256.0.0.1",
            "1.2.3.256",
            "4294967296",
            "1.2.65536",
            "[127.0.0.1]",
            "::gg",
            "1..2.3",
        ],
    )
    def test_ambiguous_numeric_forms_are_errors(self, denies: Denies, host: str) -> None:
        decision = denies({"arg": "host", "ip_in": ["10.0.0.0/8"]}, {"host": host})
        assert decision.effect is Verdict.DENY
        assert decision.rules[0].truth is Truth.ERROR

    def test_public_addresses_and_names(self, allows: Allows, denies: Denies) -> None:
        private = {"arg": "host", "ip_in": ["non_global"]}
        assert denies(private, {"host": "8.8.8.8"}).effect is Verdict.ALLOW
        assert denies(private, {"host": "2606:4700:4700::1111"}).effect is Verdict.ALLOW
        # A name is not an address: ip_in is false, not an error (names need DNS-time checks).
        assert denies(private, {"host": "example.com"}).rules[0].truth is Truth.FALSE
        for host in (
            "10.1.2.3",
            "192.168.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "fd12::1",
            "fe80::1",
            "::ffff:10.0.0.1",
            "100.64.0.1",
        ):
            assert denies(private, {"host": host}).effect is Verdict.DENY, host
        assert allows({"arg": "ip", "ip_in": ["203.0.113.0/24"]}, {"ip": "203.0.113.9"})
        assert not allows({"arg": "ip", "ip_in": ["203.0.113.0/24"]}, {"ip": "203.0.114.9"})

    def test_ipv6_cidr(self, allows: Allows) -> None:
        cond = {"arg": "ip", "ip_in": ["2001:db8::/32"]}
        assert allows(cond, {"ip": "2001:db8:1::5"})
        assert allows(cond, {"ip": "2001:DB8::1"})
        assert not allows(cond, {"ip": "2001:db9::1"})

    @pytest.mark.parametrize(
        "url",
        [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::1]:8080/",
            "http://169.254.169.254/latest/meta-data/",
            "http://0251.0376.0251.0376/",  # 169.254.169.254 in octal
        ],
    )
    def test_url_ip_in_sees_through_encodings(self, denies: Denies, url: str) -> None:
        cond = {"arg": "url", "url": {"ip_in": ["non_global"]}}
        assert denies(cond, {"url": url}).effect is Verdict.DENY


OUR_DOMAINS = ["example.com", "*.example.com"]


class TestEmailDomain:
    @pytest.mark.parametrize(
        "address",
        ["ana@example.com", "ana@EXAMPLE.com", "ana@mail.example.com", "a.b+c@example.com"],
    )
    def test_listed(self, allows: Allows, address: str) -> None:
        assert allows({"arg": "to", "email_domain": OUR_DOMAINS}, {"to": address})

    @pytest.mark.parametrize(
        "address",
        [
            "a@b.com@evil.com",
            "ana@example.com@evil.com",
            "ana@evil.com",
            "ana@badexample.com",
            "ana@example.com.evil.com",
            "Ana <ana@example.com>",
            '"ana@example.com"@evil.com',
            "ana@example.com\r\nBcc: x@evil.com",
            "ana@[127.0.0.1]",
            "@example.com",
            "ana",
            "ana@",
        ],
    )
    def test_not_listed_or_malformed(self, allows: Allows, address: str) -> None:
        assert not allows({"arg": "to", "email_domain": OUR_DOMAINS}, {"to": address})

    def test_multiple_at_is_an_error_so_deny_rules_fire(self, denies: Denies) -> None:
        decision = denies({"arg": "to", "email_domain": ["evil.com"]}, {"to": "a@b.com@evil.com"})
        assert decision.effect is Verdict.DENY
        assert decision.rules[0].truth is Truth.ERROR
        assert "exactly one '@'" in decision.reasons[0]


def test_a_url_or_address_text_is_parsed_once_and_a_refusal_every_time() -> None:
    """``parse_url``/``email_domain`` keep their answer per text (a decision reads one
    URL in several rules; a backtest the same texts over many calls); what they
    refuse is refused again, never remembered as an answer."""
    from agent_gate.errors import AddressError
    from agent_gate.policy.netaddr import email_domain, parse_url

    first = parse_url("https://Docs.Example.com:8443/a")
    assert parse_url("https://Docs.Example.com:8443/a") is first
    assert (first.host, first.port) == ("docs.example.com", 8443)
    assert email_domain("ana@Example.COM") == "example.com"
    for _ in range(2):
        with pytest.raises(AddressError, match="userinfo"):
            parse_url("https://a@evil.example/")
        with pytest.raises(AddressError, match="exactly one"):
            email_domain("a@b.com@evil.com")
