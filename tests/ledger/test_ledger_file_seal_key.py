"""A seal key file anyone but its owner could read or replace is refused, with the fix."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
from shared_fixtures import EXAMPLE_POLICY, TEST_SEAL_KEY, effect_lines

from agent_gate import CallState, Gate
from agent_gate.errors import SealKeyMissing, SealKeyUnsafe

EXTERNAL_MAIL = {"call_id": "ext", "name": "send_email",
                 "arguments": {"to": "bob@gmail.com", "subject": "Wire", "body": "Dear Bob."}}
NOBODY = 65534


@pytest.fixture(autouse=True)
def _no_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENT_GATE_SEAL_KEY", raising=False)
    monkeypatch.delenv("AGENT_GATE_SEAL_KEY_FILE", raising=False)


def _approved_call(sqlite_url: str, support_tools: ModuleType) -> Path:
    """A sealed call approved and waiting to run; its default key file beside the db."""
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY) as gate:
        assert gate.execute("t", EXTERNAL_MAIL).state is CallState.AWAITING_APPROVAL
        gate.approve("ext", by="alice")
    key_file = Path(sqlite_url.removeprefix("sqlite:///") + ".key")
    assert key_file.exists()
    return key_file


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602, 0o660])
def test_a_default_key_file_open_to_group_or_others_is_refused(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path, mode: int
) -> None:
    key_file = _approved_call(sqlite_url, support_tools)
    key_file.chmod(mode)
    with pytest.raises(SealKeyUnsafe) as refused:
        Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY)
    message = str(refused.value)
    assert f"chmod 600 {key_file}" in message and f"{mode:04o}" in message
    assert TEST_SEAL_KEY not in message and key_file.read_text().strip() not in message
    assert effect_lines(effects_file) == []
    # The fix the message gives works.
    key_file.chmod(0o600)
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY) as gate:
        assert [o.state for o in gate.resume("t")] == [CallState.SUCCEEDED]
    assert effect_lines(effects_file) == ["t send_email bob@gmail.com Wire"]


def test_a_key_file_named_by_the_environment_is_checked_too(
    sqlite_url: str, support_tools: ModuleType, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, effects_file: Path,
) -> None:
    key_file = tmp_path / "shared.key"
    key_file.write_text(TEST_SEAL_KEY + "\n")
    key_file.chmod(0o644)
    monkeypatch.setenv("AGENT_GATE_SEAL_KEY_FILE", str(key_file))
    with pytest.raises(SealKeyMissing, match=r"chmod 600 .*shared\.key"):
        Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY)
    key_file.chmod(0o400)
    with Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY) as gate:
        assert gate.seal_key is not None and gate.seal_key.source == str(key_file)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0,
                    reason="giving a file to another user needs root")
def test_a_key_file_owned_by_another_user_is_refused(
    sqlite_url: str, support_tools: ModuleType, effects_file: Path
) -> None:
    key_file = _approved_call(sqlite_url, support_tools)
    os.chown(key_file, NOBODY, -1)
    with pytest.raises(SealKeyUnsafe) as refused:
        Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY)
    message = str(refused.value)
    assert f"owned by uid {NOBODY}" in message and "chown" in message
    assert str(key_file) in message
    # Given as seal_key= it is refused the same way.
    with pytest.raises(SealKeyUnsafe):
        Gate(support_tools.tools, sqlite_url, policy=EXAMPLE_POLICY, seal_key=str(key_file))
    assert effect_lines(effects_file) == []
