"""A full ``audit verify`` of an archived ledger reads each batch's perfect subtrees and
chain ends in place of its pruned entries, and still catches every edit of what it reads
in their place (each tamper below leaves every stored value self-consistent where a
verifier that trusted it would look: it must be caught by recomputation), on both
backends. The layout is the hard one: archived tasks interleaved with a live task's
entries (partly pruned ranges), a checkpoint whose tree ends inside the archived range,
two batches, and an archived task used again."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, event, func, insert, select, update

from agent_gate.evidence.checkpoint import TreeHead
from agent_gate.evidence.merkle import Tree
from agent_gate.ledger import Ledger
from agent_gate.ledger.backend import begin_read
from agent_gate.ledger.chain import HeadsRoot, root_hash
from agent_gate.ledger.checkpoints import take
from agent_gate.ledger.models import (
    ARCHIVED_HEADS,
    AUDIT_CHECKPOINT_HEADS,
    AUDIT_EVENTS,
    AUDIT_HEADS,
    AUDIT_PRUNED,
    AUDIT_PRUNED_HEADS,
    AUDIT_SUBTREES,
    TOOL_CALLS,
)
from agent_gate.ledger.pruned import ARCHIVE_TASK
from agent_gate.ledger.subtrees import cover
from agent_gate.ledger.trail_since import verify_since
from agent_gate.ledger.trail_tree import leaf_of
from tests.evidence.test_archive import FUTURE, cli, engine_of, finish, keys, new_call

__all__ = ["keys"]  # the fixture, imported for its use here


def archived(db_url: str, key: Path) -> dict[str, Any]:
    """The layout of the module docstring; returns what the tampers need."""
    with Ledger(db_url) as ledger:
        for i in range(12):
            finish(ledger, f"a{i}", task=f"done{i % 3}")
            if i % 4 == 1:  # a live task's entries between the archived ones
                ledger.record(new_call(f"l{i}", "live"))
            if i == 6:
                take(ledger.engine)  # a tree that ends inside the range archived below
    done = cli("audit", "archive", "--before", FUTURE, "--out", key.parent / "arch",
               "--signing-key", key, "--batch", "2", "--db", db_url, "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["tasks"] == 3 and len(report["batches"]) == 2, report
    with Ledger(db_url) as ledger:
        finish(ledger, "again", task="done0")  # an archived task used again
        ledger.record(new_call("late", "live"))
        cut = take(ledger.engine)
        ledger.record(new_call("latest", "live"))  # after every checkpoint
        ledger.record(new_call("fresh1", "fresh"))  # a task no checkpoint covers yet
    engine = engine_of(db_url)
    with engine.connect() as conn:
        pieces = conn.execute(select(AUDIT_SUBTREES).order_by(AUDIT_SUBTREES.c.start)
                              ).mappings().all()
    engine.dispose()
    return {"batches": report["batches"], "pieces": pieces, "checkpoint": cut}


def verify(db_url: str) -> dict[str, Any]:
    done = cli("audit", "verify", "--db", db_url, "--json")
    return {"code": done.exit_code, **json.loads(done.output)}


def test_the_archived_ledger_verifies_from_subtrees_and_reads_no_pruned_entry(
    db_url: str, keys: tuple[Path, str]
) -> None:
    state = archived(db_url, keys[0])
    pieces = state["pieces"]
    assert any(p["level"] >= 1 for p in pieces)  # whole aligned ranges, not leaves
    assert any(b["first_id"] - a["last_id"] > 1
               for a, b in itertools.pairwise(pieces))  # live entries between
    with Ledger(db_url) as ledger:
        statements: list[str] = []
        event.listen(ledger.engine, "before_cursor_execute",
                     lambda *args: statements.append(args[2]))
        report = ledger.verify_audit()
    assert report.ok, report.problem
    assert report.entries == state["checkpoint"].tree_size + 3  # every leaf, pruned too
    assert not [s for s in statements if AUDIT_PRUNED.name in s], statements
    assert verify(db_url)["code"] == 0


def _hex_flip(digest: str) -> str:
    return ("1" if digest[0] == "0" else "0") + digest[1:]


def _fake_subtree_for_the_newest_live_entry(conn: Any, batch: str) -> None:
    """Delete the live task's newest entry (after every checkpoint) and pass it off as
    archived: a level-0 subtree of exactly its leaf at exactly its position, and the
    task's head moved back to the entry before it. Tree, chains and heads all agree."""
    row = conn.execute(select(AUDIT_EVENTS).where(AUDIT_EVENTS.c.task_id == "live")
                       .order_by(AUDIT_EVENTS.c.id.desc()).limit(1)).mappings().one()
    before = conn.execute(select(func.count()).select_from(AUDIT_EVENTS)
                          .where(AUDIT_EVENTS.c.id < row["id"])).scalar_one()
    pruned = sum(1 << p.level for p in conn.execute(
        select(AUDIT_SUBTREES.c.level).where(AUDIT_SUBTREES.c.first_id < row["id"])))
    conn.execute(insert(AUDIT_SUBTREES).values(
        start=before + pruned, level=0, first_id=row["id"], last_id=row["id"],
        hash=leaf_of(row)[1].hex(), archive=batch))
    conn.execute(delete(AUDIT_EVENTS).where(AUDIT_EVENTS.c.id == row["id"]))
    conn.execute(update(AUDIT_HEADS).where(AUDIT_HEADS.c.task_id == "live")
                 .values(seq=row["seq"] - 1, hash=row["prev_hash"]))


