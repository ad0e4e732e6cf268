"""Which file a SQLite ledger is, and that it stays that file.

A ledger file that went missing is not a new ledger (every call it recorded would
run again), so it is never created by accident (``require_ledger_file``,
``LedgerMissing``); and one deleted or replaced under a running worker is found
before the next transaction writes anything (``OpenedFile``, ``LedgerReplaced``):
the engine remembers the (device, inode) its first connection opened. ``dialect``
makes the engines that use them.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.engine import URL, make_url

from agent_gate.errors import LedgerMissing, LedgerReplaced

__all__ = ["FILE_ATTR", "OpenedFile", "check_file", "require_ledger_file", "sqlite_file"]


def sqlite_file(url: str | URL) -> Path | None:
    """The file a SQLite ledger URL names; None for PostgreSQL, in-memory SQLite and
    SQLite URI filenames (``file:...?uri=true``, whose file SQLite resolves)."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ""
    if database in ("", ":memory:") or parsed.query.get("uri") or "mode=memory" in str(parsed):
        return None
    return Path(database)


def require_ledger_file(url: str | URL, *, create: bool) -> None:
    """Refuse a SQLite ledger URL whose file is missing (or empty), unless ``create``.

    The one place that decides, for ``Ledger``/``Gate`` and the CLI's commands. An
    empty file counts as missing: SQLite would turn it into a fresh, empty ledger.
    """
    path = sqlite_file(url)
    if path is None or create:
        return
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        size = None
    if size:
        return
    what = "no ledger" if size is None else "an empty file, not a ledger,"
    raise LedgerMissing(
        f"{what} at {path}: a ledger that went missing is not a new one (every call it "
        "recorded would run again). Point --db / $AGENT_GATE_DB / the URL at the existing "
        "ledger, or, to start a new one, pass create=True (Gate or Ledger) or run "
        "`agent-gate db upgrade --db URL`"
    )


class OpenedFile:
    """The SQLite file an engine's first connection opened, by (device, inode)."""

    __slots__ = ("ident", "path")

    def __init__(self) -> None:
        self.path: str | None = None
        self.ident: tuple[int, int] | None = None

    def changed(self) -> str | None:
        """What happened to the file since it was opened; None when it is still there."""
        path = self.path
        if path is None:
            return None
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return "was deleted"
        except OSError as error:
            return f"cannot be looked at ({type(error).__name__})"
        if (info.st_dev, info.st_ino) != self.ident:
            return "was replaced by another file"
        return None

    def check(self) -> None:
        """Raise ``LedgerReplaced`` unless the path still holds the file first opened."""
        what = self.changed()
        if what is not None:
            dev, ino = self.ident or (0, 0)
            raise LedgerReplaced(
                f"the ledger file {self.path} {what} while this process had it open "
                f"(device {dev}, inode {ino}); nothing more is written. Stop this worker, "
                "put the ledger file back at that path (or restore it from a backup) and "
                "start again; a new empty ledger there would run every call again"
            )

    def connected(self, path: str) -> None:
        """A connection opened ``path``: remember it (the first), or check it is the same."""
        if not path:
            return  # a temporary database: nothing on disk to lose
        info = os.stat(path)
        ident = (info.st_dev, info.st_ino)
        if self.ident is None:
            self.path, self.ident = path, ident
        elif (path, ident) != (self.path, self.ident):
            self.check()
            raise LedgerReplaced(f"a new connection opened {path}, not the ledger file "
                                 f"{self.path} this process opened first")


FILE_ATTR = "_agent_gate_file"
"""Where a SQLite ledger engine keeps its ``OpenedFile``."""


def check_file(engine: Engine) -> None:
    """``LedgerReplaced`` unless ``engine``'s SQLite file is still the one it opened."""
    opened_file: OpenedFile | None = engine.__dict__.get(FILE_ATTR)
    if opened_file is not None:
        opened_file.check()
