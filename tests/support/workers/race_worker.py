"""Processes of the racing-workers test (run as a script, never collected).

    race_worker.py work URL POLICY WORKDIR WID ROLE ROUNDS
        ROLE ``replay``: every round, replay the round's transcripts into its shared
        tasks (phase a), then resume or replay them again (phase b, after the test
        approved what waits for approval). ROLE ``consume``: the same on tasks of
        its own. Each phase starts when WORKDIR/go-R-P appears and ends by creating
        WORKDIR/done-R-P-WID; every outcome is appended to WORKDIR/out-WID.jsonl.
    race_worker.py verify URL WORKDIR
        Check the audit chain over and over while the others write, until
        WORKDIR/stop-verify appears; print how many checks passed, or the first
        failure (exit 1).
    race_worker.py sweep URL POLICY WORKDIR WID
        When WORKDIR/go-sweep appears, run the in-doubt sweep (``Gate.recover``).
    race_worker.py resume URL POLICY WORKDIR WID
        When WORKDIR/go-resume appears, resume every task of the plan.
    race_worker.py execute URL POLICY WORKDIR WID
        When WORKDIR/go-sweep appears, execute every call of WORKDIR/calls.json (a
        worker that receives the same calls again while the sweep runs).
    race_worker.py abandon URL WORKDIR
        Record, authorize and claim every call of WORKDIR/calls.json under this
        process's own lease (as a worker does before running a tool), then die by
        SIGKILL without running any: a worker that crashed holding many calls.

Every wait is bounded, so a broken test fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # support, for race_tools

from race_tools import tools

from agent_gate import Gate, Outcome
from agent_gate.ledger import Event, Ledger, NewCall
from agent_gate.ledger.canonical import arguments_hash
from agent_gate.ledger.lease import this_owner
from agent_gate.sse import SSEDecoder

PROVIDER = "openai-responses"
NO_POLICY = "-"
WAIT_SECONDS = 300.0


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"{path.name} never appeared")
        time.sleep(0.005)


def events(transcript: str) -> list[object]:
    decoder = SSEDecoder()
    out = [*decoder.feed(Path(transcript).read_bytes())]
    decoder.end()
    return out


class Log:
    def __init__(self, workdir: Path, wid: str) -> None:
        self.file = (workdir / f"out-{wid}.jsonl").open("a", encoding="utf-8")

    def write(self, rnd: int, phase: str, task: str, outcomes: list[Outcome]) -> None:
        for o in outcomes:
            self.file.write(json.dumps({"round": rnd, "phase": phase, "task": task,
                                        **o.to_dict()}) + "\n")
        self.file.flush()


def work(url: str, policy: str, workdir: Path, wid: str, role: str, rounds: int) -> None:
    plan = json.loads((workdir / "plan.json").read_text())
    log = Log(workdir, wid)
    index = int(wid.lstrip("rc"))
    with Gate(tools, url, policy=policy) as gate:
        (workdir / f"ready-{wid}").touch()
        for rnd in range(rounds):
            spec = plan["rounds"][rnd]
            jobs: list[tuple[str, list[str]]] = (
                [(s["task"], s["transcripts"]) for s in spec["shared"]]
                if role == "replay"
                else [(o["task"], [o["transcript"]]) for o in spec["own"][wid]]
            )
            wait_for(workdir / f"go-{rnd}-a")
            for task, transcripts in jobs:
                # Rotate the order so that racing workers interleave differently.
                k = index % len(transcripts)
                for transcript in transcripts[k:] + transcripts[:k]:
                    result = gate.run(events(transcript), task_id=task, provider=PROVIDER)
                    log.write(rnd, "a", task, list(result.outcomes))
            (workdir / f"done-{rnd}-a-{wid}").touch()

            wait_for(workdir / f"go-{rnd}-b")
            for task, transcripts in jobs:
                if role == "replay" and index % 2:
                    for transcript in transcripts:
                        result = gate.run(events(transcript), task_id=task, provider=PROVIDER)
                        log.write(rnd, "b", task, list(result.outcomes))
                else:
                    log.write(rnd, "b", task, gate.resume(task))
            (workdir / f"done-{rnd}-b-{wid}").touch()


def verify(url: str, workdir: Path) -> None:
    checks = 0
    deadline = time.monotonic() + 2 * WAIT_SECONDS
    with Ledger(url) as ledger:
        while not (workdir / "stop-verify").exists() and time.monotonic() < deadline:
            report = ledger.verify_audit()
            if not report.ok:
                print(json.dumps({"checks": checks, "failure": report.to_dict()}))
                sys.exit(1)
            checks += 1
            time.sleep(0.02)
    print(json.dumps({"checks": checks, "failure": None}))


def plan_tasks(workdir: Path) -> list[str]:
    plan = json.loads((workdir / "plan.json").read_text())
    tasks: list[str] = []
    for spec in plan["rounds"]:
        tasks += [s["task"] for s in spec["shared"]]
        tasks += [o["task"] for own in spec["own"].values() for o in own]
    return tasks


def gate_for(url: str, policy: str) -> Gate:
    return Gate(tools, url, policy=None if policy == NO_POLICY else policy)


def sweep(url: str, policy: str, workdir: Path, wid: str) -> None:
    log = Log(workdir, wid)
    with gate_for(url, policy) as gate:
        wait_for(workdir / "go-sweep")
        log.write(-1, "sweep", "*", gate.recover())


def resume(url: str, policy: str, workdir: Path, wid: str) -> None:
    log = Log(workdir, wid)
    with gate_for(url, policy) as gate:
        wait_for(workdir / "go-resume")
        for task in plan_tasks(workdir):
            log.write(-1, "resume", task, gate.resume(task))


def execute(url: str, policy: str, workdir: Path, wid: str) -> None:
    log = Log(workdir, wid)
    calls = json.loads((workdir / "calls.json").read_text())
    with gate_for(url, policy) as gate:
        wait_for(workdir / "go-sweep")
        for c in calls:
            log.write(-1, "execute", c["task"], [gate.execute(c["task"], c["call"])])


def abandon(url: str, workdir: Path) -> None:
    calls = json.loads((workdir / "calls.json").read_text())
    owner = this_owner()
    with Ledger(url) as ledger:
        for c in calls:
            call, spec = c["call"], tools.get(c["call"]["name"])
            assert spec is not None
            rec, _ = ledger.record(NewCall(
                task_id=c["task"], call_id=call["call_id"], idem_key=f"call:{call['call_id']}",
                tool=call["name"], effect=spec.spec.effect.value,
                idempotency=spec.spec.idempotency.value,
                args_hash=arguments_hash(call["arguments"]), arguments=call["arguments"],
            ), actor=owner)
            rec = ledger.transition(rec, Event.ALLOW, actor=owner, code="allowed").record
            assert ledger.claim(rec, owner=owner, lease_ms=600_000).won
    print(owner, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    command, url, *rest = argv
    try:
        if command == "work":
            policy, workdir, wid, role, rounds = rest
            work(url, policy, Path(workdir), wid, role, int(rounds))
        elif command == "verify":
            verify(url, Path(rest[0]))
        elif command == "sweep":
            sweep(url, rest[0], Path(rest[1]), rest[2])
        elif command == "resume":
            resume(url, rest[0], Path(rest[1]), rest[2])
        elif command == "execute":
            execute(url, rest[0], Path(rest[1]), rest[2])
        elif command == "abandon":
            abandon(url, Path(rest[0]))
        else:
            sys.exit(f"unknown command {command}")
    except Exception:
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
