"""What of a call may be stored or shown: sealing, scrubbing, the keeping of results.

A result goes gate -> privacy -> ledger in a straight line: the gate hands what a
tool returned or raised here (``results.keep_result``), which applies the fields a
policy redacts (``redaction``: the rules ``policy.redaction`` declares, applied) and
cuts every redacted argument value out of it (``scrub``), and the ledger stores what
comes back. The stored form of a call's arguments is made here too
(``redaction.redact_arguments``). Redacted argument fields are
sealed, not stored in the clear (``seal``). Nothing here touches a database.

The room sits between the policy (whose redaction rules it applies) and the ledger
(which stores what it keeps): ``tests/test_layers.py``.
"""
