"""Evidence that leaves the box: the audit trail as a transparency log.

The formats are pure and shared by the writer and any verifier: ``merkle`` (RFC 6962 /
RFC 9162 trees and proofs), ``note`` (C2SP signed-note, Ed25519) and ``checkpoint``
(C2SP tlog-checkpoint). Nothing is imported here, so the ledger can use the formats
without pulling in what sits above it.
"""
