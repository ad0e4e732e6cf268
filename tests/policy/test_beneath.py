"""``open_beneath``: a tool opens what the policy judged, or nothing.

Every test runs twice: through ``openat2`` (the kernel checks each component) and
through the ``O_NOFOLLOW`` walk used where ``openat2`` is missing or filtered. The
capability probe is the one seam replaced to force the walk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from agent_gate import CallState, Gate, ToolRegistry
from agent_gate.errors import AgentGateError
from agent_gate.policy import (
    PathEscapes,
    Policy,
    Verdict,
    open_beneath,
    open_file_beneath,
    relative_beneath,
)
from agent_gate.policy import beneath as beneath_module

SECRET = "OUTSIDE-SECRET-7f3a"


@pytest.fixture(params=["openat2", "walk"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "openat2":
        if not beneath_module._openat2_supported():
            pytest.skip("this kernel or its seccomp filter does not offer openat2")
    else:
        monkeypatch.setattr(beneath_module, "_openat2_supported", lambda: False)
    return str(request.param)


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    root = tmp_path / "workspace"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "sub" / "report.csv").write_text("report")
    (root / "sub" / "deeper" / "notes.txt").write_text("notes")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET)
    (outside / "report.csv").write_text(SECRET)
    return {"root": root, "outside": outside}


def read(root: Path, relative: str) -> str:
    fd = open_beneath(root, relative)
    with os.fdopen(fd, "r") as handle:
        return handle.read()


def test_reads_regular_files(how: str, tree: dict[str, Path]) -> None:
    root = tree["root"]
    assert read(root, "sub/report.csv") == "report"
    assert read(root, "sub//./deeper/notes.txt") == "notes"
    with open_file_beneath(root, "sub/deeper/notes.txt", encoding="utf-8") as handle:
        assert handle.read() == "notes"
    fd = open_beneath(root, "", os.O_RDONLY | os.O_DIRECTORY)  # the root itself
    try:
        assert sorted(os.listdir(fd)) == ["sub"]
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("relative", "component", "words"),
    [
        ("../outside/secret.txt", 1, "'..'"),
        ("sub/../../outside/secret.txt", 2, "'..'"),
        ("sub/deeper/..", 3, "'..'"),
        ("/etc/passwd", None, "absolute"),
        ("sub/\x00x", None, "NUL"),
    ],
)
def test_dotdot_absolute_and_nul_are_refused(
    how: str, tree: dict[str, Path], relative: str, component: int | None, words: str
) -> None:
    with pytest.raises(PathEscapes) as caught:
        open_beneath(tree["root"], relative)
    assert caught.value.component == component
    assert words in str(caught.value) and isinstance(caught.value, AgentGateError)


def test_every_symlink_is_refused_and_named_by_position(how: str, tree: dict[str, Path]) -> None:
    root, outside = tree["root"], tree["outside"]
    (root / "escape").symlink_to(outside, target_is_directory=True)
    (root / "sub" / "inner").symlink_to(root / "sub" / "deeper", target_is_directory=True)
    (root / "sub" / "deeper" / "leak.txt").symlink_to(outside / "secret.txt")
    (root / "sub" / "alias.csv").symlink_to("report.csv")  # stays inside: refused too
    for relative, component in [
        ("escape/secret.txt", 1),
        ("sub/inner/notes.txt", 2),
        ("sub/deeper/leak.txt", 3),
        ("sub/alias.csv", 2),
    ]:
        with pytest.raises(PathEscapes) as caught:
            open_beneath(root, relative)
        assert caught.value.component == component, relative
        assert "symbolic link" in str(caught.value)
        assert SECRET not in str(caught.value) and relative not in str(caught.value)


def test_create_never_goes_through_a_planted_link(how: str, tree: dict[str, Path]) -> None:
    root, outside = tree["root"], tree["outside"]
    fd = open_beneath(root, "sub/new.txt", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o640)
    os.write(fd, b"fresh")
    os.close(fd)
    assert (root / "sub" / "new.txt").read_bytes() == b"fresh"
    assert (root / "sub" / "new.txt").stat().st_mode & 0o777 == 0o640 & ~_umask()
    (root / "sub" / "planted.txt").symlink_to(outside / "created-outside.txt")  # dangling
    with pytest.raises(PathEscapes):
        open_file_beneath(root, "sub/planted.txt", "w")
    assert not (outside / "created-outside.txt").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_errors_carry_no_file_name(how: str, tree: dict[str, Path]) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        open_beneath(tree["root"], "sub/missing-file-name.txt")
    assert "missing-file-name" not in str(caught.value)


def read_policy(root: Path) -> Policy:
    doc = {"version": 1, "tools": {"read_file": {"rules": [
        {"id": "in", "effect": "allow", "when": [{"arg": "path", "path_under": str(root)}]},
    ]}}}
    return Policy.from_text(yaml.safe_dump(doc), source="p.yaml")


@pytest.mark.parametrize("swap", ["file", "folder"])
def test_a_symlink_swapped_in_after_the_decision_is_refused(
    how: str, tree: dict[str, Path], swap: str
) -> None:
    root, outside = tree["root"], tree["outside"]
    path = f"{root}/sub/report.csv"
    decision = read_policy(root).evaluate("read_file", {"path": path})
    assert decision.effect is Verdict.ALLOW
    # The race: between the decision and the tool, the file (or its folder) becomes
    # a symlink to outside the root.
    if swap == "file":
        (root / "sub" / "report.csv").unlink()
        (root / "sub" / "report.csv").symlink_to(outside / "secret.txt")
    else:
        (root / "sub").rename(root / "old-sub")
        (root / "sub").symlink_to(outside, target_is_directory=True)
    assert Path(path).read_text() == SECRET  # a plain open would leak it
    with pytest.raises(PathEscapes) as caught:
        read(root, relative_beneath(root, path))
    assert caught.value.component == (2 if swap == "file" else 1)
    assert SECRET not in str(caught.value)
    # Judged again now, the same call would be denied: the policy and the helper agree.
    assert read_policy(root).evaluate("read_file", {"path": path}).effect is Verdict.DENY


def test_relative_beneath_keeps_the_spelling_honest(tree: dict[str, Path]) -> None:
    root = tree["root"]
    assert relative_beneath(root, f"{root}//sub/./report.csv/") == "sub/report.csv"
    assert relative_beneath(root, f"{root}/") == ""
    with pytest.raises(PathEscapes) as caught:
        relative_beneath(root, f"{root}/sub/../../outside/secret.txt")
    assert caught.value.component is not None
    for bad in (f"{root}-evil/x", "/etc/passwd", "sub/report.csv"):
        with pytest.raises(PathEscapes):
            relative_beneath(root, bad)


def test_a_gated_tool_using_the_helper_reads_nothing_swapped_in(
    how: str, tree: dict[str, Path], tmp_path: Path
) -> None:
    """Through ``Gate.execute``: the policy allows the read, then (inside the tool, so
    after the decision) the file becomes a link to outside; the tool fails closed."""
    root, outside = tree["root"], tree["outside"]
    tools = ToolRegistry()

    @tools.tool(schema={"type": "object", "properties": {"path": {"type": "string"}},
                        "required": ["path"]}, effect="read", idempotency="natural")
    def read_file(path: str) -> str:
        if path.endswith("report.csv"):  # the race, after the policy said yes
            Path(path).unlink()
            Path(path).symlink_to(outside / "secret.txt")
        with open_file_beneath(root, relative_beneath(root, path), "r") as handle:
            return handle.read()

    with Gate(tools, f"sqlite:///{tmp_path / 'ledger.db'}", policy=read_policy(root),
              create=True) as gate:
        swapped = gate.execute("t", {"call_id": "a", "name": "read_file",
                                     "arguments": {"path": f"{root}/sub/report.csv"}})
        plain = gate.execute("t", {"call_id": "b", "name": "read_file",
                                   "arguments": {"path": f"{root}/sub/deeper/notes.txt"}})
    assert swapped.state is CallState.FAILED and isinstance(swapped.exception, PathEscapes)
    assert SECRET not in repr(swapped.to_dict()) + repr(swapped.error)
    assert plain.state is CallState.SUCCEEDED and plain.result == "notes"
