"""A sans-IO decoder for ``text/event-stream``: bytes in, events out.

Theory of operation
-------------------
The WHATWG "event stream interpretation" is defined on decoded text, but every
character it cares about (CR, LF, ``:``, space, NUL, the field names) is ASCII,
and in UTF-8 no byte of a multi-byte sequence is ever an ASCII byte. So the
decoder frames on *bytes* and decodes only what it hands out (a field value at
dispatch), with ``errors="replace"``. That is exactly equivalent to decoding the
stream first: an incomplete or invalid sequence before a line ending becomes
U+FFFD either way, and a character split across two reads is never split,
because reads are joined before a line is cut out of them.

Two paths
---------
The short path (``feed``) takes almost every read of a real stream. It keeps
the bytes after the last blank line as a *tail*, uninterpreted; a read is
appended to it, the result is cut once at its last blank line (one ``rfind``),
and everything before the cut is whole events (``_dispatch``). A run of events
that all have the shape providers send (``event:`` line or none, one ``data: ``
line, the blank line) is checked exactly and built by C-level calls alone
(``split``, strided slices, ``min``/``max``, ``map``): no Python bytecode per
event, about 250 per read. Any other text goes to the tokenizer below. A read
with a CR takes the same path: its blank line is cut at ``\\n\\r\\n`` and its
lines by ``splitlines`` (CR, LF and CRLF, as the spec says); the tail stays
raw, so a CR at the end of one read and an LF at the start of the next meet
again in the next buffer. Lone CRs and mixed ends there fall back below.

The line machinery (``_feed``, ``_consume``, ``_interpret``) takes the rest: the
first read (a BOM may be split), a tail that holds a complete blank line,
comment or ``retry`` line (which act as soon as their line ends), a read with
mixed line ends or lone CRs in its events, reads near a limit, and a tail that
has grown longer than both the read that would extend it and ``_TAIL_SLACK``.
It hands back to the short path as soon as what it holds fits in that bound,
and no CR it took waits for its LF. Its tokenizer is one C-level ``findall``; a
big text that is one event skips it (``_one_big_event``).

Both paths end in the same place: ``_EventAssembler``, the base class, holds
the WHATWG field rules and the event being assembled, on whole LF-terminated
lines; ``SSEDecoder`` adds the byte framing (tail, pending line, held lines,
BOM, CR) and the public surface.

Complexity bound
----------------
The short path appends a read to the tail only while the tail is no longer
than the read or than ``_TAIL_SLACK`` (1 KiB, a constant), so each read copies
and scans at most twice its own size plus 1 KiB (the concatenation, the
``rfind``, the checks on the tail), and each byte enters the dispatched text
exactly once, where ``split``/``splitlines``/``decode`` cost O(its length) and
``min``/``max`` O(its lines). The constant costs less than the Python work
every read does anyway, and spares the line machinery the common read that is
shorter than the partial event before it. A longer tail goes to the line
machinery, which looks for line terminators only in the new read (``rfind``, C
speed), keeps an unterminated line as a list of pieces joined once when it
completes, and holds back at most as many bytes of an unfinished event as the
current read brought. Every byte is therefore copied and scanned a bounded
number of times whatever the chunking (at most about ``_TAIL_SLACK`` times, in
reads of one byte each, which cost that much in Python anyway): O(n) in the
bytes fed, with no Python loop per character, and on the short path none per
event either.

Memory is bounded by the limits: the tail by twice ``_max_fast`` (the slack is
capped by it too), which is at most half of ``min(max_line_bytes,
max_event_bytes)`` (so no line or event on the short path can exceed a limit
unseen); the pending partial line by ``max_line_bytes`` (checked on every
append); the data of the event being assembled by ``max_event_bytes``. A
violation raises ``SSELimitExceeded``, after which the decoder refuses further
input (h11's ERROR state).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from enum import Enum
from itertools import repeat
from operator import itemgetter

from agent_gate._speedups import PURE_PYTHON
from agent_gate.errors import SSELimitExceeded, SSEStateError
from agent_gate.sse.event import ServerSentEvent, StreamEnd

_BOM = b"\xef\xbb\xbf"
_CR = 13
_LF = 10
_COLON = 58
_LINE_END = re.compile(rb"\r\n|\r|\n")
_TYPE_CACHE_SIZE = 64  # distinct event types decoded once; providers use a few dozen
_after_data = itemgetter(slice(len(b"data: "), None))  # line -> its value, as a C call
_new_tuple = tuple.__new__  # builds a ServerSentEvent from a 3-tuple, as a C call
_BIG_TEXT = 64 * 1024  # from this size on, a lone event skips the tokenizer
_TAIL_SLACK = 1024  # a tail this short takes the short path after any read

# The shortcuts, each beside the rules it must agree with (``sse._reference``
# checks both): off with AGENT_GATE_PURE_PYTHON=1, and then every read takes the
# line machinery (``_feed``, ``_consume``, ``_interpret``) alone.
_SHORT_PATH = not PURE_PYTHON
"""``feed``'s tail framing (and with it ``_dispatch``'s bulk runs)."""
_BULK_RUNS = not PURE_PYTHON
"""``_dispatch`` builds a run of common events with C-level calls only."""
_BIG_EVENT = not PURE_PYTHON
"""``_interpret`` cuts one big common event with ``find`` (``_one_big_event``)."""

DEFAULT_MAX_LINE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_STREAM_BYTES = 256 * 1024 * 1024


class DecoderState(Enum):
    """Where the decoder is in the life of one stream."""

    START = "start"
    """Nothing but a possible prefix of the BOM has arrived."""
    STREAMING = "streaming"
    ENDED = "ended"
    """``end()`` was called."""
    ERROR = "error"
    """A limit was exceeded; the stream cannot be trusted any further."""


class _EventAssembler:
    """The WHATWG "process the field" rules and event assembly, on whole lines.

    What is remembered between lines (the data, type and ID buffers, the
    counts, the caches of event types) and the code that reads complete
    LF-terminated text into events: the tokenizer path (``_interpret``), the
    big-event shortcut (``_one_big_event``) and the ``max_event_bytes`` error.
    It never sees a read or a partial line: ``SSEDecoder`` frames the bytes and
    hands whole lines here, with every line end made LF. A base class, not a
    helper object, so that the framing's shortcuts (``_dispatch``'s bulk runs,
    ``end``) reach this state as plain slots of ``self``, with no lookup
    through another object per read.
    """

    __slots__ = (
        "_comments",
        "_data",
        "_data_bytes",
        "_etype",
        "_events",
        "_id_buf",
        "_last_id",
        "_max_event",
        "_name_of",
        "_names",
        "_retry",
        "_tokenize",
        "_types",
    )

    def __init__(self, max_event_bytes: int) -> None:
        self._max_event = max_event_bytes
        self._data: list[bytes] = []  # data values of the event being assembled
        self._data_bytes = 0  # sum of len(value) + 1 over the buffered data lines
        self._etype = b""
        self._id_buf = ""  # the spec's "last event ID buffer"
        self._last_id = ""  # the spec's "last event ID string", set at dispatch
        self._retry: int | None = None
        self._events = 0
        self._comments = 0
        self._types: dict[bytes, str] = {}
        self._names = _TypeNames()
        self._name_of = self._names.__getitem__  # bound once: it is mapped over every read
        self._tokenize = _tokenizer(max_event_bytes).findall

    def _one_big_event(self, text: bytes, out: list[ServerSentEvent]) -> bool:
        """Dispatch ``text`` if it is one event: ``event:`` line (or none), one
        ``data: `` line, the blank line, in a clean state; else change nothing.

        For a big event, the tokenizer's byte-by-byte scan and the copy of the
        data group cost more than the event's other work together, and the
        copy is one more buffer of the event's size: here ``find`` (memchr)
        cuts the two lines and the value is decoded straight from the text.
        """
        if self._data or self._etype:
            return False
        if text[:6] == b"event:":
            pos = text.find(b"\n") + 1
            try:
                name = self._names[text[: pos - 1]]
            except KeyError:
                return False
        else:
            pos = 0
            name = "message"
        end = text.find(b"\n", pos)
        if (
            text[pos : pos + 6] != b"data: "
            or end != len(text) - 2
            or end - pos - 6 > self._max_event
        ):
            return False
        last_id = self._last_id = self._id_buf
        data = str(memoryview(text)[pos + 6 : end], "utf-8", "replace")
        out.append(ServerSentEvent(name, data, last_id))
        self._events += 1
        return True

    def _interpret(
        self, text: bytes, head: bytes, head_start: int, out: list[ServerSentEvent]
    ) -> None:
        """Interpret complete LF-terminated lines: "process the field" and dispatch.

        One C-level ``findall`` cuts ``text`` into tokens (see ``_tokenizer``):
        either a whole common event (an optional ``event:`` line, one ``data:``
        line, the blank line) or one line of any kind. A common event met in a
        clean state is dispatched with a handful of operations; everything else
        takes the line-by-line path through the full rules, which is also
        correct for a common event that follows buffered fields. ``head`` and
        ``head_start`` only locate a line when a limit is exceeded.
        """
        if _BIG_EVENT and len(text) >= _BIG_TEXT and self._one_big_event(text, out):
            return
        data = self._data
        data_size = self._data_bytes  # sum of len(value) + 1 over data lines
        data_limit = self._max_event + 1
        etype = self._etype
        id_buf = self._id_buf
        last_id = self._last_id
        events = self._events
        types = self._types
        append = out.append
        make = tuple.__new__
        tokens = self._tokenize(text)
        try:
            for token in tokens:
                has_type, raw_type, value, line, newline = token
                if not newline:
                    # A whole event: [event line] data line, blank line.
                    last_id = id_buf
                    if not data and not etype:
                        if raw_type:
                            name = types.get(raw_type)
                            if name is None:
                                name = raw_type.decode("utf-8", "replace")
                                if len(types) < _TYPE_CACHE_SIZE:
                                    types[raw_type] = name
                        else:
                            name = "message"
                        append(
                            make(
                                ServerSentEvent,
                                (name, value.decode("utf-8", "replace"), last_id),
                            )
                        )
                        events += 1
                        continue
                    # It follows buffered fields: its lines join them, and the
                    # blank line dispatches them all below.
                    if has_type:
                        etype = raw_type
                    data_size += len(value) + 1
                    if data_size > data_limit:
                        raise self._event_too_big(head, head_start, tokens, token, 1, events)
                    data.append(value)
                elif line:
                    field, _colon, value = line.partition(b":")
                    if not field:
                        self._comments += 1  # a line starting with ":" is a comment
                        continue
                    if value.startswith(b" "):
                        value = value[1:]
                    if field == b"data":
                        data_size += len(value) + 1
                        if data_size > data_limit:
                            raise self._event_too_big(head, head_start, tokens, token, 0, events)
                        data.append(value)
                    elif field == b"event":
                        etype = value
                    elif field == b"id":
                        if 0 not in value:
                            id_buf = value.decode("utf-8", "replace")
                    elif field == b"retry" and value.isdigit():  # ASCII only, for bytes
                        self._retry = int(value)
                    # any other field name is ignored, as the spec requires
                    continue
                else:
                    # A blank line dispatches: the ID buffer becomes the last
                    # event ID even without data; type and data always reset.
                    last_id = id_buf
                    if not data:
                        etype = b""
                        continue
                # Dispatch the buffered event.
                payload = data[0] if len(data) == 1 else b"\n".join(data)
                append(
                    make(
                        ServerSentEvent,
                        (
                            types.get(etype) or etype.decode("utf-8", "replace")
                            if etype
                            else "message",
                            payload.decode("utf-8", "replace"),
                            last_id,
                        ),
                    )
                )
                events += 1
                data.clear()
                data_size = 0
                etype = b""
        finally:
            self._data_bytes = data_size
            self._etype = etype
            self._id_buf = id_buf
            self._last_id = last_id
            self._events = events

    def _event_too_big(
        self,
        head: bytes,
        head_start: int,
        tokens: list[tuple[bytes, ...]],
        token: tuple[bytes, ...],
        extra: int,
        events: int,
    ) -> SSELimitExceeded:
        """The ``max_event_bytes`` error for the data line of ``token`` (error path only;
        ``extra`` as in ``_line_number``)."""
        offset = _line_offset(head, head_start, _line_number(tokens, token, extra))
        return SSELimitExceeded("max_event_bytes", self._max_event, offset, events)


class SSEDecoder(_EventAssembler):
    """Feed it the bytes of one stream in any split; read whole events back.

    Limits are per stream and separately configurable: ``max_line_bytes`` (one
    line, terminator excluded), ``max_event_bytes`` (the data of one event: the
    ``data`` values plus the LF joining them), ``max_stream_bytes`` (everything
    fed, BOM included).
    """

    __slots__ = (
        "_fast",
        "_held",
        "_held_start",
        "_line_start",
        "_max_fast",
        "_max_line",
        "_max_stream",
        "_pending",
        "_pending_len",
        "_probe",
        "_received",
        "_skip_lf",
        "_slack",
        "_state",
        "_tail",
        "_tail_start",
    )

    def __init__(
        self,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_stream_bytes: int = DEFAULT_MAX_STREAM_BYTES,
    ) -> None:
        for name, value in (
            ("max_line_bytes", max_line_bytes),
            ("max_event_bytes", max_event_bytes),
            ("max_stream_bytes", max_stream_bytes),
        ):
            if value < 1:
                raise ValueError(f"{name} must be a positive number of bytes")
        super().__init__(max_event_bytes)
        self._max_line = max_line_bytes
        self._max_stream = max_stream_bytes
        self._state = DecoderState.START
        self._probe = b""  # bytes that may still turn out to be the BOM
        self._received = 0  # bytes fed, the BOM included
        self._line_start = 0  # stream offset of the first pending byte
        self._pending: list[bytes] = []  # pieces of the unterminated line
        self._pending_len = 0
        self._held = b""  # complete lines of an unfinished event, not yet interpreted
        self._held_start = 0
        self._skip_lf = False  # the last read ended in CR: a leading LF is its CRLF
        # Fast framing (see ``feed``): ``_tail`` holds the bytes after the last
        # blank line, not yet interpreted, starting at stream offset ``_tail_start``.
        self._fast = False
        self._tail = b""
        self._tail_start = 0
        # A read of at most this many bytes, with a tail no longer than itself,
        # keeps every line and every event's data within the limits.
        self._max_fast = min(max_line_bytes, max_event_bytes) // 2
        self._slack = min(_TAIL_SLACK, self._max_fast)

    # -- public state -------------------------------------------------------

    @property
    def state(self) -> DecoderState:
        return self._state

    @property
    def last_event_id(self) -> str:
        """The ID to send as ``Last-Event-ID`` on reconnect ("" if none).

        Updated when a block is dispatched (even one without data), never by a
        block the stream did not finish: resuming after an event that was never
        received would skip it.
        """
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The server's reconnection time in milliseconds, if it sent one."""
        return self._retry

    @property
    def events_dispatched(self) -> int:
        return self._events

    @property
    def bytes_received(self) -> int:
        return self._received

    @property
    def comments(self) -> int:
        """Comment lines seen: heartbeats, which prove the connection, not progress."""
        return self._comments

    # -- input --------------------------------------------------------------

    def feed(self, chunk: bytes | bytearray | memoryview) -> list[ServerSentEvent]:
        """Consume the next bytes of the stream; return the events they complete.

        The common read takes a short path: the tail left by the last read (the
        bytes after its last blank line, raw) plus this read are cut once, at
        their last blank line; whatever precedes it is whole events, interpreted
        at once (``_dispatch``), and the rest becomes the new tail. Without a CR
        a blank line is ``\\n\\n``; with one, the stream is taken to be CRLF and
        a blank line is ``\\n\\r\\n`` (a line end, then an empty line that ends
        with CRLF). The tail must then hold no complete blank line, comment or
        ``retry`` line, since those act as soon as their line ends: its lines
        (``splitlines`` cuts at CR, LF and CRLF, as the spec does) must all
        start with a byte from ``;`` to ``q``, which ``min`` and ``max`` check in
        C. That keeps out empty lines, ``:`` and ``retry``; it also sends a few
        harmless lines (unknown fields) the long way, which only costs time.
        A CR at the very end of the tail ends its line whatever follows, and
        stays raw, so a following LF joins it in the next read's buffer.

        Anything else (the first read, a tail longer than both the read and
        ``_TAIL_SLACK``, a read near a limit, a tail that fails the check) goes
        through the line machinery.
        """
        tail = self._tail
        if (
            self._fast
            and chunk.__class__ is bytes
            and (size := len(chunk)) <= self._max_fast
            and ((kept := len(tail)) <= size or kept <= self._slack)
            and self._received + size <= self._max_stream
        ):
            start = self._tail_start
            self._received += size
            buf = tail + chunk  # no copy when the tail is empty
            cr = _CR in buf  # an int: ``bytes in bytes`` raises and clears a TypeError first
            if cr:
                end = buf.rfind(b"\n\r\n") + 3  # 2 when there is none
                if end < 3:
                    end = 0
            else:
                end = buf.rfind(b"\n\n") + 2  # 1 when there is none
                if end < 2:
                    end = 0
            tail = buf[end:]
            if tail:
                lines = tail.splitlines()
                if min(lines) < b";" or max(lines) >= b"r":
                    return self._slow(buf, start, size)
            self._tail = tail
            if not end:
                return []
            self._tail_start = start + end
            return self._dispatch(buf[:end], start, cr)
        return self._feed(chunk)

    def _slow(self, buf: bytes, start: int, size: int) -> list[ServerSentEvent]:
        """Hand the tail plus this read (``buf``, at ``start``) to the line machinery."""
        self._fast = False
        self._tail = b""
        out = self._lines(buf, start)
        self._resume(size)
        return out

    def _dispatch(self, head: bytes, start: int, cr: bool) -> list[ServerSentEvent]:
        """Interpret ``head``: whole events from a line start, at stream offset ``start``.

        ``head`` ends with LF. Without ``cr`` every line of it ends with LF;
        with ``cr`` it holds CRs too, and ``splitlines`` cuts its lines (at CR,
        LF and CRLF alike: the final LF leaves no CR waiting for its LF).

        A run of events that all have one shape, ``event:`` line (or none) then
        one ``data: `` line then the blank line, which is what providers send,
        is checked and built by C-level calls only: one ``split``, slices with a
        stride, ``min``, ``max`` and ``map``s, no Python bytecode per event. The
        checks are exact: blank positions empty, every head an ``event:`` line
        (``_TypeNames``), and every data position a line from ``data: `` to
        ``data:!`` (in byte order), which are exactly the lines that start with
        ``data: ``. Anything else takes ``_interpret``, and so does the first
        event when its fields began in an earlier read.
        """
        if _BULK_RUNS and not self._data and not self._etype:
            if cr:
                lines = head.splitlines()
                n = len(lines)
            else:
                lines = head.split(b"\n")
                n = len(lines) - 1  # what follows the final line end is b""
            names: Iterable[str]
            if lines[0][:6] == b"event:":
                count, rest = divmod(n, 3)
                blanks = lines[2:n:3]
                values = lines[1:n:3]
                names = map(self._name_of, lines[:n:3])  # KeyError: not an ``event:`` line
            else:
                count, rest = divmod(n, 2)
                blanks = lines[1:n:2]
                values = lines[:n:2]
                names = repeat("message")
            if (
                not rest
                and not any(blanks)
                and min(values) >= b"data: "
                and max(values) < b"data:!"
            ):
                last_id = self._id_buf
                datas = map(bytes.decode, map(_after_data, values))
                try:
                    built = list(
                        map(_new_tuple, repeat(ServerSentEvent), zip(names, datas, repeat(last_id)))
                    )
                except (KeyError, UnicodeDecodeError):
                    pass  # nothing has changed yet: the full rules take the run
                else:
                    self._last_id = last_id
                    self._events += count
                    return built
        out: list[ServerSentEvent] = []
        if not cr:
            text = head
        else:
            text = head.replace(b"\r\n", b"\n")
            if _CR in text or len(head) - len(text) != text.count(b"\n"):
                # Not every line ends with CRLF (lone CRs, or CRLF and LF mixed):
                # the line machinery maps such lines to their offsets.
                return self._lines(head, start)
        try:
            if self._data or self._etype:
                # Finish the event in progress line by line; the rest starts clean.
                cut = 1 if text[0] == _LF else text.find(b"\n\n") + 2
                raw = cut + text.count(b"\n", 0, cut) if cr else cut
                self._interpret(text[:cut], head[:raw], start, out)
                if raw < len(head):
                    rest_head = head[raw:]
                    out += self._dispatch(rest_head, start + raw, cr)
                return out
            self._interpret(text, head, start, out)
        except SSELimitExceeded as exc:
            self._broken(exc, out)
            raise
        return out

    def _lines(self, data: bytes, start: int) -> list[ServerSentEvent]:
        """Interpret ``data`` (at stream offset ``start``) through the line machinery:
        what the short path hands over, a tail it declined (``_slow``) or whole events
        with mixed line ends (``_dispatch``: ``data`` ends with LF at a blank line, so
        nothing is left pending and the short path goes on with the next read).
        """
        out: list[ServerSentEvent] = []
        try:
            self._consume(data, start, out)
        except SSELimitExceeded as exc:
            self._broken(exc, out)
            raise
        return out

    def _resume(self, size: int) -> None:
        """Go back to the short path once what the line machinery holds fits the bound.

        The bound is the short path's: no more than this read or ``_TAIL_SLACK``.

        What it holds (held lines, then the partial line) becomes the tail; the
        bound keeps the copying linear. A CR at the end of the last read must
        first see the next byte, so it keeps the line machinery.
        """
        if (
            _SHORT_PATH
            and self._state is DecoderState.STREAMING
            and not self._skip_lf
            and ((holds := len(self._held) + self._pending_len) <= size or holds <= self._slack)
        ):
            if self._held:
                self._tail_start = self._held_start
                self._pending.insert(0, self._held)
                self._held = b""
            elif self._pending:
                self._tail_start = self._line_start
            else:
                self._tail_start = self._received
            self._tail = b"".join(self._pending)
            self._pending.clear()
            self._pending_len = 0
            self._fast = True

    def _feed(self, chunk: bytes | bytearray | memoryview) -> list[ServerSentEvent]:
        if self._state is DecoderState.ENDED or self._state is DecoderState.ERROR:
            raise SSEStateError(f"feed() after the decoder reached state {self._state.value}")
        data = chunk if chunk.__class__ is bytes else bytes(chunk)
        out: list[ServerSentEvent] = []
        if not data:
            return out
        base = self._received
        room = self._max_stream - base
        overflow = len(data) > room
        if overflow:
            data = data[:room]
        self._received = base + len(data)
        try:
            if self._fast:
                # The short path declined this read: its tail (lines of an
                # unfinished event, no blank line) goes to the line machinery.
                self._fast = False
                tail, self._tail = self._tail, b""
                if tail:
                    self._consume(tail, self._tail_start, out)
            if self._state is DecoderState.START:
                data = self._probe + data
                base -= len(self._probe)
                if len(data) < len(_BOM) and _BOM.startswith(data):
                    self._probe = data
                    data = b""
                else:
                    self._probe = b""
                    self._state = DecoderState.STREAMING
                    if data.startswith(_BOM):
                        data = data[len(_BOM) :]
                        base += len(_BOM)
                        self._line_start = base
            if self._skip_lf and data:
                self._skip_lf = False
                if data[0] == 10:
                    data = data[1:]
                    base += 1
                    self._line_start = base
            if data:
                self._consume(data, base, out)
            if overflow:
                raise SSELimitExceeded(
                    "max_stream_bytes", self._max_stream, self._max_stream, self._events
                )
        except SSELimitExceeded as exc:
            self._broken(exc, out)
            raise
        self._resume(len(data))
        return out

    def end(self) -> StreamEnd:
        """Close the stream: an event without its final blank line is discarded.

        Never dispatches anything: a JSON payload that happens to be complete
        is still not an event until the blank line says so.
        """
        if self._state is DecoderState.ENDED:
            raise SSEStateError("end() called twice")
        within_limits = self._release_tail() and self._release_held()
        pending_line = self._pending_len + len(self._probe)
        partial_is_field = bool(pending_line) and not (
            self._pending and self._pending[0][:1] == b":"
        )
        discarded = (
            not within_limits
            or bool(self._data)
            or bool(self._etype)
            or self._id_buf != self._last_id
            or partial_is_field
        )
        result = StreamEnd(
            discarded_partial_event=discarded,
            pending_bytes=(max(self._data_bytes - 1, 0) + pending_line) if discarded else 0,
            last_event_id=self._last_id,
            retry=self._retry,
            events=self._events,
            bytes=self._received,
            comments=self._comments,
        )
        self._state = DecoderState.ENDED
        self._pending.clear()
        self._data.clear()
        return result

    # -- framing ------------------------------------------------------------

    def _consume(self, data: bytes, base: int, out: list[ServerSentEvent]) -> None:
        """Cut the complete lines out of ``data`` (stream offset ``base``)."""
        last = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if last < 0:
            if not self._pending:
                self._line_start = base
            self._pending.append(data)
            self._pending_len += len(data)
            if self._pending_len > self._max_line:
                raise SSELimitExceeded(
                    "max_line_bytes", self._max_line, self._line_start, self._events
                )
            return
        if self._held:
            head_start = self._held_start
            self._pending.insert(0, self._held)
            self._held = b""
        elif self._pending:
            head_start = self._line_start
        else:
            head_start = base
        if self._pending:
            self._pending.append(data[: last + 1])
            head = b"".join(self._pending)
            self._pending.clear()
        else:
            head = data[: last + 1]
        self._pending_len = 0
        self._skip_lf = data[-1] == _CR
        crlf = _CR in head
        text = head.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if crlf else head
        if len(head) > self._max_line + 1:
            lengths = [len(line) for line in text.split(b"\n")]
            if max(lengths) > self._max_line:
                bad = next(i for i, n in enumerate(lengths) if n > self._max_line)
                self._interpret(text[: sum(lengths[:bad]) + bad], head, head_start, out)
                raise SSELimitExceeded(
                    "max_line_bytes",
                    self._max_line,
                    _line_offset(head, head_start, bad),
                    self._events,
                )
        if not crlf:
            # Hold back the lines of an event that is not finished yet, so that it
            # is tokenized once, whole, when its blank line arrives. Held bytes are
            # joined again with the next read, so only as many as this read brought
            # are held: each byte is copied a bounded number of times. Lines that
            # act at once (retry, comments) or a leading blank line are not held.
            cut = text.rfind(b"\n\n")
            keep = cut + 2 if cut >= 0 else 0
            if 0 < len(text) - keep <= len(data):
                held = text[keep:]
                if (
                    held[0] != _LF
                    and held[0] != _COLON
                    and held.find(b"\n:") < 0
                    and held.find(b"retry") < 0
                ):
                    self._held = held
                    self._held_start = head_start + keep
                    text = head = text[:keep]
        if text:
            self._interpret(text, head, head_start, out)
        tail = data[last + 1 :]
        self._line_start = base + last + 1
        if tail:
            self._pending.append(tail)
            self._pending_len = len(tail)
            if self._pending_len > self._max_line:
                raise SSELimitExceeded(
                    "max_line_bytes", self._max_line, self._line_start, self._events
                )

    def _release_tail(self) -> bool:
        """At the end, hand the tail to the line machinery; False if that exceeded a limit.

        The tail holds no blank line, so nothing can be dispatched here.
        """
        self._fast = False
        tail, self._tail = self._tail, b""
        if not tail:
            return True
        try:
            self._consume(tail, self._tail_start, [])
        except SSELimitExceeded:
            return False
        return True

    def _broken(self, exc: SSELimitExceeded, out: list[ServerSentEvent]) -> None:
        """A limit tripped: the decoder is unusable from now on, and the events this
        read completed before it travel with the error (nothing delivered is lost)."""
        self._fast = False
        self._state = DecoderState.ERROR
        exc.events[:0] = out

    def _release_held(self) -> bool:
        """Interpret held lines at the end; False if that exceeded a limit.

        Held lines hold no blank line, so nothing can be dispatched here.
        """
        if not self._held:
            return True
        held, self._held = self._held, b""
        try:
            self._interpret(held, held, self._held_start, [])
        except SSELimitExceeded:
            return False
        return True


