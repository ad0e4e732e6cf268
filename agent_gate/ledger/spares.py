"""Connections an engine keeps checked out between transactions, ready for the next.

Checking a connection out of the pool, wrapping it in a ``Connection``, setting its
options and checking it back in costs about 60 us of CPU per transaction, three
times some transactions themselves, and a gate call runs two or three of them. So
SQLite's are reused (a local file has no server that could drop an idle session),
and so are PostgreSQL's for pipelined writes, each checked before use as the pool's
checkout would (``dialect._kept_write``). ``dialect`` decides when; this module
holds them.
"""

from __future__ import annotations

import os

from sqlalchemy import Connection, Engine

__all__ = ["SPARE_MAX", "Spares", "release_idle", "spares_of"]

SPARE_MAX = 4
"""Connections an engine keeps checked out between transactions, per kind."""


class Spares:
    """An engine's idle ``Connection`` objects, by kind (write, read).

    A transaction pops an idle one, or opens one, and puts it back after (at most
    ``SPARE_MAX`` of each kind). They belong to the pool they came from and the
    process that opened them: after ``engine.dispose()`` (a new pool) or in a forked
    child they are not used again (``spares_of``).
    """

    __slots__ = ("pid", "pool", "read", "write")

    def __init__(self, engine: Engine) -> None:
        self.pool = engine.pool
        self.pid = os.getpid()
        self.write: list[Connection] = []
        self.read: list[Connection] = []

    def close(self) -> None:
        while self.write or self.read:
            (self.write or self.read).pop().close()


# Kept on the engine itself, not in a weak mapping keyed by it: the connections
# refer to their engine, so such a mapping would keep every engine alive; as an
# attribute, an engine nobody closed is collected with its idle connections.
_SPARES_ATTR = "_agent_gate_idle_connections"


def release_idle(engine: Engine) -> None:
    """Close the connections ``engine`` keeps between transactions (before dispose)."""
    spares: Spares | None = engine.__dict__.pop(_SPARES_ATTR, None)
    if spares is not None and spares.pid == os.getpid():
        spares.close()


def spares_of(engine: Engine) -> Spares:
    """``engine``'s idle connections, a new set when its pool or the process changed."""
    spares: Spares | None = engine.__dict__.get(_SPARES_ATTR)
    if spares is None or spares.pool is not engine.pool or spares.pid != os.getpid():
        if spares is not None and spares.pid == os.getpid():
            spares.close()  # the engine was disposed: these belong to the old pool
        spares = Spares(engine)
        engine.__dict__[_SPARES_ATTR] = spares
    return spares
