"""Celery tasks behind a gate: ``gated_task`` (``pip install 'agent-gate[engines]'``).

    @gated_task(app, gate=lambda: Gate(tools, "postgresql+psycopg://..."),
                key=lambda order: f"refund-{order}", on_in_doubt="retry")
    def refund(calls: TaskCalls, order: str) -> str:
        outcome = calls.execute({"name": "refund", "arguments": {"order": order}})
        return outcome.state.value

Celery with ``acks_late`` runs a task *at least once*: a message whose worker died
before acknowledging it is delivered again (RabbitMQ at once, when the worker's
connection drops; Redis after its ``visibility_timeout``). The tasks ``gated_task``
makes acknowledge late and reject on a lost worker, so a crash never loses a task,
and route every call through the gate, so a redelivery never repeats a write:

- the gate's task id is stable across deliveries: ``key(*args, **kwargs)`` when given
  (so that the same business operation sent twice is one task), else Celery's task id
  (kept by redeliveries and by ``retry``), never a delivery tag;
- each call is named by its own ``call_id``, else by its place in the body
  (``call-1``, ``call-2``...: a body that makes its calls in a fixed order names them
  the same way on every delivery);
- a call that finished returns its recorded outcome; one whose worker died while the
  tool ran is *in doubt* (after the tool's own reconcile hook, if any, had its say),
  and the task does what ``on_in_doubt`` says: ``fail`` (raise ``CallInDoubt``: the task
  fails, nothing is sent again), ``retry`` (Celery's ``retry`` after ``retry_delay``
  seconds, within the task's ``max_retries``: an operator may settle the call
  meanwhile with ``agent-gate resolve``), or ``reconcile`` (the task's ``reconcile``
  function is asked what happened; its answer settles the call as
  ``Gate.resolve`` does and the call is carried on: run again only if it says the
  write did not happen);
- a call that waits for a person makes the task ``retry`` after ``retry_delay``
  seconds until it is answered (``on_waiting="retry"``), or hands the waiting outcome
  to the body (``on_waiting="return"``).

The gate is built in the worker process, once per process (``gate`` may be a ``Gate``
or a function returning one: a prefork worker's children each build their own).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from celery import Celery, Task

from agent_gate.errors import GateUsageError
from agent_gate.gate import Gate, Outcome
from agent_gate.integrations.engines import (
    CallInDoubt,
    CallLike,
    call_mapping,
    execute_when_free,
)
from agent_gate.ledger.states import CallState
from agent_gate.tools import Reconciliation

__all__ = [
    "CallInDoubt",
    "GateOptions",
    "GatedTask",
    "InDoubtAction",
    "TaskCalls",
    "WaitAction",
    "gated_task",
]

GateSource = Gate | Callable[[], Gate]
Reconcile = Callable[[str, CallLike], Reconciliation | str]
"""``reconcile(task_id, call)``: did this in-doubt call's write happen downstream?"""


class InDoubtAction(StrEnum):
    """What a task does with a call in doubt."""

    FAIL = "fail"
    RETRY = "retry"
    RECONCILE = "reconcile"


class WaitAction(StrEnum):
    """What a task does with a call that waits for a person."""

    RETRY = "retry"
    RETURN = "return"


@dataclass(frozen=True, slots=True)
class GateOptions:
    """What ``gated_task`` was told, kept on the task class as one value (a function
    set as a class attribute would be bound as a method)."""

    gate: GateSource
    key: Callable[..., str] | None = None
    on_in_doubt: InDoubtAction = InDoubtAction.FAIL
    on_waiting: WaitAction = WaitAction.RETRY
    retry_delay: float = 5.0
    reconcile: Reconcile | None = None
    patience: float | None = None


_gates: dict[tuple[str, int], Gate] = {}
_gates_lock = threading.Lock()


