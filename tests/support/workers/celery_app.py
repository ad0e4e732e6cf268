"""A Celery application whose task makes one gated payment (``celery -A celery_app worker``).

Configured by the environment, so each test gets its own broker queue: ``AG_BROKER``
(an ``amqp://`` or ``redis://`` URL), ``AG_QUEUE``, ``AG_LEDGER``, ``AG_RESULTS`` (a
folder: each finished or failed task writes ``<order>.json`` there), ``AG_ON_IN_DOUBT``
(``fail``, ``retry`` or ``reconcile``), and those of ``support.engine_tools``
(``AG_OUTBOX``, ``AG_MARKS``, ``AG_HANG``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

from celery import Celery
from celery.signals import task_failure

from agent_gate.integrations.celery import TaskCalls, gated_task
from agent_gate.integrations.engines import CallLike, outcome_record
from support.engine_tools import HangingGate, hang_at, look_up_write, make_tools

POLICY = Path(__file__).resolve().parents[2] / "integrations" / "engines_policy.yaml"
QUEUE = os.environ["AG_QUEUE"]

app = Celery("agent_gate_engines_test", broker=os.environ["AG_BROKER"])
app.conf.update(
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    # Redis: an unacknowledged message goes back to its queue after a second (the
    # default is an hour), under keys of this test's own. An idle worker looks for such
    # messages every second: kombu's default is one look at start and then one every
    # 100 s (``unacked_restore_interval`` 10 s x ``unacked_restore_throttle`` 10), so
    # one look that missed left a killed worker's message undelivered past the tests'
    # 90 s. The look's mutex expires after 2 s, not 300, in case a worker dies in it.
    broker_transport_options={"visibility_timeout": 1, "unacked_key": f"{QUEUE}.unacked",
                              "unacked_index_key": f"{QUEUE}.unacked_index",
                              "unacked_mutex_key": f"{QUEUE}.unacked_mutex",
                              "unacked_mutex_expire": 2,
                              "unacked_restore_interval": 1,
                              "unacked_restore_throttle": 1},
)


def _result(order: str, record: dict[str, Any]) -> None:
    path = Path(os.environ["AG_RESULTS"]) / f"{order}.json"
    path.with_suffix(".tmp").write_text(json.dumps(record), encoding="utf-8")
    path.with_suffix(".tmp").replace(path)


def _reconcile(task_id: str, call: CallLike) -> str:
    return look_up_write(task_id, str(call["call_id"])).value


@gated_task(
    app,
    gate=lambda: HangingGate(make_tools(), os.environ["AG_LEDGER"], policy=POLICY),
    key=lambda order, tool, amount: f"order-{order}",
    on_in_doubt=os.environ.get("AG_ON_IN_DOUBT", "fail"),
    reconcile=_reconcile,
    retry_delay=0.2,
    max_retries=None,
    name="engines.pay",
)
def pay(calls: TaskCalls, order: str, tool: str, amount: int) -> str:
    hang_at("before-call")
    outcome = calls.execute({"name": tool, "arguments": {"to": "alice", "amount": amount}})
    hang_at("after-step")
    _result(order, outcome_record(outcome))
    return outcome.state.value


@task_failure.connect
def _failed(sender: Any = None, exception: BaseException | None = None,
            args: Any = None, **_: Any) -> None:
    _result(args[0], {"failed": type(exception).__name__,
                      "call_id": getattr(exception, "call_id", None)})