def _shift(conn: Any, pieces: Any) -> None:
    starts = {p["start"] for p in pieces}
    piece = next(p for p in pieces if p["level"] == 0 and p["start"] + 1 not in starts)
    conn.execute(update(AUDIT_SUBTREES).where(AUDIT_SUBTREES.c.start == piece["start"])
                 .values(start=piece["start"] + 1))


def _edit_hash(conn: Any, pieces: Any) -> None:
    widest = max(pieces, key=lambda p: p["level"])
    conn.execute(update(AUDIT_SUBTREES).where(AUDIT_SUBTREES.c.start == widest["start"])
                 .values(hash=_hex_flip(widest["hash"])))


def _swap(conn: Any, pieces: Any) -> None:
    a, b = pieces[0], pieces[1]
    for piece, other in ((a, b), (b, a)):
        conn.execute(update(AUDIT_SUBTREES).where(AUDIT_SUBTREES.c.start == piece["start"])
                     .values(hash=other["hash"]))


def _drop(conn: Any, pieces: Any) -> None:
    conn.execute(delete(AUDIT_SUBTREES).where(AUDIT_SUBTREES.c.start == pieces[-1]["start"]))


def _archived_head(conn: Any, task: str, *, also_head: bool) -> None:
    """An archived task's chain end rewritten (and its live head with it)."""
    forged = "ab" * 32
    conn.execute(update(ARCHIVED_HEADS).where(ARCHIVED_HEADS.c.task_id == task)
                 .values(hash=forged))
    if also_head:
        conn.execute(update(AUDIT_HEADS).where(AUDIT_HEADS.c.task_id == task)
                     .values(hash=forged))


def _passed_off_as_archived(conn: Any, task: str, batch: str) -> None:
    """A task deleted whole, entries and calls, its head recorded as an archived chain
    end of ``batch``: its head, the chain end and (if no checkpoint covers it) the tree
    all agree."""
    seq, digest = conn.execute(select(AUDIT_HEADS.c.seq, AUDIT_HEADS.c.hash)
                               .where(AUDIT_HEADS.c.task_id == task)).one()
    conn.execute(insert(ARCHIVED_HEADS).values(task_id=task, seq=seq, hash=digest,
                                               archive=batch))
    conn.execute(delete(AUDIT_EVENTS).where(AUDIT_EVENTS.c.task_id == task))
    conn.execute(delete(TOOL_CALLS).where(TOOL_CALLS.c.task_id == task))


