"""The one value a policy judges for a path argument: its resolved, absolute form.

A path rule and a pattern rule on the same argument must judge the same file,
or ``x.audit.jsonl/.``, ``a//b``, ``./a/../b`` or an in-root symlink pass a
deny written against the real name while the tool, which normalizes as the
kernel or ``pathlib`` does, reaches that very file. So every operator on an
argument the policy treats as a path sees what ``resolve_path`` returns, computed
once per decision.

The walk follows symlinks the way the kernel does (relative targets against
their directory, absolute ones from ``/``, at most ``MAX_SYMLINKS`` of them) and
tolerates components that do not exist yet, which are kept as written, like
``os.path.realpath(strict=False)``. Unlike it, a loop or an unreadable component
is an error rather than a silent guess. Symlinks are followed wherever they
point, inside or outside a root: the value judged is where the path leads at
decision time, and containment is ``path_under``'s question, not this one's.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, Final

from agent_gate.errors import UnjudgeablePath

__all__ = ["MAX_PATH_CHARS", "MAX_SYMLINKS", "UnjudgeablePath", "resolve_path"]

MAX_PATH_CHARS: Final = 4096
MAX_SYMLINKS: Final = 40  # the kernel's own limit (ELOOP)




def _checked(value: Any) -> str:
    if not isinstance(value, str):
        raise UnjudgeablePath("not a string")
    if "\x00" in value or len(value) > MAX_PATH_CHARS:
        raise UnjudgeablePath("NUL byte or over-long path")
    if not value.startswith("/"):
        raise UnjudgeablePath("relative path (the policy cannot know what it is relative to)")
    try:
        os.fsencode(value)
    except UnicodeError:
        raise UnjudgeablePath("not encodable as a file name") from None
    return value


def _lstat_mode(path: str) -> int | None:
    """The file type bits of ``path``, or ``None`` when it does not exist (yet)."""
    try:
        return os.lstat(path).st_mode
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise UnjudgeablePath(
            f"path cannot be resolved ({errno.errorcode.get(exc.errno or 0, 'error')})"
        ) from None


def resolve_path(value: Any) -> str:
    """``value`` with ``.``, ``..``, repeated and trailing slashes and symlinks resolved.

    Raises ``UnjudgeablePath`` for a non-string, a NUL byte, a path over
    ``MAX_PATH_CHARS``, a relative path, a symlink loop or an unreadable component.
    """
    pending = list(reversed(_checked(value).split("/")))
    resolved = "/"
    links = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            # ``resolved`` never contains a symlink, so lexical ``..`` is the kernel's.
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        if len(candidate) > MAX_PATH_CHARS:
            raise UnjudgeablePath("NUL byte or over-long path")
        mode = _lstat_mode(candidate)
        if mode is None or not stat.S_ISLNK(mode):
            resolved = candidate
            continue
        links += 1
        if links > MAX_SYMLINKS:
            raise UnjudgeablePath(f"more than {MAX_SYMLINKS} symbolic links (a loop?)")
        try:
            target = os.readlink(candidate)
        except OSError as exc:
            raise UnjudgeablePath(
                f"path cannot be resolved ({errno.errorcode.get(exc.errno or 0, 'error')})"
            ) from None
        if target.startswith("/"):
            resolved = "/"
        pending.extend(reversed(target.split("/")))
    return resolved
