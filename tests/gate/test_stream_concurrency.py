"""Several processes replaying the same streams into the same tasks at once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from support import WORKERS
from waiting import start_together

HERE = Path(__file__).parent
TRANSCRIPTS = HERE.parent / "transcripts"
WORKER = WORKERS / "replay_worker.py"
AGENT_GATE = Path(sys.executable).with_name("agent-gate")


def effect_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.mark.slow
def test_racing_workers_run_each_side_effect_exactly_once(
    tmp_path: Path, db_url: str, effects_file: Path
) -> None:
    tasks = [f"task-{i}" for i in range(12)]
    go = tmp_path / "go"
    stream = TRANSCRIPTS / "openai_chat" / "parallel_calls.sse"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), db_url, str(stream), "openai-chat", str(go), *tasks],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(4)
    ]
    start_together(go, procs)
    outcomes = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outcomes += [json.loads(line) for line in out.splitlines()]

    effects = Counter(effect_lines(effects_file))
    expected = {f"{t} get_weather Zürich" for t in tasks} | {
        f"{t} send_email marta@example.org Réunion à 14h" for t in tasks}
    assert set(effects) == expected
    assert all(n == 1 for n in effects.values()), effects.most_common(3)
    # Every worker got an answer for every call; exactly one of them ran it.
    assert len(outcomes) == 4 * len(tasks) * 2
    ran = Counter((o["task"], o["call_id"]) for o in outcomes if not o["replayed"])
    assert len(ran) == len(tasks) * 2 and all(n == 1 for n in ran.values())
    others = {o["state"] for o in outcomes if o["replayed"]}
    assert others <= {"succeeded", "executing"}  # replayed, or still running elsewhere


@pytest.mark.slow
def test_two_cli_replays_at_once(tmp_path: Path, effects_file: Path) -> None:
    (tmp_path / "my_tools.py").write_text((HERE.parent / "support" / "agent_tools.py").read_text())
    stream = str(TRANSCRIPTS / "anthropic" / "parallel_tool_use.sse")
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    cmd = [str(AGENT_GATE), "replay", stream, "--provider", "anthropic", "--task", "T",
           "--tools", "my_tools", "--db", url, "--json"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=dict(os.environ), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        # 7: a call was still running in the other process when this one ended.
        assert p.returncode in (0, 7), err
        results.append([json.loads(line) for line in out.splitlines()])
        assert results[-1][-1] == {"terminal": "completed", "exit_code": p.returncode}
    new = [c for r in results for c in r[:-1] if not c["replayed"]]
    assert sorted(c["call_id"] for c in new) == ["toolu_01ParEmail00000002",
                                                 "toolu_01ParWeather0000002"]
    assert sorted(effect_lines(effects_file)) == [
        "T get_weather Zürich", "T send_email marta@example.org Réunion à 14h"]