TAMPERS: dict[str, tuple[Callable[[Any, dict[str, Any]], None], str]] = {
    "a subtree's hash edited": (lambda c, s: _edit_hash(c, s["pieces"]), "tree"),
    "two subtrees' hashes swapped": (lambda c, s: _swap(c, s["pieces"]), "tree"),
    "a subtree moved by one leaf": (lambda c, s: _shift(c, s["pieces"]), "tree"),
    "a subtree deleted": (lambda c, s: _drop(c, s["pieces"]), "tree"),
    "a deleted live entry passed off as a subtree of a batch": (
        lambda c, s: _fake_subtree_for_the_newest_live_entry(c, s["batches"][0]), "deleted"),
    "a deleted live entry passed off as a subtree of no batch": (
        lambda c, s: _fake_subtree_for_the_newest_live_entry(c, "forged-batch"), "deleted"),
    "an archived task's head edited": (
        lambda c, s: c.execute(update(AUDIT_HEADS).where(AUDIT_HEADS.c.task_id == "done1")
                               .values(hash="cd" * 32)), "deleted"),
    "the chain end a used-again task links to edited": (
        lambda c, s: _archived_head(c, "done0", also_head=False), "deleted"),
    "a checkpointed task deleted and passed off as archived": (
        lambda c, s: _passed_off_as_archived(c, "live", s["batches"][0]), "tree"),
    "a task after every checkpoint deleted and passed off as archived": (
        lambda c, s: _passed_off_as_archived(c, "fresh", s["batches"][0]), "deleted"),
    "the chain end a used-again task links to moved past its live entries": (
        lambda c, s: c.execute(update(ARCHIVED_HEADS).where(ARCHIVED_HEADS.c.task_id == "done0")
                               .values(seq=ARCHIVED_HEADS.c.seq + 5)), "deleted"),
    "a live head deleted from a checkpoint the archive moved heads out of": (
        lambda c, s: _drop_live_bound(c), "checkpoint"),
    "an archive record deleted": (
        lambda c, s: c.execute(delete(AUDIT_EVENTS).where(
            AUDIT_EVENTS.c.task_id == ARCHIVE_TASK, AUDIT_EVENTS.c.seq == 1)), "deleted"),
}


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_a_tampered_archive_is_caught_by_a_full_verify(
    db_url: str, keys: tuple[Path, str], tamper: str
) -> None:
    state = archived(db_url, keys[0])
    assert verify(db_url)["code"] == 0
    edit, kind = TAMPERS[tamper]
    engine = engine_of(db_url)
    with engine.begin() as conn:
        edit(conn, state)
    engine.dispose()
    caught = verify(db_url)
    assert caught["code"] == 1 and caught["problem"]["kind"] == kind, caught
    assert cli("audit", "verify", "--deep", "--db", db_url).exit_code == 1  # a superset


def _moved_head(conn: Any, *, drop: bool) -> None:
    """A checkpoint head the archive moved out edited, or deleted."""
    row = conn.execute(select(AUDIT_PRUNED_HEADS).order_by(
        AUDIT_PRUNED_HEADS.c.checkpoint_id, AUDIT_PRUNED_HEADS.c.task_id).limit(1)).one()
    which = ((AUDIT_PRUNED_HEADS.c.checkpoint_id == row.checkpoint_id)
             & (AUDIT_PRUNED_HEADS.c.task_id == row.task_id))
    if drop:
        conn.execute(delete(AUDIT_PRUNED_HEADS).where(which))
    else:
        conn.execute(update(AUDIT_PRUNED_HEADS).where(which).values(hash=_hex_flip(row.hash)))


