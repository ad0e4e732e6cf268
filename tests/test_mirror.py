"""The tests of the ledger, gate and policy packages mirror the package (issue 31).

Why: a reader who changes ``agent_gate/ledger/views/inbox.py`` should find its tests
without a search, and a module nobody tests should show up as a line in a list, not
as an absence nobody notices.

The rule, for each package P in ``PACKAGES`` and each folder D under it:

* every file under ``tests/P/D`` is ``conftest.py`` or a test file whose name,
  after ``test_``, is the name of a module of ``agent_gate/P/D`` (a ``.py`` file or
  a subpackage; a leading ``_`` dropped), alone or followed by ``_<aspect>``:
  ``tests/ledger/views/test_inbox_plan.py`` <-> ``agent_gate/ledger/views/inbox.py``.
  The folder must exist in the package too. Helpers and worker scripts live in
  ``tests/support``. The exceptions are ``CROSS_CUTTING``, each with its reason;
* every module of ``agent_gate/P`` (``__init__.py`` aside) has such a test file, or
  an entry in ``DRIVEN_ELSEWHERE`` naming the file that drives it and why it has no
  file of its own. That list is a ratchet, like ``KNOWN_CIRCLES`` in test_layers.py:
  an entry whose module gained a test file, or is gone, fails until it is deleted.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agent_gate"
TESTS = ROOT / "tests"
PACKAGES = ("ledger", "gate", "policy")

CROSS_CUTTING: dict[str, str] = {
    "ledger/test_layers.py": "structure: the ledger's imports point down (reads every module)",
    "ledger/test_seam.py": "structure: no fast-path name outside ledger/backend",
    "gate/test_shape.py": "structure: the per-call walk's dispatch table, function lengths",
    "gate/test_ledger_boundary.py": "structure: the gate reaches the ledger only by its methods",
}
"""Test files (relative to tests/) that check a package as a whole, not one module."""

_PUBLIC = "no logic of its own worth a file: it is driven through the public API there"
DRIVEN_ELSEWHERE: dict[str, tuple[str, str]] = {
    "gate/answered.py": ("ledger/test_answers_quorum.py",
                         "grants and quorums show only in committed rows; test_grants.py too"),
    "gate/desk.py": ("ledger/test_approvals.py", "Gate.approve/deny are its entry points"),
    "gate/facade.py": ("gate/test_driver.py", "Gate's public methods, delegating: " + _PUBLIC),
    "gate/render.py": ("gate/test_next_input.py", "each provider's tool-result form, there"),
    "gate/reveal.py": ("serve/test_reveal.py", "its callers are serve's API and rights"),
    "gate/waiting.py": ("ledger/views/test_notify_waiting.py",
                        "waiting is the notify listener's other half, on both backends"),
    "ledger/backend/core.py": ("ledger/test_backend.py",
                               "the reference storage: every tests/ledger test runs on it"),
    "ledger/backend/dialect.py": ("ledger/test_backend.py", "engines made per database"),
    "ledger/cas.py": ("ledger/test_store.py", "compare-and-set: one winner, losers see the row"),
    "ledger/checkpoints.py": ("ledger/test_chain.py", "checkpoints bind the chains there"),
    "ledger/edits.py": ("gate/test_edit.py", "an edit is stored by Gate.approve(edit=...)"),
    "ledger/flows.py": ("ledger/test_store.py", "the write flows behind Ledger's methods"),
    "ledger/history.py": ("gate/test_backtest.py", "its one reader is the backtest"),
    "ledger/intake.py": ("ledger/test_store.py",
                         "the insert of a new call; backend/test_fast_folded_intake.py too"),
    "ledger/mcp_events.py": ("integrations/test_mcp_red_team_sessions.py",
                             "the MCP proxy's session store, driven by its sessions"),
    "ledger/reasons.py": ("ledger/test_states_tables.py", "an enum of codes, no logic"),
    "ledger/settled.py": ("ledger/test_audit_many_writers.py",
                          "the bound, under writers racing on PostgreSQL"),
    "ledger/sql.py": ("ledger/test_approvals_expiry_clock.py",
                      "the database clock and locks, only visible through a database"),
    "ledger/subtrees.py": ("evidence/test_archive_subtrees.py",
                           "what an archive batch keeps, tampered with beside the archive"),
    "ledger/sweep.py": ("ledger/test_deadlines.py", "one sweeper pass, raced there"),
    "ledger/sweeper.py": ("ledger/test_deadlines.py", "DeadlineSweeper's thread, there"),
    "ledger/txn.py": ("ledger/test_seam.py", "the seam every ledger test runs through"),
    "ledger/views/details.py": ("cli/test_commands.py", "`call show` prints it"),
    "ledger/views/operators.py": ("serve/test_api.py", "operators' tokens and rights in serve"),
    "ledger/views/outbox.py": ("serve/test_webhooks.py", "the webhooks' outbox"),
    "ledger/views/pages.py": ("cli/test_operating.py", "keyset pages of tasks and audit"),
    "policy/approval.py": ("ledger/test_answers_quorum.py",
                           "the approval block's load errors and meaning, with the ledger"),
    "policy/casefile.py": ("policy/test_casecheck.py", "read by `policy test` there"),
    "policy/cedarload.py": ("policy/test_cedar.py", "Cedar sets loaded from policy files"),
    "policy/approval_model.py": ("ledger/test_answers_quorum.py",
                                 "the approval block's models: refused at load, used there"),
    "policy/condition_model.py": ("policy/test_loader.py",
                                  "the condition models, below model.py: load errors there"),
    "policy/conditions.py": ("policy/test_predicates.py", "each/some, subjects, Kleene logic"),
    "policy/context.py": ("policy/test_celexpr.py", "what a condition looks at, shared with CEL"),
    "policy/edits.py": ("gate/test_edit.py", "the editable block, applied by Gate.approve"),
    "policy/mcp_rules.py": ("integrations/test_mcp_parts.py", "the MCP proxy's section"),
    "policy/model.py": ("policy/test_loader.py", "the file format's models: load errors there"),
    "policy/regex.py": ("policy/test_predicates.py", "`matches`: fullmatch, refused patterns"),
    "policy/scalars.py": ("policy/test_evaluator_scoped_limits.py",
                          "strict scalars: durations there, ids and text in test_loader.py"),
    "policy/values.py": ("policy/test_evaluator.py", "value types crossing to callers"),
    "policy/yamlsource.py": ("policy/test_loader.py", "line numbers, duplicate keys, aliases"),
}
"""Module (relative to agent_gate/) -> (the test file that drives it, why none of its own)."""


def _modules(folder: Path) -> set[str]:
    """The names a test file in the mirrored folder may be named after."""
    names = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    names |= {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return names


def _subject(test_file: Path, modules: set[str]) -> str | None:
    """The module a test file is named after (the longest that fits), or None."""
    stem = test_file.stem.removeprefix("test_")
    fits = [m for m in modules
            if stem == m.lstrip("_") or stem.startswith(m.lstrip("_") + "_")]
    return max(fits, key=len, default=None)


def _test_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (TESTS / pkg).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def misplaced() -> list[str]:
    """Files under the mirrored test folders that break the naming rule."""
    out: list[str] = []
    for path in _test_files():
        rel = path.relative_to(TESTS).as_posix()
        if path.name == "conftest.py" or rel in CROSS_CUTTING:
            continue
        source = PACKAGE / path.parent.relative_to(TESTS)
        if not (source / "__init__.py").is_file():
            out.append(f"{rel}: no package agent_gate/{source.relative_to(PACKAGE).as_posix()}")
        elif not path.name.startswith("test_") or path.suffix != ".py":
            out.append(f"{rel}: not a test file (helpers belong in tests/support)")
        elif _subject(path, _modules(source)) is None:
            out.append(f"{rel}: named after no module of agent_gate/"
                       f"{source.relative_to(PACKAGE).as_posix()}")
    return out


def modules_with_tests() -> set[str]:
    """Modules (relative to agent_gate/) with a test file named after them."""
    out: set[str] = set()
    for path in _test_files():
        source = PACKAGE / path.parent.relative_to(TESTS)
        if path.name.startswith("test_") and (source / "__init__.py").is_file():
            subject = _subject(path, _modules(source))
            if subject is not None and (source / f"{subject}.py").is_file():
                out.add((source / f"{subject}.py").relative_to(PACKAGE).as_posix())
    return out


def all_modules() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for pkg in PACKAGES
            for p in (PACKAGE / pkg).rglob("*.py") if p.name != "__init__.py"}


def test_every_test_file_is_named_after_a_module_at_the_mirrored_path() -> None:
    assert misplaced() == []


def test_cross_cutting_files_exist() -> None:
    assert [f for f in CROSS_CUTTING if not (TESTS / f).is_file()] == []


def test_every_module_has_a_test_file_or_says_which_file_drives_it() -> None:
    untested = all_modules() - modules_with_tests() - set(DRIVEN_ELSEWHERE)
    assert sorted(untested) == [], "add tests/<package>/test_<module>.py"


def test_the_driven_elsewhere_list_only_shrinks() -> None:
    modules, tested = all_modules(), modules_with_tests()
    stale = sorted(m for m in DRIVEN_ELSEWHERE if m not in modules or m in tested)
    assert stale == [], "delete these entries: the module has a test file now, or is gone"
    missing = sorted(f for f, _ in DRIVEN_ELSEWHERE.values() if not (TESTS / f).is_file())
    assert missing == [], "the driving test file named is gone"


def test_the_rule_reads_names_as_documented() -> None:
    """The matching itself, on names that look alike (so the check cannot pass by
    accepting everything)."""
    modules = {"sweep", "sweeper", "fast", "sqlite_fast", "_libpq", "backend"}
    subject = lambda name: _subject(Path(name), modules)  # noqa: E731
    assert subject("test_sweeper.py") == "sweeper"
    assert subject("test_sweep_race.py") == "sweep"
    assert subject("test_sqlite_fast_fold.py") == "sqlite_fast"
    assert subject("test_libpq.py") == "_libpq"
    assert subject("test_backend.py") == "backend"
    assert subject("test_sweeps.py") is None
    assert subject("test_fastest.py") is None
