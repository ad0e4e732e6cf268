"""The WHATWG event stream interpretation, transcribed: the oracle of ``SSEDecoder``.

``SSEDecoder`` frames on bytes, cuts whole runs of events with C-level calls and
keeps several short paths (see its module docstring); every one of them must
mean exactly what this module means. This module is the specification text of
HTML's "Server-sent events: interpreting an event stream", written down as
plainly as it reads, with no shortcut and no limit: bytes are decoded to text
by an incremental UTF-8 decoder (``errors="replace"``, one leading BOM
removed), the text is cut into lines (CRLF, LF or CR), and each line is
processed as the spec says, one character class at a time.

It is kept in the package, beside the decoder, with the same ``feed`` / ``end``
interface, so that the differential tests (``tests/sse``) and anyone who
doubts an answer can run both on the same bytes. It is not used on any path
that decodes a real stream: it is O(n) but runs Python code per character of
every line, and bounds nothing (a hostile stream can make it buffer without
end).
"""

from __future__ import annotations

import codecs

from agent_gate.sse.event import ServerSentEvent

__all__ = ["ReferenceDecoder", "reference_events"]

_BOM = "\ufeff"


class ReferenceDecoder:
    """Feed it the bytes of one stream in any split; read the spec's events back.

    The state is the spec's own: the data buffer, the event type buffer, the
    last event ID buffer, the last event ID string and the reconnection time,
    plus a count of comment lines (which the spec ignores and ``SSEDecoder``
    reports) and the unterminated line.
    """

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._bom_checked = False
        self._line = ""  # characters of the line not yet terminated
        self._after_cr = False  # the last character was a CR: an LF now ends nothing
        self._data = ""
        self._type = ""
        self._id_buffer = ""
        self.last_event_id = ""
        """The last event ID string, set each time a block is dispatched."""
        self.retry: int | None = None
        """The reconnection time in milliseconds, when a ``retry`` field set it."""
        self.comments = 0
        """Lines that started with a colon."""
        self.events_dispatched = 0
        self.ended = False

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode ``chunk`` and process every line it completes; return the events."""
        if self.ended:
            raise ValueError("feed() after end()")
        return self._text(self._utf8.decode(bytes(chunk)))

    def end(self) -> bool:
        """The stream ended: "If the file ends in the middle of an event, before the
        final empty line, the incomplete event is not dispatched." Returns whether
        something was discarded: a buffered field (an ``id`` not yet dispatched
        too) or an unterminated line that is not a comment, which is what
        ``StreamEnd.discarded_partial_event`` reports."""
        if self.ended:
            raise ValueError("end() called twice")
        self.ended = True
        rest = self._utf8.decode(b"", final=True)
        self._text(rest)  # an incomplete UTF-8 sequence cannot end a line
        partial_field = self._line != "" and self._line[0] != ":"
        return bool(
            partial_field or self._data or self._type or self._id_buffer != self.last_event_id
        )

    def _text(self, text: str) -> list[ServerSentEvent]:
        if not self._bom_checked and text:
            self._bom_checked = True
            if text[0] == _BOM:  # "One leading U+FEFF BYTE ORDER MARK character must
                text = text[1:]  # be ignored if any are present."
        out: list[ServerSentEvent] = []
        for char in text:
            if char == "\n" and self._after_cr:
                self._after_cr = False  # the LF of a CRLF pair
                continue
            self._after_cr = char == "\r"
            if char == "\r" or char == "\n":
                line, self._line = self._line, ""
                self._process(line, out)
            else:
                self._line += char
        return out

    def _process(self, line: str, out: list[ServerSentEvent]) -> None:
        if line == "":
            self._dispatch(out)  # "If the line is empty (a blank line): Dispatch the event"
        elif line[0] == ":":
            self.comments += 1  # "If the line starts with a U+003A COLON: Ignore the line."
        elif ":" in line:
            # "Collect the characters on the line before the first U+003A COLON
            # character (:), and let field be that string. Collect the characters on
            # the line after the first U+003A COLON character (:), and let value be
            # that string. If value starts with a U+0020 SPACE character, remove it."
            field, value = line.split(":", 1)
            if value.startswith(" "):
                value = value[1:]
            self._field(field, value)
        else:
            self._field(line, "")  # "using the whole line as the field name"

    def _field(self, name: str, value: str) -> None:
        if name == "event":
            self._type = value
        elif name == "data":
            self._data += value + "\n"
        elif name == "id":
            if "\0" not in value:
                self._id_buffer = value
        elif name == "retry" and value and all(c in "0123456789" for c in value):
            self.retry = int(value)
        # "Otherwise: The field is ignored."

    def _dispatch(self, out: list[ServerSentEvent]) -> None:
        self.last_event_id = self._id_buffer
        if self._data == "":
            self._data = ""
            self._type = ""
            return
        data = self._data[:-1] if self._data.endswith("\n") else self._data
        out.append(ServerSentEvent(self._type or "message", data, self.last_event_id))
        self.events_dispatched += 1
        self._data = ""
        self._type = ""


def reference_events(
    stream: bytes,
) -> tuple[list[ServerSentEvent], str, int | None, int]:
    """The whole of ``stream`` read by the reference: events, last event ID, retry,
    comment lines."""
    decoder = ReferenceDecoder()
    events = decoder.feed(stream)
    decoder.end()
    return events, decoder.last_event_id, decoder.retry, decoder.comments