def _drop_live_bound(conn: Any) -> None:
    first = conn.execute(select(func.min(AUDIT_PRUNED_HEADS.c.checkpoint_id))).scalar_one()
    conn.execute(delete(AUDIT_CHECKPOINT_HEADS).where(
        AUDIT_CHECKPOINT_HEADS.c.checkpoint_id == first,
        AUDIT_CHECKPOINT_HEADS.c.task_id == "live"))


KEPT_PER_TASK: dict[str, tuple[Callable[[Any], None], str]] = {
    "an archived chain end and the head edited together": (
        lambda c: _archived_head(c, "done1", also_head=True), "edited"),
    "a checkpoint head the archive moved out edited": (
        lambda c: _moved_head(c, drop=False), "deleted"),
    "a checkpoint head the archive moved out deleted": (
        lambda c: _moved_head(c, drop=True), "deleted"),
}


def test_the_archive_moves_its_tasks_checkpoint_heads_out_under_its_record(
    db_url: str, keys: tuple[Path, str]
) -> None:
    """Each batch moves the heads checkpoints bound for its tasks into
    ``audit_pruned_heads`` and its record commits to them: a full verify then counts
    them per checkpoint from the records, and reads no row per archived task."""
    archived(db_url, keys[0])
    engine = engine_of(db_url)
    with engine.connect() as conn:
        bound = set(conn.execute(select(AUDIT_CHECKPOINT_HEADS.c.task_id)).scalars())
        moved = conn.execute(select(AUDIT_PRUNED_HEADS.c.task_id, AUDIT_PRUNED_HEADS.c.archive,
                                    AUDIT_PRUNED_HEADS.c.checkpoint_id)).all()
        details = [json.loads(d) for d in conn.execute(select(AUDIT_EVENTS.c.detail).where(
            AUDIT_EVENTS.c.task_id == ARCHIVE_TASK)).scalars()]
    engine.dispose()
    archived_whole = {"done1", "done2"}  # done0 was used again: its new heads stay
    assert archived_whole.isdisjoint(bound) and {"live", "done0"} <= bound
    assert {task for task, _, _ in moved} >= archived_whole
    counted: dict[str, int] = {}
    for _, _, cp_id in moved:
        counted[str(cp_id)] = counted.get(str(cp_id), 0) + 1
    recorded: dict[str, int] = {}
    for detail in details:
        for cp_id, n in detail["bound"].items():
            recorded[cp_id] = recorded.get(cp_id, 0) + n
    assert counted == recorded and recorded
    with Ledger(db_url) as ledger:
        read: list[int] = []
        import agent_gate.ledger.trail_verify as trail_verify

        real = trail_verify.archived_heads
        trail_verify.archived_heads = lambda conn, **kw: (  # type: ignore[assignment]
            lambda out: (read.append(len(out[0])), out)[1])(real(conn, **kw))
        try:
            report = ledger.verify_audit()
        finally:
            trail_verify.archived_heads = real
    assert report.ok, report.problem
    # Heads read whole: "live", "fresh", "done0" (used again) and the archive's own
    # chain; not "done1" and "done2", archived whole (their heads are still counted).
    assert read == [4] and report.tasks == 6


@pytest.mark.parametrize("tamper", sorted(KEPT_PER_TASK))
def test_what_an_archived_task_kept_is_checked_by_a_deep_verify(
    db_url: str, keys: tuple[Path, str], tamper: str
) -> None:
    """The limit of a full verify, as for kept leaves: what each archived task left in
    the live ledger (its chain end, the checkpoint heads moved out) is counted per batch,
    never read; ``--deep`` reads it and checks it against each batch's record."""
    archived(db_url, keys[0])
    edit, kind = KEPT_PER_TASK[tamper]
    engine = engine_of(db_url)
    with engine.begin() as conn:
        edit(conn)
    engine.dispose()
    assert verify(db_url)["code"] == 0
    caught = cli("audit", "verify", "--deep", "--db", db_url, "--json")
    assert caught.exit_code == 1, caught.output
    assert json.loads(caught.output)["problem"]["kind"] == kind, caught.output


