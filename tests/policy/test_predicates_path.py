"""``path_under``: resolved like the kernel would, with real files and symlinks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from agent_gate.policy import PolicyDecision, Truth, Verdict

Allows = Callable[..., bool]
Denies = Callable[..., PolicyDecision]


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "workspace"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "notes.txt").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    sibling = tmp_path / "workspace-evil"  # shares the root's name as a prefix
    sibling.mkdir()
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "inner-link").symlink_to(root / "sub", target_is_directory=True)
    (root / "file-link").symlink_to(outside / "secret.txt")
    return {"root": root, "outside": outside, "sibling": sibling, "tmp": tmp_path}


def under(root: Path, **extra: object) -> dict[str, object]:
    spec: object = str(root) if not extra else {"roots": [str(root)], **extra}
    return {"arg": "path", "path_under": spec}


def test_paths_inside_the_root(allows: Allows, layout: dict[str, Path]) -> None:
    root = layout["root"]
    for path in (
        root / "sub" / "notes.txt",
        root / "sub" / "not-yet-created.txt",
        root / "sub" / ".." / "sub" / "notes.txt",
        root / "inner-link" / "notes.txt",  # a symlink that stays inside is fine
    ):
        assert allows(under(root), {"path": str(path)}), path


def test_dotdot_traversal_is_denied(allows: Allows, layout: dict[str, Path]) -> None:
    root = layout["root"]
    for path in (
        f"{root}/../outside/secret.txt",
        f"{root}/sub/../../outside/secret.txt",
        f"{root}/sub/../../../../../../etc/passwd",
        f"{root}/../workspace-evil/x",
    ):
        assert not allows(under(root), {"path": path}), path


def test_absolute_escape_and_prefix_sibling_are_denied(
    allows: Allows, layout: dict[str, Path]
) -> None:
    root = layout["root"]
    assert not allows(under(root), {"path": "/etc/passwd"})
    # A string-prefix test would accept this; a path-component test does not.
    assert not allows(under(root), {"path": str(layout["sibling"] / "x")})


def test_symlink_escape_is_denied(allows: Allows, layout: dict[str, Path]) -> None:
    root = layout["root"]
    assert os.path.islink(root / "escape")
    assert not allows(under(root), {"path": str(root / "escape" / "secret.txt")})
    assert not allows(under(root), {"path": str(root / "file-link")})


def test_the_root_itself_only_when_allowed(allows: Allows, layout: dict[str, Path]) -> None:
    root = layout["root"]
    assert not allows(under(root), {"path": str(root)})
    assert not allows(under(root), {"path": f"{root}/sub/.."})
    assert allows(under(root, allow_root=True), {"path": str(root)})


def test_a_symlinked_root_is_resolved_too(allows: Allows, layout: dict[str, Path]) -> None:
    alias = layout["tmp"] / "alias-of-workspace"
    alias.symlink_to(layout["root"], target_is_directory=True)
    assert allows(under(alias), {"path": str(layout["root"] / "sub" / "notes.txt")})
    assert not allows(under(alias), {"path": str(layout["outside"] / "secret.txt")})


@pytest.mark.parametrize("value", ["relative/notes.txt", "../x", "", "/tmp/\x00x", 42, None])
def test_unjudgeable_paths_fail_closed(
    denies: Denies, layout: dict[str, Path], value: object
) -> None:
    # In a deny rule ("deny unless under the root") these must deny.
    cond = {"not": under(layout["root"])}
    decision = denies(cond, {"path": value})
    assert decision.effect is Verdict.DENY
    assert decision.rules[0].truth is Truth.ERROR
