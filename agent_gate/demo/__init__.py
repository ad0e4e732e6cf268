"""What ``agent-gate demo`` streams and runs: a transcript, harmless tools, a policy.

Kept in the package (not in ``examples/``) because the demo is a command of an
installed agent-gate, and ``agent-gate resume --tools agent_gate.demo.tools``
must find the same tools in a later process.
"""

from __future__ import annotations

from pathlib import Path

import agent_gate

__all__ = ["example_policy_path"]


def example_policy_path() -> Path:
    """``policies/example.yaml``: shipped in a wheel as ``agent_gate/_policies``.

    Looked up the way the ledger finds its migrations: next to the installed
    package first, then in the checkout the package was installed from
    (``pip install -e .``). One file, so the demo shows the policy the README
    and ``agent-gate policy explain`` talk about, not a copy that can drift.
    """
    package_dir = Path(agent_gate.__file__).resolve().parent
    candidates = (
        package_dir / "_policies" / "example.yaml",
        package_dir.parent / "policies" / "example.yaml",
    )
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        "the example policy is missing: looked for " + " and ".join(map(str, candidates))
    )