def test_a_kept_leaf_edited_is_caught_by_a_deep_verify_only(
    db_url: str, keys: tuple[Path, str]
) -> None:
    """The documented limit of the subtree walk, and the flag that closes it: a full
    verify proves the checkpoints from the subtrees and never reads ``audit_pruned``;
    ``--deep`` walks the kept hashes too and recomputes each batch's root from them."""
    archived(db_url, keys[0])
    deep = cli("audit", "verify", "--deep", "--db", db_url, "--json")
    assert deep.exit_code == 0, deep.output
    engine = engine_of(db_url)
    with engine.begin() as conn:
        first = conn.execute(select(AUDIT_PRUNED.c.id, AUDIT_PRUNED.c.leaf)
                             .order_by(AUDIT_PRUNED.c.id).limit(1)).one()
        conn.execute(update(AUDIT_PRUNED).where(AUDIT_PRUNED.c.id == first.id)
                     .values(leaf=_hex_flip(first.leaf)))
    engine.dispose()
    assert verify(db_url)["code"] == 0  # the subtrees still prove every checkpoint
    caught = cli("audit", "verify", "--deep", "--db", db_url, "--json")
    assert caught.exit_code == 1, caught.output
    problem = json.loads(caught.output)["problem"]
    assert problem["kind"] in {"tree", "deleted"}, problem
    assert first.leaf not in caught.output
    refused = cli("audit", "verify", "--deep", "--checkpoint", str(keys[0]), "--db", db_url)
    assert refused.exit_code == 2 and "--deep" in refused.output


def test_a_tampered_subtree_after_a_trusted_checkpoint_is_caught_from_it(
    db_url: str, keys: tuple[Path, str]
) -> None:
    """``audit verify --checkpoint`` from the tree that ends inside the archived range
    reads the subtrees after it; one edited there is caught."""
    state = archived(db_url, keys[0])
    with Ledger(db_url) as ledger, begin_read(ledger.engine) as conn:
        from agent_gate.ledger.checkpoints import checkpoints

        first = next(c for c in checkpoints(conn) if c.tree_size)
        trusted = TreeHead("ledger.example/agent-gate", first.tree_size,
                           bytes.fromhex(first.tree_root))
        assert verify_since(conn, trusted).ok
    later = [p for p in state["pieces"] if p["start"] >= first.tree_size]
    assert later, "the archived range goes on after the trusted checkpoint"
    engine = engine_of(db_url)
    with engine.begin() as conn:
        _edit_hash(conn, later)
    engine.dispose()
    with Ledger(db_url) as ledger, begin_read(ledger.engine) as conn:
        report = verify_since(conn, trusted)
    assert not report.ok and report.problem is not None and report.problem.kind == "tree"