class GatedTask(Task):  # type: ignore[misc]  # Celery's Task is untyped
    """The base class of the tasks ``gated_task`` makes."""

    gated: GateOptions | None = None

    @property
    def gate_options(self) -> GateOptions:
        if self.gated is None:
            raise GateUsageError(f"task {self.name!r} was not made by gated_task")
        return self.gated

    def the_gate(self) -> Gate:
        """This process's gate for this task (built on first use, after a fork)."""
        source = self.gate_options.gate
        if isinstance(source, Gate):
            return source
        slot = (self.name, os.getpid())
        with _gates_lock:
            if slot not in _gates:
                _gates[slot] = source()
            return _gates[slot]

    def calls(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> TaskCalls:
        """The gated calls of this delivery, under the task's stable id."""
        key = self.gate_options.key
        task_id = key(*args, **kwargs) if key is not None else self.request.id
        if not isinstance(task_id, str) or not task_id:
            raise GateUsageError(f"task {self.name!r} has no stable id for the gate")
        return TaskCalls(self, task_id)


class TaskCalls:
    """The calls one task body makes, each through the gate at most once."""

    def __init__(self, task: GatedTask, task_id: str) -> None:
        self.task = task
        self.options = task.gate_options
        self.task_id = task_id
        self.gate = task.the_gate()
        self._made = 0

    def execute(self, call: CallLike) -> Outcome:
        """Run ``call`` unless the ledger says it ran, runs, or may not; see the module
        for what a call in doubt or waiting for a person does to the task."""
        self._made += 1
        named = call_mapping(call, f"call-{self._made}")
        patience = self.options.patience
        if patience is None:
            patience = 2 * self.gate.lease_ms / 1000
        try:
            outcome = execute_when_free(self.gate, self.task_id, named, patience=patience)
        except CallInDoubt as doubt:
            outcome = self._in_doubt(doubt, named, patience)
        if (outcome.state is CallState.AWAITING_APPROVAL
                and self.options.on_waiting is WaitAction.RETRY):
            raise self.task.retry(countdown=self.options.retry_delay)
        return outcome

    def _in_doubt(self, doubt: CallInDoubt, named: CallLike, patience: float) -> Outcome:
        action = self.options.on_in_doubt
        if action is InDoubtAction.RETRY:
            raise self.task.retry(countdown=self.options.retry_delay, exc=doubt)
        hook = self.options.reconcile
        if action is InDoubtAction.FAIL or hook is None:
            raise doubt
        verdict = hook(self.task_id, named)
        self.gate.resolve(doubt.call_id, as_=verdict, task_id=self.task_id,
                          by=f"celery:{self.task.name}", note="the task's reconcile function")
        return execute_when_free(self.gate, self.task_id, named, patience=patience)


def gated_task(
    app: Celery,
    *,
    gate: GateSource,
    key: Callable[..., str] | None = None,
    on_in_doubt: InDoubtAction | str = InDoubtAction.FAIL,
    on_waiting: WaitAction | str = WaitAction.RETRY,
    retry_delay: float = 5.0,
    reconcile: Reconcile | None = None,
    patience: float | None = None,
    **options: Any,
) -> Callable[[Callable[..., Any]], GatedTask]:
    """A Celery task of ``app`` whose body receives its ``TaskCalls`` first.

    ``options`` are Celery's own task options (``name``, ``max_retries``, ``queue``
    ...); ``acks_late`` and ``reject_on_worker_lost`` default to True, and a task
    that sets either to False is refused: it would lose a task whose worker died.
    """
    gated = GateOptions(gate, key, InDoubtAction(on_in_doubt), WaitAction(on_waiting),
                        retry_delay, reconcile, patience)
    if gated.on_in_doubt is InDoubtAction.RECONCILE and reconcile is None:
        raise GateUsageError("on_in_doubt='reconcile' needs a reconcile function")
    for late in ("acks_late", "reject_on_worker_lost"):
        if options.get(late, True) is not True:
            raise GateUsageError(f"a gated task keeps {late}=True: a lost worker's task runs again")

    def decorate(fn: Callable[..., Any]) -> GatedTask:
        @functools.wraps(fn)
        def run(self: GatedTask, *args: Any, **kwargs: Any) -> Any:
            return fn(self.calls(args, kwargs), *args, **kwargs)

        task: GatedTask = app.task(
            bind=True, base=GatedTask, acks_late=True, reject_on_worker_lost=True, gated=gated,
            **{"name": f"{fn.__module__}.{fn.__name__}", **options},
        )(run)
        return task

    return decorate
