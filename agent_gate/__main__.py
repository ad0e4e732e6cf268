"""``python -m agent_gate`` runs the same command as the ``agent-gate`` script."""

from agent_gate.cli import main

main()
