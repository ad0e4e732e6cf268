"""Signed notes and checkpoints against the specifications' own examples and Go's vectors,
and checked by an independent verifier installed from PyPI (proofbundle)."""

from __future__ import annotations

import pytest

from agent_gate.errors import EvidenceError
from agent_gate.evidence.checkpoint import TreeHead, open_checkpoint
from agent_gate.evidence.note import SignerKey, VerifierKey, open_note, sign_note

# c2sp.org/signed-note, "Verifier keys / Example".
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n"
    "\u2014 example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXs"
    "YjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)
# golang.org/x/mod/sumdb/note, note_test.go TestSign (Ed25519 is deterministic).
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = ("If you think cryptography is the answer to your problem,\n"
           "then you don't know what your problem is.\n")
GO_NOTE = GO_TEXT + (
    "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKv"
    "qfqdngotpRZb6KE6RyyBwJnAM=\n"
)
# c2sp.org/tlog-checkpoint's example (its key is not published: parsed, not verified).
SPEC_CHECKPOINT_TEXT = (
    "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
)


def test_the_signed_note_spec_example_opens_with_its_key() -> None:
    opened = open_note(SPEC_NOTE, [VerifierKey.parse(SPEC_VKEY)])
    assert opened.text == "This is an example message.\n"
    assert opened.signed_by == ("example.com/foo",)


def test_go_sumdb_notes_signing_vector_is_reproduced_byte_for_byte() -> None:
    signer = SignerKey.parse(GO_SKEY)
    assert signer.text == GO_SKEY
    assert signer.verifier.text == GO_VKEY
    assert sign_note(GO_TEXT, signer) == GO_NOTE
    assert open_note(GO_NOTE, [VerifierKey.parse(GO_VKEY)]).text == GO_TEXT


def test_an_altered_note_or_another_key_is_refused() -> None:
    key = VerifierKey.parse(GO_VKEY)
    with pytest.raises(EvidenceError, match="does not verify"):
        open_note(GO_NOTE.replace("cryptography", "Cryptography"), [key])
    with pytest.raises(EvidenceError, match="no signature from the given key"):
        open_note(GO_NOTE, [VerifierKey.parse(SPEC_VKEY)])
    other = SignerKey.generate("PeterNeumann")  # same name, another key: another key ID
    forged = sign_note(GO_TEXT.replace("then", "than"), other)
    with pytest.raises(EvidenceError, match="no signature from the given key"):
        open_note(forged, [key])


def test_unknown_signatures_are_ignored_but_counted() -> None:
    witness = SignerKey.generate("witness.example/w1")
    both = GO_NOTE + sign_note(GO_TEXT, witness)[len(GO_TEXT) + 1:]
    opened = open_note(both, [VerifierKey.parse(GO_VKEY)])
    assert (opened.signed_by, opened.unknown) == (("PeterNeumann",), 1)


@pytest.mark.parametrize("text", [
    "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TX",  # key changed
    "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # id changed
    "Peter Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # space
    "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown type
    "PeterNeumann+c74f20a3",
])
def test_mangled_verifier_keys_are_refused(text: str) -> None:
    with pytest.raises(EvidenceError):
        VerifierKey.parse(text)


def test_a_checkpoint_round_trips_and_the_spec_example_parses() -> None:
    head = TreeHead.parse(SPEC_CHECKPOINT_TEXT)
    assert (head.origin, head.size, head.root.hex()[:8]) == (
        "example.com/behind-the-sofa", 20852163, "0ac5186a")
    assert head.text == SPEC_CHECKPOINT_TEXT
    signer = SignerKey.generate("example.com/behind-the-sofa")
    note = head.sign(signer)
    assert open_checkpoint(note, signer.verifier)[0] == head
    with pytest.raises(EvidenceError, match="another log"):
        open_checkpoint(note, signer.verifier, origin="example.com/other")
    for bad in ("x\n01\n" + SPEC_CHECKPOINT_TEXT.split("\n")[2] + "\n", "x\n1\nAAAA\n", "x\n1\n"):
        with pytest.raises(EvidenceError):
            TreeHead.parse(bad)


def test_an_independent_verifier_accepts_our_checkpoints_and_we_accept_its() -> None:
    proofbundle = pytest.importorskip("proofbundle.checkpoint")
    signer = SignerKey.generate("ledger.example/agent-gate")
    head = TreeHead("ledger.example/agent-gate", 5, bytes(range(32)))
    theirs = proofbundle.verify_checkpoint(head.sign(signer), signer.verifier.text)
    assert theirs["ok"] is True
    assert (theirs["origin"], theirs["tree_size"]) == (head.origin, head.size)
    forged = head.sign(signer).replace("\n5\n", "\n6\n")
    assert proofbundle.verify_checkpoint(forged, signer.verifier.text)["ok"] is False
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from proofbundle.checkpoint import sign_checkpoint

    private = Ed25519PrivateKey.from_private_bytes(signer.seed)
    their_note = sign_checkpoint(head.origin, 7, head.root, private, signer.name)
    assert open_checkpoint(their_note, signer.verifier)[0] == TreeHead(head.origin, 7, head.root)

