"""Opening a judged path beneath its root, so a symlink swapped in later is refused.

A policy judges a path at decision time; the tool opens it later. Anyone who can
write in the folder can, in between, replace a file or a folder with a symlink to
somewhere the policy would have refused. ``open_beneath`` closes that window: it
opens ``relative_path`` under ``root`` refusing ``..``, absolute paths and *every*
symlink on the way, so what it opens is reached through real folders only, the
way the policy's resolution saw them, or nothing is opened.

Two ways to do it, chosen at run time:

* Linux >= 5.6: one ``openat2`` system call with ``RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``; the kernel checks every
  component atomically. Called through ``ctypes`` (the standard library has no
  binding); a kernel without it (``ENOSYS``) or a seccomp filter refusing it
  (``EPERM``, older container runtimes) falls back cleanly.
* Elsewhere: a walk from the root, one component at a time, with ``dir_fd`` and
  ``O_NOFOLLOW``, every folder opened before the next name is looked up in it.

Errors say which component (its 1-based position) and why, never a name from the
path or anything read from a file: the path came from a model.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import stat
import sys
from typing import IO, Any, Final

from agent_gate.errors import PathEscapes

__all__ = ["PathEscapes", "open_beneath", "open_file_beneath", "relative_beneath"]

StrPath = str | os.PathLike[str]

RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08
_SYS_OPENAT2: Final = 437  # the same number on every Linux architecture except alpha
_AT_FDCWD: Final = -100
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_TMPFILE: Final = getattr(os, "O_TMPFILE", 0)  # includes the O_DIRECTORY bit


def _creates(flags: int) -> bool:
    """Whether ``mode`` means anything to these flags (openat2 refuses it otherwise)."""
    return bool(flags & os.O_CREAT) or (_O_TMPFILE != 0 and flags & _O_TMPFILE == _O_TMPFILE)




class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


_openat2_state: bool | None = None


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _raw_openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """``openat2`` beneath ``dir_fd`` with no symlinks; raises ``OSError`` (no file name)."""
    libc = _libc()
    how = _OpenHow(
        flags | _O_CLOEXEC,
        mode if _creates(flags) else 0,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    )
    fd = libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(dir_fd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(fd)


def _openat2_supported() -> bool:
    """Whether ``openat2`` works here; probed once (the one seam tests replace)."""
    global _openat2_state
    if _openat2_state is None:
        _openat2_state = False
        if sys.platform == "linux" and not platform.machine().startswith("alpha"):
            try:
                os.close(_raw_openat2(_AT_FDCWD, ".", os.O_RDONLY | _O_DIRECTORY, 0))
                _openat2_state = True
            except (OSError, AttributeError):
                pass  # ENOSYS, EPERM from seccomp, no libc: the walk is used instead
    return _openat2_state


def _components(relative_path: StrPath) -> list[str]:
    path = os.fspath(relative_path)
    if not isinstance(path, str):
        raise TypeError("relative_path must be a str or os.PathLike[str]")
    if "\x00" in path:
        raise PathEscapes("contains a NUL byte")
    if path.startswith("/"):
        raise PathEscapes("is absolute; give it relative to the root (see relative_beneath)")
    names = [name for name in path.split("/") if name not in ("", ".")]
    for index, name in enumerate(names, 1):
        if name == "..":
            raise PathEscapes("is '..', which is never followed beneath a root", index)
    return names


def _bare(exc: OSError) -> OSError:
    """The same error (and subclass, e.g. ``FileNotFoundError``) without the file name."""
    return OSError(exc.errno, exc.strerror)


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _walk(root_fd: int, names: list[str], flags: int, mode: int) -> int:
    """Open ``names`` under ``root_fd`` one real folder at a time, never following a link."""
    current = root_fd
    try:
        for index, name in enumerate(names, 1):
            last = index == len(names)
            step = (flags | _O_NOFOLLOW) if last else (os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW)
            try:
                fd = os.open(name, step | _O_CLOEXEC, mode, dir_fd=current)
            except OSError as exc:
                if _is_symlink(name, current):
                    raise PathEscapes("is a symbolic link", index) from None
                raise _bare(exc) from None
            if current != root_fd:
                os.close(current)
            current = fd
        if current == root_fd:  # no components: the root itself
            return os.open(".", flags | _O_CLOEXEC, mode, dir_fd=root_fd)
        if stat.S_ISLNK(os.fstat(current).st_mode):  # O_PATH | O_NOFOLLOW opens a link
            raise PathEscapes("is a symbolic link", len(names))
        opened, current = current, root_fd
        return opened
    finally:
        if current != root_fd:
            os.close(current)


def _name_the_link(root_fd: int, names: list[str]) -> None:
    """After the kernel refused: walk once more, with no side effect, to say which component.

    Raises ``PathEscapes`` naming it; returns if the link is gone by now.
    """
    with contextlib.suppress(OSError):
        os.close(_walk(root_fd, names, getattr(os, "O_PATH", os.O_RDONLY), 0))


def open_beneath(
    root: StrPath, relative_path: StrPath, flags: int = os.O_RDONLY, mode: int = 0o600
) -> int:
    """A file descriptor for ``relative_path`` under ``root``, reached without any symlink.

    ``flags`` and ``mode`` are those of ``os.open`` (``O_CLOEXEC`` is always added).
    ``root`` itself is trusted and may be a symlink. An empty path (or ``.``)
    opens the root. Raises ``PathEscapes`` for ``..``, an absolute path, a NUL
    byte or a symlink anywhere on the way, and ``OSError`` (without the file
    name) for anything else, e.g. ``FileNotFoundError``.
    """
    names = _components(relative_path)
    try:
        root_fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    except OSError as exc:
        raise _bare(exc) from None
    try:
        if _openat2_supported():
            try:
                return _raw_openat2(root_fd, "/".join(names) or ".", flags, mode)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EXDEV):
                    _name_the_link(root_fd, names)
                    raise PathEscapes("passes through a symbolic link") from None
                if exc.errno not in (errno.ENOSYS, errno.EPERM):
                    raise
        return _walk(root_fd, names, flags, mode)
    finally:
        os.close(root_fd)


_MODES: Final = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                 "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                 "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}


def open_file_beneath(
    root: StrPath,
    relative_path: StrPath,
    mode: str = "r",
    *,
    permissions: int = 0o600,
    **kwargs: Any,
) -> IO[Any]:
    """``open_beneath`` as a file object; ``mode`` as for ``open`` (``r w a x``, ``+``, ``b``).

    ``permissions`` applies when the file is created; other keyword arguments
    (``encoding``, ``newline``...) go to ``os.fdopen``.
    """
    kind = mode.replace("b", "").replace("t", "").replace("+", "")
    if len(kind) != 1 or kind not in _MODES:
        raise ValueError("mode must be one of r, w, a, x, with optional '+', 'b' or 't'")
    flags = _MODES[kind]
    if "+" in mode:
        flags = (flags & ~(os.O_WRONLY | os.O_RDONLY)) | os.O_RDWR
    fd = open_beneath(root, relative_path, flags, permissions)
    try:
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def relative_beneath(root: StrPath, path: StrPath) -> str:
    """``path`` relative to ``root``, as written: for a tool that receives absolute paths.

    Only ``""`` and ``.`` components are dropped; ``..`` is refused rather than
    collapsed (collapsing it is right only when nothing before it is a symlink),
    and so is a path not written under ``root``. Pass the result to
    ``open_beneath(root, ...)``.
    """
    root_names = [n for n in os.fspath(root).split("/") if n not in ("", ".")]
    text = os.fspath(path)
    if not text.startswith("/"):
        raise PathEscapes("is not absolute")
    names = [n for n in text.split("/") if n not in ("", ".")]
    for index, name in enumerate(names, 1):
        if name == "..":
            raise PathEscapes("is '..', which is never followed beneath a root", index)
    if names[: len(root_names)] != root_names:
        raise PathEscapes("is not written under the root")
    return "/".join(names[len(root_names) :])
