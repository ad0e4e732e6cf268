"""RFC 6962 / RFC 9162 Merkle tree hashes, inclusion and consistency proofs: pure functions.

Hashes are SHA-256, domain-separated as RFC 9162 section 2.1.1 says: a leaf is
``SHA-256(0x00 || data)``, an interior node ``SHA-256(0x01 || left || right)``, and the
empty tree ``SHA-256("")``, so a leaf can never be passed off as a node. ``MTH(D[n])``
splits at ``k``, the largest power of two below ``n``.

What each part costs (``n`` leaves):

* ``Frontier`` (the compact range ``[0, n)``: one hash per set bit of ``n``, at most 64):
  ``append`` is O(1) amortized, O(log n) at worst; ``root`` is O(log n). A checkpoint
  stores its frontier, so the next one hashes only the entries added since: O(new + log n).
* ``Tree`` holds every level of the tree over given leaf hashes (2n hashes, O(n) to build);
  after that a subtree hash, an inclusion proof or a consistency proof is O(log n).
* ``verify_inclusion`` / ``verify_consistency`` (RFC 9162 sections 2.1.3.2 and 2.1.4.2):
  O(log n) hashes, no tree needed.
* ``range_pieces`` and ``Frontier.extend_pieces``: the aligned perfect subtrees that cover
  ``[b, n)``, at most 2 log n of them, so a contiguous run of leaves ``[a, b)`` is proven
  complete and in place by the frontier at ``a``, the leaves and these pieces.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "EMPTY_ROOT",
    "Frontier",
    "Tree",
    "leaf_hash",
    "node_hash",
    "range_pieces",
    "root_of",
    "verify_consistency",
    "verify_inclusion",
]

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The hash of the empty tree (RFC 9162: ``MTH({}) = SHA-256()``)."""

