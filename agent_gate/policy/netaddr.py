"""Parsing hosts, IP addresses, URLs and e-mail addresses the way an attacker can't bend.

SSRF filters are usually beaten by a disagreement between the filter's parser and
the client or resolver that finally connects (OWASP SSRF cheat sheet; CVE-2021-
29662, CVE-2021-33318: octal and hex IPv4 forms classified as public). So this
module is deliberately stricter than any client it guards:

* IPv4 literals are read with ``inet_aton`` / WHATWG rules: one to four parts,
  each decimal, octal (leading ``0``) or hex (``0x``), the last part filling the
  remaining bytes. ``2130706433``, ``0x7f.1`` and ``017700000001`` are all
  127.0.0.1. A host whose last label looks numeric but does not parse as such an
  address (``1.2.3.4.5``, ``08.0.0.1``) is *ambiguous* and raises, because
  different resolvers disagree on it.
* IPv6 literals also count as the IPv4 address they carry (IPv4-mapped
  ``::ffff:a.b.c.d``, IPv4-translated ``::ffff:0:a.b.c.d``, IPv4-compatible
  ``::a.b.c.d``, NAT64 with the well-known prefix ``64:ff9b::/96`` and the
  local-use prefix ``64:ff9b:1::/48``, 6to4 ``2002::/16``, the client of a
  Teredo ``2001::/32`` address), since a dual-stack socket, a translator or a
  relay connects there. Inside ``64:ff9b:1::/48`` the operator may use any RFC
  6052 prefix length (/48, /56, /64, /96); an address two of them read as
  different IPv4 addresses is ambiguous and raises.
* URLs are split with ``urllib.parse`` only after rejecting what parsers disagree
  on: userinfo (``@`` in the authority), backslashes, whitespace and control
  characters, percent-escapes and non-ASCII in the host.
* Host names and e-mail domains must be ASCII LDH labels (IDNs in their
  ``xn--`` form); comparisons are exact or ``*.`` suffix on a label boundary,
  never substring tests.

Every refusal is a ``AddressError`` whose message names what was wrong, never the
offending value.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final
from urllib.parse import SplitResult, urlsplit

from agent_gate.errors import AddressError

__all__ = [
    "NAMED_NETWORKS",
    "AddressError",
    "IPAddress",
    "IPNetwork",
    "ParsedUrl",
    "domain_matches",
    "email_domain",
    "equivalent_addresses",
    "ip_matches",
    "normalize_host",
    "parse_ip",
    "parse_url",
    "validate_domain_pattern",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_CHARS: Final = 8192
MAX_EMAIL_CHARS: Final = 320
MAX_HOST_CHARS: Final = 253
_MAX_IPV4_PART_CHARS: Final = 40

DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}

_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_RE: Final = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_NUMERIC_LABEL_RE: Final = re.compile(r"(?:0[xX][0-9a-fA-F]*|[0-9]+)")
_SCHEME_RE: Final = re.compile(r"[a-z][a-z0-9+.-]*")

NAMED_NETWORKS: Final = frozenset(
    {"loopback", "private", "link_local", "multicast", "reserved", "unspecified", "non_global"}
)
"""Names usable in ``ip_in`` next to CIDRs; each tests the ``ipaddress`` property of
the same name (``non_global`` is ``not is_global``, the broad SSRF guard)."""

_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix
_NAT64_LOCAL: Final = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215 local use
_IPV4_TRANSLATED: Final = ipaddress.IPv6Network("::ffff:0:0:0/96")  # RFC 2765 SIIT
_IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")

# RFC 6052 section 2.2: where the IPv4 bytes sit for each prefix length (bits 64-71,
# byte 8, are the always-zero "u" octet) and where the must-be-zero suffix starts.
_RFC6052_LAYOUT: Final = {
    48: ((6, 7, 9, 10), 11),
    56: ((7, 9, 10, 11), 12),
    64: ((9, 10, 11, 12), 13),
    96: ((12, 13, 14, 15), 16),
}




def _parse_ipv4_part(part: str) -> int:
    if not part:
        raise AddressError("empty part in a numeric host")
    if len(part) > _MAX_IPV4_PART_CHARS:
        raise AddressError("numeric host part too long")
    if part[:2] in ("0x", "0X"):
        digits = part[2:]
        if digits and not re.fullmatch(r"[0-9a-fA-F]+", digits):
            raise AddressError("invalid hex part in a numeric host")
        return int(digits, 16) if digits else 0
    if len(part) > 1 and part[0] == "0":
        if not re.fullmatch(r"[0-7]+", part):
            raise AddressError("invalid octal part in a numeric host")
        return int(part, 8)
    if not part.isascii() or not part.isdigit():
        raise AddressError("invalid part in a numeric host")
    return int(part, 10)


def _parse_ipv4_like(host: str) -> ipaddress.IPv4Address:
    parts = host.split(".")
    if len(parts) > 4:
        raise AddressError("numeric host with more than four parts")
    values = [_parse_ipv4_part(p) for p in parts]
    *head, last = values
    if any(v > 255 for v in head):
        raise AddressError("numeric host part out of range")
    if last >= 256 ** (5 - len(values)):
        raise AddressError("numeric host part out of range")
    number = last
    for index, value in enumerate(head):
        number += value << (8 * (3 - index))
    return ipaddress.IPv4Address(number)


def parse_ip(host: str) -> IPAddress | None:
    """The address ``host`` names if it is an IP literal in any form, else ``None``.

    ``None`` means "a name, resolved by DNS"; ambiguous numeric forms raise
    ``AddressError`` instead of being waved through as names.
    """
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            raise AddressError("bracketed host is not an IPv6 address")
    if ":" in host:
        literal = host.split("%", 1)[0]  # a zone id does not change the address
        try:
            address = ipaddress.IPv6Address(literal)
        except ValueError:
            raise AddressError("invalid IPv6 address") from None
        equivalent_addresses(address)  # refuses an ambiguous embedding here, not later
        return address
    candidate = host[:-1] if host.endswith(".") else host
    last = candidate.rsplit(".", 1)[-1]
    if not _NUMERIC_LABEL_RE.fullmatch(last):
        return None
    return _parse_ipv4_like(candidate)


def _local_nat64(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    """The IPv4 address a ``64:ff9b:1::/48`` address carries, whatever the prefix length.

    Every layout whose ``u`` octet and suffix are zero is a possible reading; they
    must all agree, or a translator set up with another length than the policy
    guessed would connect somewhere else.
    """
    packed = address.packed
    if packed[8] != 0:
        raise AddressError("NAT64 address with a non-zero 'u' octet (RFC 6052)")
    readings = {
        ipaddress.IPv4Address(bytes(packed[i] for i in where))
        for where, suffix in _RFC6052_LAYOUT.values()
        if not any(packed[suffix:])
    }
    if len(readings) != 1:
        raise AddressError("ambiguous NAT64 address (prefix lengths disagree on its IPv4 part)")
    return readings.pop()


def equivalent_addresses(address: IPAddress) -> tuple[IPAddress, ...]:
    """``address`` plus every IPv4 address it is a wrapper for.

    Raises ``AddressError`` for a local-use NAT64 address that does not carry
    exactly one IPv4 address.
    """
    found: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            found.append(address.ipv4_mapped)
        if (
            address in _NAT64
            or address in _IPV4_TRANSLATED
            or (address in _IPV4_COMPATIBLE and int(address) > 1)
        ):
            found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address in _NAT64_LOCAL:
            found.append(_local_nat64(address))
        if address.sixtofour is not None:
            found.append(address.sixtofour)
        if address.teredo is not None:
            found.append(address.teredo[1])  # the client's public address: the destination
    return tuple(found)


def _in_named(address: IPAddress, name: str) -> bool:
    if name == "non_global":
        return not address.is_global
    return bool(getattr(address, f"is_{name}"))


def ip_matches(address: IPAddress, networks: tuple[IPNetwork, ...], names: frozenset[str]) -> bool:
    """Whether ``address`` or an IPv4 address it wraps is in a network or a named set."""
    for candidate in equivalent_addresses(address):
        for network in networks:
            if candidate.version == network.version and candidate in network:
                return True
        if any(_in_named(candidate, name) for name in names):
            return True
    return False


def _check_ascii_host_chars(host: str) -> None:
    if not host.isascii():
        raise AddressError("non-ASCII host (use the xn-- form)")
    if "%" in host:
        raise AddressError("percent-escape in host")


def normalize_host(host: str) -> tuple[str, IPAddress | None]:
    """Lower-cased host without one trailing dot, and its address if it is a literal.

    Raises for anything that is neither a valid LDH name nor an IP literal.
    """
    if not host:
        raise AddressError("empty host")
    _check_ascii_host_chars(host)
    lowered = host.lower()
    address = parse_ip(lowered)
    if address is not None:
        return str(address), address
    name = lowered[:-1] if lowered.endswith(".") else lowered
    if len(name) > MAX_HOST_CHARS or not _HOST_RE.fullmatch(name):
        raise AddressError("host is not a valid name")
    return name, None


def validate_domain_pattern(pattern: str) -> str:
    """Check a policy's ``example.com`` / ``*.example.com`` pattern; returns it lower-cased.

    Raises ``ValueError`` (pydantic turns it into a located load error).
    """
    lowered = pattern.lower()
    base = lowered[2:] if lowered.startswith("*.") else lowered
    if not base or len(base) > MAX_HOST_CHARS or not _HOST_RE.fullmatch(base):
        raise ValueError("must be a host name like 'example.com' or '*.example.com'")
    if _NUMERIC_LABEL_RE.fullmatch(base.rsplit(".", 1)[-1]):
        raise ValueError("looks like an IP address; use ip_in for addresses")
    return lowered


def domain_matches(name: str, patterns: tuple[str, ...]) -> str | None:
    """The pattern ``name`` matches (exact, or ``*.`` suffix on a label boundary), or None.

    ``*.example.com`` matches ``a.example.com`` and ``a.b.example.com`` but neither
    ``example.com`` itself nor ``badexample.com``; list both forms to allow both.
    """
    for pattern in patterns:
        if pattern.startswith("*."):
            suffix = pattern[1:]  # ".example.com"
            if name.endswith(suffix) and len(name) > len(suffix):
                return pattern
        elif name == pattern:
            return pattern
    return None


@dataclass(frozen=True, slots=True)
class ParsedUrl:
    """The parts of a URL a policy can reason about."""

    scheme: str
    host: str
    address: IPAddress | None
    port: int | None

    @property
    def effective_port(self) -> int | None:
        return self.port if self.port is not None else DEFAULT_PORTS.get(self.scheme)


def _split(value: str) -> SplitResult:
    try:
        return urlsplit(value)
    except ValueError:
        raise AddressError("URL cannot be parsed") from None


_PARSED_KEPT: Final = 4096
"""How many texts ``parse_url`` and ``email_domain`` keep their answer for. A
decision reads one URL in several rules (scheme, host, address), and a backtest
judges the same texts again over many past calls: each is parsed once. Both are
pure functions of the text whose answers are immutable; a refusal is not kept."""


@lru_cache(maxsize=_PARSED_KEPT)
def parse_url(value: str) -> ParsedUrl:
    """Split an absolute URL after refusing every form parsers are known to disagree on."""
    if len(value) > MAX_URL_CHARS:
        raise AddressError(f"URL longer than {MAX_URL_CHARS} characters")
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in value):
        raise AddressError("whitespace or control character in URL")
    if "\\" in value:
        raise AddressError("backslash in URL")
    parts = _split(value)
    scheme = parts.scheme.lower()
    if not scheme or not _SCHEME_RE.fullmatch(scheme):
        raise AddressError("URL has no scheme")
    if not value[len(parts.scheme) + 1 :].startswith("//"):
        raise AddressError("URL has no authority (scheme:// missing)")
    netloc = parts.netloc
    if "@" in netloc:
        raise AddressError("userinfo ('@') in URL authority")
    if not netloc.isascii():
        raise AddressError("non-ASCII URL authority (use the xn-- form)")
    raw_host = parts.hostname
    if not raw_host:
        raise AddressError("URL has no host")
    if netloc.startswith("["):
        # urlsplit drops the brackets; keep IPv6 recognisable for parse_ip.
        raw_host = f"[{raw_host}]"
    host, address = normalize_host(raw_host)
    try:
        port = parts.port
    except ValueError:
        raise AddressError("invalid port in URL") from None
    if port == 0:
        raise AddressError("port 0 in URL")
    return ParsedUrl(scheme=scheme, host=host, address=address, port=port)


@lru_cache(maxsize=_PARSED_KEPT)
def email_domain(value: str) -> str:
    """The normalized domain of an address with exactly one ``@``.

    Display names, comments, quoted local parts with ``@``, domain literals and
    whitespace are refused rather than guessed at: a deny rule on a domain must
    not be dodged by ``a@b.com@evil.com`` or ``"x" <a@evil.com>``.
    """
    if len(value) > MAX_EMAIL_CHARS:
        raise AddressError(f"e-mail address longer than {MAX_EMAIL_CHARS} characters")
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in value):
        raise AddressError("whitespace or control character in e-mail address")
    count = value.count("@")
    if count != 1:
        raise AddressError("e-mail address must contain exactly one '@'")
    local, domain = value.split("@")
    if not local:
        raise AddressError("e-mail address has an empty local part")
    if any(ch in local for ch in '<>()[],;:"\\'):
        raise AddressError("e-mail local part has a display-name or quoting character")
    _check_ascii_host_chars(domain)
    name, address = normalize_host(domain)
    if address is not None:
        raise AddressError("e-mail domain is an IP address")
    return name
