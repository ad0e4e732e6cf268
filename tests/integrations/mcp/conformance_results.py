"""The MCP conformance suite's results, read and compared: no processes here.

The suite (``conformance server --output-dir DIR``) writes, per scenario it ran,
``DIR/server-<scenario>-<ISO timestamp>/checks.json``: a JSON list of checks, each
with an ``id`` and a ``status`` (SUCCESS, FAILURE, WARNING, SKIPPED, INFO) and, when
it did not succeed, an ``errorMessage`` (``src/runner/server.ts`` and ``src/types.ts``
at the pinned tag). That file is the suite's own record, so it is read rather than the
coloured text the suite prints. The suite calls a scenario passed when none of its
checks is a FAILURE; it creates the directory before the scenario runs and writes the
file after, so a directory without the file is a scenario that never finished.

Through the proxy a scenario is compared with the same scenario run directly against
the same server: it is worse when one of its checks ends worse (a FAILURE or a
WARNING where the direct run had a SUCCESS, a check the direct run had that never
came). That is stricter than the suite's pass/fail and it is what "equals the direct
run" means. The expected-failures file lists the scenarios that are worse today,
with why; a worse scenario not in it fails the test, and so does a line whose
scenario is no longer worse, so the file only ever shrinks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")
_RANK = {"SUCCESS": 0, "WARNING": 1, "FAILURE": 2}
"""How bad a check's status is; INFO and SKIPPED say nothing about conformance."""
_EXPECTED = re.compile(
    r"^(?P<scenario>[a-z0-9][a-z0-9-]*)(?:\s+\[(?P<transport>[a-z]+)\])?\s*:\s*(?P<reason>.*)$"
)


class Transport(Enum):
    """How the proxy reaches the reference server (clients reach the proxy over
    Streamable HTTP either way: the suite speaks nothing else)."""

    HTTP = "http"
    """``agent-gate mcp proxy --upstream-url``: the server over Streamable HTTP."""
    STDIO = "stdio"
    """``agent-gate mcp proxy -- COMMAND``: the server as the proxy's stdio child."""


@dataclass(frozen=True)
class Check:
    """One check of a scenario, as the suite recorded it."""

    id: str
    status: str
    error: str = ""


@dataclass(frozen=True)
class Scenario:
    """One scenario's run: its checks, or none and a note when it never finished."""

    name: str
    checks: tuple[Check, ...]
    unfinished: str = ""

    @property
    def passed(self) -> bool:
        """The suite's own verdict."""
        return not self.unfinished and all(c.status != "FAILURE" for c in self.checks)

    def worst(self) -> dict[str, Check]:
        """Per check id, its worst SUCCESS / WARNING / FAILURE (an id may repeat)."""
        worst: dict[str, Check] = {}
        for check in self.checks:
            if check.status in _RANK and (
                check.id not in worst or _RANK[check.status] > _RANK[worst[check.id].status]
            ):
                worst[check.id] = check
        return worst


class ResultsError(AssertionError):
    """The suite's output or the expected-failures file cannot be read as documented;
    says which file (and line) and what was wrong with it."""


def read_results(out: Path, scenarios: Iterable[str]) -> dict[str, Scenario]:
    """Every scenario of ``scenarios`` as the run that wrote ``out`` left it; a scenario
    without a result directory or without ``checks.json`` in it is unfinished."""
    dirs: dict[str, Path] = {}
    for path in sorted(out.iterdir()) if out.is_dir() else []:
        match = _RESULT_DIR.match(path.name)
        if match is None:
            raise ResultsError(f"{path}: not a result directory the suite writes")
        if match["scenario"] in dirs:
            raise ResultsError(f"{path}: a second result for scenario {match['scenario']!r}")
        dirs[match["scenario"]] = path
    results: dict[str, Scenario] = {}
    for name in scenarios:
        path = dirs.pop(name, None)
        if path is None:
            results[name] = Scenario(name, (), unfinished="the suite left no result for it")
        elif not (path / "checks.json").is_file():
            results[name] = Scenario(name, (), unfinished="it never finished (no checks.json)")
        else:
            results[name] = Scenario(name, _checks(path / "checks.json"))
    if dirs:
        raise ResultsError(f"{out}: results for scenarios the suite does not list: {sorted(dirs)}")
    return results


def _checks(path: Path) -> tuple[Check, ...]:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: not the suite's JSON ({exc})") from None
    if not isinstance(data, list):
        raise ResultsError(f"{path}: a JSON list of checks expected, got {type(data).__name__}")
    checks = []
    for index, item in enumerate(data):
        if not (isinstance(item, dict) and isinstance(item.get("id"), str)
                and isinstance(item.get("status"), str)):
            raise ResultsError(f"{path}: check {index} has no string id and status")
        checks.append(Check(item["id"], item["status"], str(item.get("errorMessage") or "")))
    return tuple(checks)


