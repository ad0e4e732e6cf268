"""The grants world the grant tests share: a policy whose mail rule offers grants (a
count within a domain, an hour, five more calls) beside a refund rule that offers none,
and the two tools, each counting how often it really ran.

Why counted under a lock: the race tests run the tools from several threads, and a
grant spent twice shows up as one more run than the grant allows.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

from agent_gate import ToolRegistry

POLICY = """
version: 1
tools:
  send_email:
    effect: write
    rules:
      - id: mail-needs-a-person
        effect: approve
        approval:
          grants:
            - id: two-more-in-domain
              calls: 2
              when: [{arg: to, email_domain: [example.com]}]
            - id: for-an-hour
              for: 1h
            - {id: five-more, calls: 5}
  refund:
    effect: write
    rules:
      - id: refunds-need-a-person
        effect: approve
"""


def write_policy(directory: Path) -> Path:
    path = directory / "policy.yaml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def grant_tools(ran: Counter[str]) -> ToolRegistry:
    """``send_email`` counts a run under its recipient, ``refund`` under ``"refund"``."""
    lock = threading.Lock()
    tools = ToolRegistry()

    def send_email(to: str) -> str:
        with lock:
            ran[to] += 1
        return "sent"

    def refund(amount: int) -> str:
        with lock:
            ran["refund"] += 1
        return "refunded"

    tools.register(send_email, effect="write")
    tools.register(refund, effect="write")
    return tools
