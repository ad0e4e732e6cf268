"""The conformance comparison's own rules, on result directories shaped as the suite
writes them: what counts as worse through the proxy, how the expected-failures file
is read, and that an unlisted regression and a stale line both fail the verdict.
(test_conformance.py runs the suite itself; this proves its verdict can fail.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conformance_results import (
    Check,
    ResultsError,
    Scenario,
    Transport,
    judge,
    read_expected,
    read_results,
    worse,
)

NAMES = ["ping", "tools-list", "server-sse-polling"]
VENDORED = Path(__file__).resolve().parent / "conformance"
TAG_BLOBS = {  # git rev-parse v0.1.13:PATH in github.com/modelcontextprotocol/conformance
    "everything-server.ts": "374e48c96e7fb2385f2908d796626f0d886badd3",
    "LICENSE": "4a93985763241755401a10678395303de4e720ba",
}
STAMP = "2026-12-06T07-47-42-266Z"


def write_run(out: Path, checks: dict[str, list[dict[str, str]]]) -> Path:
    """A directory as ``conformance server --output-dir out`` leaves it."""
    for scenario, items in checks.items():
        folder = out / f"server-{scenario}-{STAMP}"
        folder.mkdir(parents=True)
        full = [{"name": c["id"], "description": "d", "timestamp": "t", **c} for c in items]
        (folder / "checks.json").write_text(json.dumps(full), "utf-8")
    return out


def ok(check_id: str) -> dict[str, str]:
    return {"id": check_id, "status": "SUCCESS"}


def test_results_are_read_per_scenario_and_a_missing_one_is_unfinished(tmp_path: Path) -> None:
    out = write_run(tmp_path / "run", {
        "ping": [ok("ping")],
        "tools-list": [{"id": "tools-list", "status": "FAILURE",
                        "errorMessage": "MCP error -32601: Method not found"}],
    })
    (out / f"server-server-sse-polling-{STAMP}").mkdir()  # created, never written
    results = read_results(out, NAMES)
    assert results["ping"].passed
    assert not results["tools-list"].passed
    assert results["tools-list"].checks[0].error == "MCP error -32601: Method not found"
    assert not results["server-sse-polling"].passed
    assert "never finished" in results["server-sse-polling"].unfinished
    assert "left no result" in read_results(tmp_path / "nothing", ["ping"])["ping"].unfinished


def test_a_result_the_suite_does_not_list_or_cannot_have_written_is_an_error(
    tmp_path: Path,
) -> None:
    out = write_run(tmp_path / "run", {"ping": [ok("ping")], "other": [ok("x")]})
    with pytest.raises(ResultsError, match="does not list: \\['other'\\]"):
        read_results(out, NAMES)
    bad = tmp_path / "bad" / f"server-ping-{STAMP}"
    bad.mkdir(parents=True)
    (bad / "checks.json").write_text('{"id": "ping"}', "utf-8")
    with pytest.raises(ResultsError, match="a JSON list of checks expected"):
        read_results(bad.parent, NAMES)


def test_worse_is_per_check_and_stricter_than_the_suites_verdict() -> None:
    direct = Scenario("s", (Check("a", "SUCCESS"), Check("b", "SUCCESS"), Check("i", "INFO")))
    assert worse(direct, direct) == []
    failed = Scenario("s", (Check("a", "FAILURE", "Method not found"), Check("b", "SUCCESS")))
    assert worse(direct, failed) == ["a: SUCCESS directly, FAILURE through the proxy: "
                                     "Method not found"]
    # The suite passes this one (no FAILURE), but a check that succeeded never came.
    short = Scenario("s", (Check("a", "SUCCESS"),))
    assert short.passed
    assert worse(direct, short) == ["b: SUCCESS directly, never reached through the proxy"]
    warned = Scenario("s", (*direct.checks, Check("w", "WARNING", "no retry field")))
    assert worse(direct, warned) == ["w: absent directly, WARNING through the proxy: "
                                     "no retry field"]
    # The same warning on both sides is not worse; INFO lines never count.
    assert worse(warned, Scenario("s", warned.checks[:2] + warned.checks[3:])) == []
    assert worse(direct, Scenario("s", (), unfinished="it never finished")) == [
        "through the proxy it never finished"]


def expected_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "expected-failures.txt"
    path.write_text(text, "utf-8")
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("ping", "line 2: not 'SCENARIO: REASON'"),
    ("pong: gone", "line 2: 'pong' is not a scenario of the suite"),
    ("ping [sse]: x", "line 2: transport 'sse' is not one of http, stdio"),
    ("ping:   ", "line 2: says no reason"),
    ("ping: a\nping [stdio]: b", "line 3: ping is listed already \\(line 2\\)"),
    ("ping [http]: a\nping [http]: b", "line 3: ping is listed already"),
])
def test_a_bad_expected_failures_line_is_named_by_its_number(
    tmp_path: Path, text: str, message: str,
) -> None:
    with pytest.raises(ResultsError, match=message):
        read_expected(expected_file(tmp_path, f"# header\n{text}\n"), NAMES)


def test_one_line_per_transport_or_one_for_both(tmp_path: Path) -> None:
    path = expected_file(tmp_path, "\n# c\nping [http]: a\nping [stdio]: b\ntools-list: c\n")
    entries = read_expected(path, NAMES)
    assert [(e.scenario, e.transport, e.reason, e.line) for e in entries] == [
        ("ping", Transport.HTTP, "a", 3), ("ping", Transport.STDIO, "b", 4),
        ("tools-list", None, "c", 5)]


def test_the_verdict_fails_for_an_unlisted_regression_and_for_a_stale_line(
    tmp_path: Path,
) -> None:
    passing = {name: Scenario(name, (Check(name, "SUCCESS"),)) for name in NAMES}
    broken = Scenario("tools-list", (Check("tools-list", "FAILURE", "Method not found"),))
    proxied = {**passing, "tools-list": broken}
    listed = read_expected(expected_file(tmp_path, "tools-list [http]: not forwarded\n"), NAMES)

    fine = judge(Transport.HTTP, passing, proxied, listed)
    assert fine.problems() == ""
    assert (fine.passed, fine.equal, fine.total) == (2, 2, 3)
    assert fine.summary() == ("through the proxy (http upstream): 2/3 pass, 2/3 as they do "
                              "directly; 1 expected failures, 0 unexpected, 0 stale")

    # The line says http only: over stdio the same failure is a regression.
    regressed = judge(Transport.STDIO, passing, proxied, listed)
    assert list(regressed.unexpected) == ["tools-list"]
    assert "tools-list is worse through the proxy (stdio upstream) and not in the expected " \
        "failures:\n  tools-list: SUCCESS directly, FAILURE through the proxy: Method not " \
        "found" in regressed.problems()

    # Fixed: the line is stale and fails the run until deleted.
    stale = judge(Transport.HTTP, passing, passing, listed)
    assert [e.line for e in stale.stale] == [1]
    assert "line 1: tools-list now passes through the proxy (http upstream) as it does " \
        "directly: delete the line" in stale.problems()


@pytest.mark.parametrize("name", sorted(TAG_BLOBS))
def test_the_vendored_files_are_the_tags_byte_for_byte(name: str) -> None:
    """The reference server is the suite's, unmodified: a change to it would measure the
    proxy against a server nobody else tests with (conformance/README.md)."""
    data = (VENDORED / name).read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    assert blob == TAG_BLOBS[name]