def test_a_verify_from_a_checkpoint_reads_only_the_archive_records_after_it(
    db_url: str, keys: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its cost is what came after the trusted checkpoint: an archive record before it
    (a batch whose entries it covers) is not read, however many batches a ledger archived
    (it read every one: 1,800 at a million calls, the 1.3x of the retention benchmark)."""
    from agent_gate.ledger import subtrees

    state = archived(db_url, keys[0])
    read: list[str] = []
    loads = json.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        body = loads(text, *args, **kwargs)
        if isinstance(body, dict) and isinstance(body.get("archive"), str):
            read.append(body["archive"])
        return body

    monkeypatch.setattr(subtrees.json, "loads", counting)
    with Ledger(db_url) as ledger, begin_read(ledger.engine) as conn:
        from agent_gate.ledger.checkpoints import checkpoints

        first = next(c for c in checkpoints(conn) if c.tree_size)
        for cp in (state["checkpoint"], first):
            trusted = TreeHead("ledger.example/agent-gate", cp.tree_size,
                               bytes.fromhex(cp.tree_root))
            read.clear()
            assert verify_since(conn, trusted).ok
            if cp is first:  # both batches were archived after it: both are read
                assert len(set(read)) == len(state["batches"]) == 2, read
            else:
                assert read == []


def test_cover_is_aligned_disjoint_exact_and_never_straddles_a_checkpoint() -> None:
    rng = random.Random(34)
    for _ in range(300):
        size = rng.randrange(1, 300)
        positions = sorted(rng.sample(range(size), rng.randrange(0, size + 1)))
        cuts = sorted(rng.sample(range(1, size + 1), rng.randrange(0, min(6, size + 1))))
        pieces = cover(positions, cuts)
        covered = [i for start, level in pieces for i in range(start, start + (1 << level))]
        assert covered == positions
        for start, level in pieces:
            assert start % (1 << level) == 0
            assert not any(start < cut < start + (1 << level) for cut in cuts)
        runs = sum(1 for i, p in enumerate(positions) if i == 0 or positions[i - 1] != p - 1)
        assert len(pieces) <= (runs + len(cuts)) * 2 * max(1, size.bit_length())


def test_subtrees_recompute_every_root_the_leaves_do() -> None:
    """The verifier's arithmetic: a frontier grown by live leaves and by the subtrees
    ``cover`` chose over the pruned ones has, at every cut, the leaves' own root."""
    from agent_gate.evidence.merkle import Frontier

    rng = random.Random(6962)
    for _ in range(100):
        size = rng.randrange(2, 200)
        leaves = [rng.randbytes(32) for _ in range(size)]
        tree = Tree(leaves)
        pruned = sorted(rng.sample(range(size), rng.randrange(0, size)))
        cuts = sorted(rng.sample(range(1, size + 1), rng.randrange(1, min(5, size + 1))))
        starts = dict(cover(pruned, cuts))
        frontier, at = Frontier(), 0
        while at < size:
            if at in starts:
                frontier.extend_piece(tree.subtree(at, at + (1 << starts[at])), starts[at])
                at += 1 << starts[at]
            else:
                frontier.append(leaves[at])
                at += 1
            if at in cuts:
                assert frontier.size == at and frontier.root() == tree.root(at)


def test_heads_root_folds_to_the_same_bytes_as_root_hash() -> None:
    rng = random.Random(31)
    folded, heads = HeadsRoot(), {}
    for _ in range(50):
        for _ in range(rng.randrange(0, 20)):
            task = rng.choice(["t\u00e9", "a", "b\"q", "z", *[f"task-{n}" for n in range(30)]])
            seq, digest = rng.randrange(1, 99), rng.randbytes(32).hex()
            folded.set(task, seq, digest)
            heads[task] = (seq, digest)
        assert folded.hexdigest() == root_hash((t, s, h) for t, (s, h) in heads.items())
        assert len(folded) == len(heads)


def test_a_batch_archived_before_subtrees_is_still_walked_leaf_by_leaf(
    db_url: str, keys: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger archived before revision 0017: no subtrees, no chain ends, a record
    without their keys. Verify walks its kept leaves against the record's root."""
    from agent_gate.evidence import archive as retention

    monkeypatch.setattr(retention, "_subtrees", lambda *args: [])
    for name in ("COUNT_KEY", "HASH_KEY", "HEADS_KEY"):
        monkeypatch.setattr(retention, name, f"unknown_{name}")
    archived(db_url, keys[0])
    engine = engine_of(db_url)
    with engine.begin() as conn:
        conn.execute(delete(ARCHIVED_HEADS))
    assert verify(db_url)["code"] == 0
    with engine.begin() as conn:
        first = conn.execute(select(AUDIT_PRUNED.c.id, AUDIT_PRUNED.c.leaf)
                             .order_by(AUDIT_PRUNED.c.id).limit(1)).one()
        conn.execute(update(AUDIT_PRUNED).where(AUDIT_PRUNED.c.id == first[0])
                     .values(leaf=_hex_flip(first[1])))
    engine.dispose()
    assert verify(db_url)["problem"]["kind"] == "tree"