class _TypeNames(dict[bytes, str]):
    """``event:`` line -> event type, for ``SSEDecoder._dispatch``; KeyError if not one.

    A ``dict`` subclass so that ``map(names.__getitem__, lines)`` looks each
    line up in C and runs Python only for a line not seen before. At most
    ``_TYPE_CACHE_SIZE`` lines are kept, so a hostile stream cannot grow it.
    """

    __slots__ = ()

    def __missing__(self, line: bytes) -> str:
        if line[:6] != b"event:":
            raise KeyError(line)
        value = line[6:]
        if value[:1] == b" ":
            value = value[1:]
        name = value.decode("utf-8", "replace") or "message"
        if len(self) < _TYPE_CACHE_SIZE:
            self[line] = name
        return name


@functools.lru_cache(maxsize=32)
def _tokenizer(max_event_bytes: int) -> re.Pattern[bytes]:
    """The token pattern for one event-size limit.

    First alternative: ``event:`` line (optional), ``data:`` line, blank line.
    The data group is bounded by the limit, so a fast-path event can never
    exceed it; a longer line falls to the second alternative (one line of any
    kind), whose path checks the limit and raises. A line starting with
    ``data:`` has the field name "data" exactly, since a name ends at the first
    colon; `` ?`` removes the single optional space. Each alternative fails or
    matches within the lines it spans, and every match consumes at least one
    byte, so the scan stays linear in ``text``.
    """
    return re.compile(
        rb"(event: ?([^\n]*)\n)?data: ?([^\n]{0,%d})\n\n|([^\n]*)(\n)" % max_event_bytes
    )


def _line_number(tokens: list[tuple[bytes, ...]], token: tuple[bytes, ...], extra: int) -> int:
    """Line number (in the text) of a token's data line: error path only.

    The token is found by identity: ``findall`` makes a new tuple per match.
    ``extra`` is 1 when the data line follows an ``event:`` line in the token.
    """
    before = 0
    for candidate in tokens:
        if candidate is token:
            return before + (extra if token[0] else 0)
        before += 1 if candidate[4] else (3 if candidate[0] else 2)
    return before


def _line_offset(head: bytes, head_start: int, index: int) -> int:
    """Stream offset of line ``index`` of ``head``: error path only, O(len(head))."""
    if index == 0:
        return head_start
    for n, match in enumerate(_LINE_END.finditer(head), start=1):
        if n == index:
            return head_start + match.end()
    return head_start + len(head)
