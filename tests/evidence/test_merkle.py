"""The Merkle tree against RFC 6962's published values and transparency-dev's proof vectors.

The roots below are the ones transparency-dev/merkle (testonly/constants.go) and
Certificate Transparency's reference implementation publish for the eight standard
leaves; the proof vectors are their JSON files, run unchanged (vectors/).
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest

from agent_gate.evidence.merkle import (
    EMPTY_ROOT,
    Frontier,
    Tree,
    leaf_hash,
    range_pieces,
    root_of,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).parent / "vectors" / "transparency-dev-merkle" / "testdata"

LEAVES = [bytes.fromhex(h) for h in (
    "", "00", "10", "2021", "3031", "40414243", "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
)]
ROOTS = [bytes.fromhex(h) for h in (
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]


def _b64(value: str | None) -> bytes:
    return base64.b64decode(value or "")


def _files(kind: str) -> list[Path]:
    return sorted((VECTORS / kind).rglob("*.json"))


def test_the_roots_of_the_standard_leaves_are_the_published_ones() -> None:
    hashes = [leaf_hash(d) for d in LEAVES]
    assert ROOTS[0] == EMPTY_ROOT
    for size in range(len(ROOTS)):
        assert root_of(hashes[:size]) == ROOTS[size]
        assert Tree(hashes[:size]).root() == ROOTS[size]
        frontier = Tree(hashes).frontier(size)
        assert frontier.root() == ROOTS[size]


@pytest.mark.parametrize("path", _files("inclusion"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_inclusion_vectors(path: Path) -> None:
    case = json.loads(path.read_text())
    ok = verify_inclusion(_b64(case["leafHash"]), case["leafIdx"], case["treeSize"],
                          [_b64(p) for p in case["proof"] or ()], _b64(case["root"]))
    assert ok is not case["wantErr"], case["desc"]


@pytest.mark.parametrize("path", _files("consistency"), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_consistency_vectors(path: Path) -> None:
    case = json.loads(path.read_text())
    ok = verify_consistency(case["size1"], case["size2"], _b64(case["root1"]),
                            _b64(case["root2"]), [_b64(p) for p in case["proof"] or ()])
    assert ok is not case["wantErr"], case["desc"]


def test_the_vectors_were_found() -> None:
    assert len(_files("inclusion")) > 50 and len(_files("consistency")) > 80


def test_every_proof_the_tree_makes_verifies_and_no_other_position_does() -> None:
    rng = random.Random(6962)
    hashes = [leaf_hash(rng.randbytes(rng.randrange(0, 40))) for _ in range(70)]
    tree = Tree(hashes)
    for size in range(1, 70):
        root = tree.root(size)
        assert root == root_of(hashes[:size])
        for index in range(size):
            proof = tree.inclusion_proof(index, size)
            assert verify_inclusion(hashes[index], index, size, proof, root)
            assert not verify_inclusion(hashes[index], (index + 1) % size, size, proof, root) \
                or hashes[index] == hashes[(index + 1) % size]
            assert not verify_inclusion(hashes[index], index, size, [*proof, root], root)
        for old in range(1, size + 1):
            proof = tree.consistency_proof(old, size)
            assert verify_consistency(old, size, tree.root(old), root, proof)
            if 0 < old < size:
                assert not verify_consistency(old, size, tree.root(old), hashes[0], proof)
                assert not verify_consistency(old, size, b"\xff" * 32, root, proof)


def test_the_frontier_grows_one_leaf_at_a_time_and_survives_a_round_trip() -> None:
    rng = random.Random(9162)
    hashes = [leaf_hash(rng.randbytes(8)) for _ in range(300)]
    frontier = Frontier()
    for size, leaf in enumerate(hashes, start=1):
        frontier.append(leaf)
        assert frontier.root() == root_of(hashes[:size])
        assert len(frontier.hashes) == size.bit_count()
        again = Frontier.from_text(size, frontier.to_text())
        assert again == frontier


def test_a_contiguous_range_is_proven_by_the_frontier_before_it_and_the_pieces_after() -> None:
    rng = random.Random(1)
    hashes = [leaf_hash(rng.randbytes(8)) for _ in range(100)]
    tree = Tree(hashes)
    for start, end in [(0, 100), (0, 1), (37, 64), (64, 65), (99, 100), (5, 77)]:
        frontier = tree.frontier(start)
        for leaf in hashes[start:end]:
            frontier.append(leaf)
        frontier.extend_pieces(tree.pieces(end))
        assert (frontier.size, frontier.root()) == (100, tree.root())
        assert len(range_pieces(end, 100)) <= 2 * 7
    dropped = tree.frontier(37)
    for leaf in hashes[37:64][:-1]:  # one leaf of the run left out
        dropped.append(leaf)
    with pytest.raises(ValueError):
        dropped.extend_pieces(tree.pieces(64))


def test_a_frontier_with_the_wrong_number_of_hashes_is_refused() -> None:
    with pytest.raises(ValueError, match="holds 2 hashes, not 1"):
        Frontier(3, [EMPTY_ROOT])