_LEAF = b"\x00"
_NODE = b"\x01"


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``: one leaf."""
    return hashlib.sha256(_LEAF + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: one interior node."""
    return hashlib.sha256(_NODE + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two strictly below ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


@dataclass(slots=True)
class Frontier:
    """The compact range ``[0, size)``: the roots of the perfect subtrees that ``size``'s
    set bits name, largest (leftmost) first. Enough to compute the root and to go on
    appending, which is why a checkpoint keeps it."""

    size: int = 0
    hashes: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.size < 0 or len(self.hashes) != self.size.bit_count():
            raise ValueError(
                f"a frontier of {self.size} leaves holds {self.size.bit_count()} hashes, "
                f"not {len(self.hashes)}"
            )

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash at position ``size`` (``extend_piece`` at level 0, inlined:
        a verify appends every entry of the trail)."""
        bits = self.size
        hashes = self.hashes
        while bits & 1:
            leaf = hashlib.sha256(_NODE + hashes.pop() + leaf).digest()
            bits >>= 1
        hashes.append(leaf)
        self.size += 1

    def extend_piece(self, digest: bytes, level: int) -> None:
        """Add a perfect subtree of ``2**level`` leaves whose root is ``digest`` at position
        ``size``, which must be a multiple of its width (an aligned piece)."""
        width = 1 << level
        if self.size % width:
            raise ValueError(f"a piece of {width} leaves cannot start at leaf {self.size}")
        bits = self.size >> level
        while bits & 1:
            digest = node_hash(self.hashes.pop(), digest)
            bits >>= 1
        self.hashes.append(digest)
        self.size += width

    def extend_pieces(self, pieces: Iterable[tuple[int, bytes]]) -> None:
        for level, digest in pieces:
            self.extend_piece(digest, level)

    def root(self) -> bytes:
        """``MTH(D[0:size])``: the pieces folded from the right (the RFC's split)."""
        if not self.hashes:
            return EMPTY_ROOT
        digest = self.hashes[-1]
        for left in reversed(self.hashes[:-1]):
            digest = node_hash(left, digest)
        return digest

    def copy(self) -> Frontier:
        return Frontier(self.size, list(self.hashes))

    def to_text(self) -> str:
        """The hashes as hex, comma-separated (how a checkpoint row keeps them)."""
        return ",".join(h.hex() for h in self.hashes)

    @classmethod
    def from_text(cls, size: int, text: str | None) -> Frontier:
        hashes = [bytes.fromhex(h) for h in text.split(",")] if text else []
        if any(len(h) != 32 for h in hashes):
            raise ValueError("a frontier hash is not 32 bytes")
        return cls(size, hashes)


def root_of(leaves: Iterable[bytes]) -> bytes:
    """``MTH`` over leaf hashes, in one pass and O(log n) memory."""
    frontier = Frontier()
    for leaf in leaves:
        frontier.append(leaf)
    return frontier.root()


class Tree:
    """Every level of the tree over ``leaves`` (leaf hashes), built once in O(n): the
    prover's side. Perfect aligned subtrees are looked up; the ragged right edge is
    hashed on demand (O(log n) per request)."""

    __slots__ = ("levels",)

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.levels: list[list[bytes]] = [list(leaves)]
        level = self.levels[0]
        while len(level) > 1:
            level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
            self.levels.append(level)

    @property
    def size(self) -> int:
        return len(self.levels[0])

    def subtree(self, lo: int, hi: int) -> bytes:
        """``MTH(D[lo:hi])`` for ``lo`` aligned to the range's RFC split (every range the
        RFC's recursions ask for is)."""
        n = hi - lo
        if n <= 0:
            return EMPTY_ROOT
        if n & (n - 1) == 0 and lo % n == 0:
            return self.levels[n.bit_length() - 1][lo // n]
        k = _split(n)
        return node_hash(self.subtree(lo, lo + k), self.subtree(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        return self.subtree(0, self.size if size is None else size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """``PATH(index, D[0:size])`` (RFC 9162 section 2.1.3.1), leaf to root."""
        size = self.size if size is None else size
        if not 0 <= index < size <= self.size:
            raise ValueError(f"no leaf {index} in a tree of {size}")
        path: list[bytes] = []
        lo, hi = 0, size
        while hi - lo > 1:
            k = _split(hi - lo)
            if index < lo + k:
                path.append(self.subtree(lo + k, hi))
                hi = lo + k
            else:
                path.append(self.subtree(lo, lo + k))
                lo += k
        path.reverse()
        return path

    def consistency_proof(self, old: int, new: int | None = None) -> list[bytes]:
        """``PROOF(old, D[0:new])`` (RFC 9162 section 2.1.4.1); empty when ``old`` is 0
        or equal to ``new``."""
        new = self.size if new is None else new
        if not 0 <= old <= new <= self.size:
            raise ValueError(f"no consistency proof from {old} to {new} leaves")
        if old in (0, new):
            return []
        path: list[bytes] = []
        lo, hi, whole = 0, new, True
        m = old
        while m != hi - lo:
            k = _split(hi - lo)
            if m <= k:
                path.append(self.subtree(lo + k, hi))
                hi = lo + k
            else:
                path.append(self.subtree(lo, lo + k))
                lo, m, whole = lo + k, m - k, False
        if not whole:
            path.append(self.subtree(lo, hi))
        path.reverse()
        return path

    def frontier(self, size: int) -> Frontier:
        """The compact range ``[0, size)`` as a checkpoint would have stored it."""
        return Frontier(size, [
            self.subtree(start, start + width) for start, width in _decompose(0, size)
        ])

    def pieces(self, start: int, size: int | None = None) -> list[tuple[int, bytes]]:
        """``range_pieces(start, size)`` with their hashes: what proves ``[start, size)``."""
        size = self.size if size is None else size
        return [(width.bit_length() - 1, self.subtree(lo, lo + width))
                for lo, width in range_pieces(start, size)]


def _decompose(lo: int, hi: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` as aligned perfect subtrees, left to right: each the widest one that
    is aligned at its start and fits (a frontier's pieces when ``lo`` is 0)."""
    out: list[tuple[int, int]] = []
    while lo < hi:
        width = lo & -lo if lo else 1 << ((hi - lo).bit_length() - 1)
        while lo + width > hi:
            width >>= 1
        out.append((lo, width))
        lo += width
    return out


def range_pieces(start: int, size: int) -> list[tuple[int, int]]:
    """The aligned perfect subtrees ``(first leaf, width)`` covering ``[start, size)``:
    appended to a frontier of ``start`` leaves they give the tree of ``size`` leaves."""
    if not 0 <= start <= size:
        raise ValueError(f"no range from leaf {start} to {size}")
    return _decompose(start, size)


def _hashes(*values: bytes) -> bool:
    return all(len(v) == 32 for v in values)


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """RFC 9162 section 2.1.3.2: whether ``leaf`` is leaf ``index`` of the tree of ``size``
    leaves whose root is ``root``. A proof one hash too long or too short fails, and so
    does any hash that is not 32 bytes."""
    if not 0 <= index < size or not _hashes(leaf, root, *proof):
        return False
    fn, sn = index, size - 1
    digest = leaf
    for sibling in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            digest = node_hash(sibling, digest)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            digest = node_hash(digest, sibling)
        fn >>= 1
        sn >>= 1
    return sn == 0 and digest == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 section 2.1.4.2: whether the tree of ``new_size`` leaves (``new_root``)
    extends the tree of ``old_size`` leaves (``old_root``) without changing it. From the
    empty tree nothing is proven (every tree extends it), so ``old_size`` 0 fails, as in
    transparency-dev's verifier."""
    if not 1 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if not proof or not _hashes(old_root, new_root, *proof):
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0
