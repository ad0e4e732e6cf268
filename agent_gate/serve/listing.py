"""The inbox's list of waiting calls: its filters as read from a URL, and back again.

One value, ``ListView``, is what a person's place in the list is: the filters (state,
tool, task, rule, age, search, only the calls their rights cover), the order and the
page (a keyset cursor: ``after`` or ``before`` a ``ref``). It is read from a query
string (every value checked, anything else ignored, so a hostile value reaches the
ledger only as a bound parameter and the page only escaped) and written back into one
(``href``), every reserved character encoded: the links to the next and previous
page, the filter links, and the ``back`` field every answer form carries, so that an
answer returns the person to the list where they were. ``back`` is never taken as a
URL: it is parsed as a query string and the list's URL is built again from it, so a
form cannot redirect anywhere else.

``etag``: the view and a cheap aggregate of the calls it filters (``inbox_mark``:
their count, the sums of their ids and versions, the newest change), hashed; the list
polls with ``If-None-Match`` and gets 304 while nothing changed, after that one
aggregate and no page read.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode

from agent_gate.ledger.states import CallState
from agent_gate.ledger.views.inbox import InboxQuery
from agent_gate.ledger.views.operators import Operator

__all__ = ["AGES", "STATES", "ListView", "etag"]

STATES: dict[str, tuple[CallState, ...]] = {
    "waiting": (CallState.AWAITING_APPROVAL,),
    "in_doubt": (CallState.IN_DOUBT,),
    "all": (CallState.AWAITING_APPROVAL, CallState.IN_DOUBT),
}
"""The state filter's values: what a person answers, settles, or both."""

AGES: dict[str, timedelta] = {
    "5m": timedelta(minutes=5), "1h": timedelta(hours=1), "1d": timedelta(days=1),
    "7d": timedelta(days=7)}
"""The age filter's values: calls waiting at least this long."""

PAGE_SIZES = (25, 50, 100, 200)
_TEXT = re.compile(r"[^\x00]{1,255}")
_MAX_REF = 2**31 - 1  # tool_calls.id is a 32-bit integer on PostgreSQL


def _text(value: str | None) -> str | None:
    return value if value and _TEXT.fullmatch(value) else None


def _ref(value: str | None) -> int | None:
    if value is None or not value.isascii() or not value.isdigit() or len(value) > 10:
        return None
    n = int(value)
    return n if 1 <= n <= _MAX_REF else None


@dataclass(frozen=True, slots=True)
class ListView:
    """Where a person is in the list: filters, order, page."""

    state: str = "waiting"
    tool: str | None = None
    task: str | None = None
    rule: str | None = None
    age: str | None = None
    q: str | None = None
    mine: bool = False
    answered: bool = False
    """Also the calls already approved that wait for a gate to run them."""
    sort: str = "oldest"
    after: int | None = None
    before: int | None = None
    limit: int = 50

    @classmethod
    def read(cls, params: Mapping[str, str]) -> ListView:
        """The view a query string names; a value that is not one of the allowed is
        left out (the list shows more, never something else)."""
        state = params.get("state", "waiting")
        age = params.get("age")
        sort = params.get("sort", "oldest")
        limit = params.get("limit", "")
        return cls(
            state=state if state in STATES else "waiting",
            tool=_text(params.get("tool")), task=_text(params.get("task")),
            rule=_text(params.get("rule")), age=age if age in AGES else None,
            q=_text((params.get("q") or "").strip()), mine=params.get("mine") == "1",
            answered=params.get("answered") == "1",
            sort=sort if sort in ("oldest", "newest") else "oldest",
            after=_ref(params.get("after")), before=_ref(params.get("before")),
            limit=int(limit) if limit in {str(n) for n in PAGE_SIZES} else 50)

    @classmethod
    def from_back(cls, back: str | None) -> ListView:
        """The view an answer form's ``back`` field names (a query string, or a whole
        list URL: only its query is read)."""
        text = (back or "")[:4000]
        _, _, query = text.partition("?") if "?" in text else ("", "", text)
        return cls.read(dict(parse_qsl(query, keep_blank_values=False)))

    def params(self, **changes: Any) -> dict[str, str]:
        view = replace(self, **changes)
        out: dict[str, str] = {}
        if view.state != "waiting":
            out["state"] = view.state
        for name in ("tool", "task", "rule", "age", "q"):
            value = getattr(view, name)
            if value:
                out[name] = value
        if view.mine:
            out["mine"] = "1"
        if view.answered:
            out["answered"] = "1"
        if view.sort != "oldest":
            out["sort"] = view.sort
        if view.after is not None:
            out["after"] = str(view.after)
        if view.before is not None:
            out["before"] = str(view.before)
        if view.limit != 50:
            out["limit"] = str(view.limit)
        return out

    def href(self, **changes: Any) -> str:
        """The list's URL for this view (with ``changes``), every value encoded."""
        query = urlencode(self.params(**changes))
        return "/inbox" + (f"?{query}" if query else "")

    def filtered(self, **changes: Any) -> str:
        """The URL of another filter: back to its first page."""
        return self.href(after=None, before=None, **changes)

    def query(self, op: Operator, now: datetime, *, roles: tuple[str, ...] = (),
              closed: tuple[tuple[tuple[str, ...] | None, str], ...] = (),
              limit: int | None = None) -> InboxQuery:
        """The ledger's query for this view; "only mine" (``mine``) is what ``op`` may
        answer (``InboxService.mine`` gives ``roles`` and ``closed``): the waiting calls
        of their ``approve`` tools and the calls in doubt of their ``resolve`` tools
        (each state by its own right, with both states shown too), no call escalated
        to a role outside ``roles`` (the roles the policy's ``operators:`` gives them),
        none a ``closed`` rule sent, filtered in the statement so that a page and its
        counts hold only those."""
        return InboxQuery(
            states=STATES[self.state], tool=self.tool, task_id=self.task, rule=self.rule,
            waiting_before=now - AGES[self.age] if self.age else None, search=self.q,
            tools_by_state=op.tools_by_state() if self.mine else None,
            roles=roles if self.mine else None,
            closed_rules=closed if self.mine else (), after=self.after,
            before=self.before,
            newest_first=self.sort == "newest", limit=limit or self.limit,
            answered=self.answered)


def etag(mark: str, view: ListView) -> str:
    """The list's entity tag: the view and the ``inbox_mark`` of the calls it filters
    (``InboxCounts.mark`` from a full read, ``inbox_mark`` alone for a poll). It changes
    when a call enters, leaves or changes, which is when a row or a count can."""
    shown = {"mark": mark, "view": view.params()}
    digest = hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()
    return f'"{digest[:32]}"'
