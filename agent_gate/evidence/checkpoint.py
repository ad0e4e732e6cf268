"""C2SP tlog-checkpoint (c2sp.org/tlog-checkpoint): a tree head as note text.

Three lines: the origin (which log), the tree size in decimal, the root hash in
standard base64; extension lines may follow (this ledger writes none: the spec
recommends against them). Signed as a signed-note (``evidence.note``), it is what a
witness keeps and a verifier trusts.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from agent_gate.errors import EvidenceError
from agent_gate.evidence.note import OpenedNote, SignerKey, VerifierKey, open_note, sign_note

__all__ = ["TreeHead", "open_checkpoint"]


@dataclass(frozen=True, slots=True)
class TreeHead:
    """One log's tree at one size: what a signed checkpoint states."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        if not self.origin or "\n" in self.origin:
            raise EvidenceError("a checkpoint's origin must be one non-empty line")
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(),
                 *self.extensions]
        return "\n".join(lines) + "\n"

    def sign(self, signer: SignerKey) -> str:
        return sign_note(self.text, signer)

    @classmethod
    def parse(cls, text: str) -> TreeHead:
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
            raise EvidenceError("a checkpoint is at least three non-empty lines, each ending "
                                "with a newline")
        origin, size_text, root_text, *extensions = lines[:-1]
        if not size_text.isdigit() or not size_text.isascii() or (
            size_text != "0" and size_text.startswith("0")
        ):
            raise EvidenceError("a checkpoint's second line is not a tree size in decimal")
        try:
            root = base64.b64decode(root_text, validate=True)
        except (binascii.Error, ValueError):
            raise EvidenceError("a checkpoint's third line is not a base64 root hash") from None
        if len(root) != 32:
            raise EvidenceError("a checkpoint's root hash is not 32 bytes")
        return cls(origin, int(size_text), root, tuple(extensions))


def open_checkpoint(
    note: str, key: VerifierKey, *, origin: str | None = None
) -> tuple[TreeHead, OpenedNote]:
    """A signed checkpoint's tree head, once ``key``'s signature verified, and (when given)
    its origin is the one expected."""
    opened = open_note(note, [key])
    head = TreeHead.parse(opened.text)
    if origin is not None and head.origin != origin:
        raise EvidenceError("the checkpoint is of another log (its origin line differs)")
    return head, opened
