"""Who holds an ``executing`` call, and whether they are still alive.

A lease is an owner id plus an expiry. Expiry alone works across machines but is
slow to notice a crash; on the same machine we can also ask the kernel, which lets
``recover`` turn a SIGKILLed worker's call into ``in_doubt`` at once instead of
waiting out the lease. The owner id carries the process start time so that a
recycled pid is never mistaken for the dead owner still running.

"The same machine" means: the same running kernel *and* the same pid namespace.
The host part of an owner id is the host name plus a token of the kernel's boot id
and the pid namespace, so two containers that happen to share a host name (or a
worker before and after a reboot) never judge each other's pids; they fall back
to the lease expiry, as workers on different hosts do.

Expiries are written and compared in SQL with the database's clock
(``sql.db_now_ms``), so the authoritative "has this lease run out" is the same
for every worker. ``now_ms`` (this machine's clock) is only used for a first look
before that guarded update: a worker whose clock is ahead can at worst try a
takeover the database then refuses; one whose clock is behind waits a little longer.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Liveness", "Owner", "liveness", "now_ms", "this_owner"]


def now_ms() -> int:
    """Wall-clock milliseconds; leases are compared across processes, so not monotonic."""
    return time.time_ns() // 1_000_000


def _stat_field(pid: int, index: int) -> str:
    """Field ``index`` of ``/proc/<pid>/stat`` counted after the command name (0 is
    the state), '' where unknown: the one reader of that file for both questions."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return ""
    # Field 2 (comm) may contain spaces and parentheses; fields resume after the last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[index] if len(fields) > index else ""


def _process_start(pid: int) -> str:
    """The kernel's start time of ``pid`` (clock ticks since boot), '' where unknown."""
    return _stat_field(pid, 19)


def _process_state(pid: int) -> str:
    """``pid``'s state letter (``Z`` for a zombie), '' where unknown."""
    return _stat_field(pid, 0)


class Liveness(StrEnum):
    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"
    """Another machine: only the lease expiry can tell."""


@dataclass(frozen=True, slots=True)
class Owner:
    """``host:pid:start:nonce``, parsed."""

    host: str
    pid: int
    start: str
    nonce: str

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.start}:{self.nonce}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        parts = text.rsplit(":", 3)
        if len(parts) != 4 or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2], parts[3])

    def liveness(self) -> Liveness:
        if self.host != _HOST:
            return Liveness.UNKNOWN
        if self.pid == os.getpid():
            return Liveness.ALIVE if self.nonce == _current().nonce else Liveness.DEAD
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return Liveness.DEAD
        except PermissionError:
            pass  # exists, belongs to someone else
        if _process_state(self.pid) == "Z":
            return Liveness.DEAD  # killed, waiting to be reaped: runs no more code
        start = _process_start(self.pid)
        if self.start and start and start != self.start:
            return Liveness.DEAD  # the pid was recycled by a new process
        return Liveness.ALIVE


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _machine() -> str:
    """``hostname~token``: the token names this boot of this kernel and this pid
    namespace, the scope within which a pid means one process."""
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = ""
    boot = _read("/proc/sys/kernel/random/boot_id")
    name = socket.gethostname()[:100].replace(":", "_")
    if not boot and not pidns:
        return name  # no /proc: only the host name to go by
    token = hashlib.sha256(f"{boot}/{pidns}".encode()).hexdigest()[:10]
    return f"{name}~{token}"


_HOST = _machine()
_owner: Owner | None = None


def _current() -> Owner:
    global _owner
    if _owner is None or _owner.pid != os.getpid():
        pid = os.getpid()
        _owner = Owner(_HOST, pid, _process_start(pid), uuid.uuid4().hex[:12])
    return _owner


_owner_text: tuple[Owner, str] | None = None


def this_owner() -> str:
    """This process's owner id (a forked child gets its own)."""
    global _owner_text
    owner = _current()
    known = _owner_text
    if known is None or known[0] is not owner:
        # Asked several times per gate call: formatted once per owner.
        known = _owner_text = (owner, str(owner))
    return known[1]


def liveness(owner: str | None) -> Liveness:
    if owner is None:
        return Liveness.DEAD
    parsed = Owner.parse(owner)
    return parsed.liveness() if parsed is not None else Liveness.UNKNOWN