def worse(direct: Scenario, proxied: Scenario) -> list[str]:
    """Why ``proxied`` is worse than ``direct`` (one sentence per check); empty when it
    is not."""
    if proxied.unfinished:
        return [f"through the proxy {proxied.unfinished}"]
    before, after = direct.worst(), proxied.worst()
    reasons = []
    for check_id in sorted(before.keys() | after.keys()):
        was, now = before.get(check_id), after.get(check_id)
        if now is None:
            assert was is not None  # the id came from one of the two
            reasons.append(f"{check_id}: {was.status} directly, never reached through the "
                           "proxy")
        elif _RANK[now.status] > (_RANK[was.status] if was else 0):
            said = f": {now.error}" if now.error else ""
            reasons.append(f"{check_id}: {was.status if was else 'absent'} directly, "
                           f"{now.status} through the proxy{said}")
    return reasons


@dataclass(frozen=True)
class Expected:
    """One line of the expected-failures file."""

    scenario: str
    transport: Transport | None
    """None: on every transport."""
    reason: str
    line: int


def read_expected(path: Path, scenarios: Iterable[str]) -> list[Expected]:
    """The lines of the expected-failures file (format in its header), each checked:
    a known scenario, a known transport, a reason, no scenario listed twice for one
    transport."""
    known = set(scenarios)
    entries: list[Expected] = []
    for number, raw in enumerate(path.read_text("utf-8").splitlines(), start=1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path.name} line {number}"
        match = _EXPECTED.match(text)
        if match is None:
            raise ResultsError(f"{where}: not 'SCENARIO: REASON' or 'SCENARIO [TRANSPORT]: "
                               "REASON'")
        if match["scenario"] not in known:
            raise ResultsError(f"{where}: {match['scenario']!r} is not a scenario of the suite")
        try:
            transport = Transport(match["transport"]) if match["transport"] else None
        except ValueError:
            names = ", ".join(t.value for t in Transport)
            raise ResultsError(f"{where}: transport {match['transport']!r} is not one of "
                               f"{names}") from None
        if not match["reason"].strip():
            raise ResultsError(f"{where}: says no reason; every line says what the proxy "
                               "does not forward")
        entry = Expected(match["scenario"], transport, match["reason"].strip(), number)
        for other in entries:
            if other.scenario == entry.scenario and (
                other.transport is None or transport is None or other.transport == transport
            ):
                raise ResultsError(f"{where}: {entry.scenario} is listed already (line "
                                   f"{other.line}) for the same transport")
        entries.append(entry)
    return entries


@dataclass(frozen=True)
class Verdict:
    """One transport's comparison against the direct run."""

    transport: Transport
    passed: int
    """Scenarios the suite calls passed through the proxy."""
    equal: int
    """Scenarios no worse through the proxy than directly."""
    total: int
    unexpected: dict[str, list[str]]
    """Worse through the proxy and not listed: each with why."""
    stale: list[Expected]
    """Listed, yet no longer worse: the line must go."""

    def summary(self) -> str:
        return (f"through the proxy ({self.transport.value} upstream): {self.passed}/{self.total}"
                f" pass, {self.equal}/{self.total} as they do directly; "
                f"{self.total - self.equal - len(self.unexpected)} expected failures, "
                f"{len(self.unexpected)} unexpected, {len(self.stale)} stale")

    def problems(self) -> str:
        """Everything the test fails for, one paragraph per scenario; empty when none."""
        parts = [f"{name} is worse through the proxy ({self.transport.value} upstream) and "
                 f"not in the expected failures:\n  " + "\n  ".join(why)
                 for name, why in sorted(self.unexpected.items())]
        parts += [f"expected-failures line {e.line}: {e.scenario} now passes through the "
                  f"proxy ({self.transport.value} upstream) as it does directly: delete the "
                  "line" for e in self.stale]
        return "\n".join(parts)


def judge(
    transport: Transport, direct: Mapping[str, Scenario], proxied: Mapping[str, Scenario],
    expected: Iterable[Expected],
) -> Verdict:
    """Compare one transport's run with the direct one, under the expected failures."""
    listed = {e.scenario: e for e in expected if e.transport in (None, transport)}
    unexpected: dict[str, list[str]] = {}
    stale: list[Expected] = []
    equal = 0
    for name, result in proxied.items():
        why = worse(direct[name], result)
        if not why:
            equal += 1
            if name in listed:
                stale.append(listed[name])
        elif name not in listed:
            unexpected[name] = why
    return Verdict(transport, sum(r.passed for r in proxied.values()), equal, len(proxied),
                   unexpected, sorted(stale, key=lambda e: e.line))
