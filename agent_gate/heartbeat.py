"""Keeping the leases of the calls a gate is running now: one thread for all of them.

A call in ``executing`` carries a lease that its worker must renew while the tool
runs (``agent_gate.ledger.states``, rule 3); a lease that runs out makes the call
*in doubt* for everyone else. The gate used to start a renewal thread per call and
join it when the tool returned; that start-and-join cost about 300 us of CPU per
call, more than all of the call's ledger statements. One long-lived thread per
gate renews every lease that is due, and holding or releasing a lease is a dict
update under a lock.

What a renewal promises: each held lease is renewed every ``interval`` seconds
(a third of the lease), the first time at most 1.5 intervals after it is held,
until it is released or a renewal reports the lease lost; a renewal that raises
(a busy or unreachable database) is retried at the next beat. A renewal may still
be in flight when its lease is released: that is harmless, because a renewal is a
compare-and-set on the claimed state, version and owner and matches nothing once
the outcome is committed.

The thread exits after ``idle`` seconds with nothing to renew and is started again
by the next ``hold``; in a forked child the parent's thread and leases are gone,
so the first ``hold`` there starts afresh.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LeaseKeeper"]

C = TypeVar("C")


class LeaseKeeper(Generic[C]):
    """Renews every held lease on one daemon thread."""

    def __init__(
        self,
        renew: Callable[[C], bool],
        interval: float,
        *,
        idle: float = 30.0,
        name: str = "agent-gate-lease",
    ) -> None:
        self._renew = renew
        self.interval = interval
        self._idle = idle
        self._name = name
        self._cond = threading.Condition()
        self._held: dict[int, tuple[C, float]] = {}
        """token -> (what to renew, when it is next due, monotonic seconds)"""
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def hold(self, claim: C) -> Callable[[], None]:
        """Start renewing ``claim``'s lease; returns the function that stops it."""
        token = next(self._tokens)
        with self._cond:
            if self._pid != os.getpid():  # a forked child: the parent's thread is gone
                self._pid, self._held, self._thread = os.getpid(), {}, None
            self._held[token] = (claim, time.monotonic() + self.interval)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            # No notify: waking the thread on every call costs a thread switch per
            # call. The thread sleeps until its earliest due lease, never later than
            # this one's (all are due one interval after they are held), or, idle,
            # at most half an interval: so a new lease is first renewed at most 1.5
            # intervals (half a lease) after it is held.

        def release() -> None:
            with self._cond:
                self._held.pop(token, None)

        return release

    @property
    def held(self) -> int:
        """How many leases are being renewed now."""
        with self._cond:
            return len(self._held)

    def _due(self) -> list[tuple[int, C]] | None:
        """Wait until some lease is due and take those; None when idle long enough."""
        with self._cond:
            idle_since: float | None = None
            while True:
                now = time.monotonic()
                if not self._held:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= self._idle:
                        self._thread = None
                        return None
                    self._cond.wait(min(self.interval / 2, self._idle - (now - idle_since)))
                    continue
                idle_since = None
                first = min(due for _, due in self._held.values())
                if first <= now:
                    due = [(t, c) for t, (c, at) in self._held.items() if at <= now]
                    for token, claim in due:
                        self._held[token] = (claim, now + self.interval)
                    return due
                self._cond.wait(first - now)

    def _run(self) -> None:
        while (due := self._due()) is not None:
            for token, claim in due:
                with self._cond:
                    if token not in self._held:
                        continue  # released meanwhile
                try:
                    alive = self._renew(claim)
                except Exception:  # busy or unreachable database: again next beat
                    continue
                if not alive:  # judged lost meanwhile; its outcome will settle late
                    with self._cond:
                        self._held.pop(token, None)
