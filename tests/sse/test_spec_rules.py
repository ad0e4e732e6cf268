"""The WHATWG event-stream interpretation rules, each checked from the spec's text.

Each test feeds a stream through the public API and asserts what an
EventSource would have dispatched. Where an implementation commonly errs, the
test says how.
"""

from __future__ import annotations

import itertools
from dataclasses import fields

import pytest

from agent_gate.sse import ServerSentEvent, SSEDecoder, SSELimitExceeded, SSEStateError


def decode(stream: bytes, *chunks: int) -> tuple[list[ServerSentEvent], SSEDecoder]:
    """Feed ``stream`` cut at the given offsets (none: whole) and return events."""
    decoder = SSEDecoder()
    events: list[ServerSentEvent] = []
    cuts = [0, *chunks, len(stream)]
    for start, stop in itertools.pairwise(cuts):
        events += decoder.feed(stream[start:stop])
    return events, decoder


def test_blank_line_dispatches_with_default_type_message() -> None:
    events, _ = decode(b"data: hello\n\n")
    assert events == [ServerSentEvent("message", "hello", "")]


def test_multiple_data_lines_are_joined_with_lf() -> None:
    events, _ = decode(b'event: note\ndata: {"text":\ndata: "x"}\n\n')
    assert events == [ServerSentEvent("note", '{"text":\n"x"}', "")]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_each_of_lf_crlf_and_cr_ends_a_line(eol: bytes) -> None:
    stream = b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    events, _ = decode(stream)
    assert [e.data for e in events] == ["a\nb", "c"]


def test_mixed_line_endings_in_one_stream() -> None:
    events, _ = decode(b"data: a\rdata: b\r\ndata: c\n\r\n")
    assert [e.data for e in events] == ["a\nb\nc"]


def test_cr_at_end_of_read_and_lf_at_start_of_next_are_one_line_ending() -> None:
    # Counting the LF as a second (empty) line would dispatch "a" early.
    events, _ = decode(b"data: a\r\ndata: b\r\n\r\n", len(b"data: a\r"))
    assert [e.data for e in events] == ["a\nb"]
    events, _ = decode(b"data: a\r\n\r\n", len(b"data: a\r"), len(b"data: a\r\n\r"))
    assert [e.data for e in events] == ["a"]


def test_lone_cr_blank_line_dispatches_without_waiting_for_more_bytes() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [ServerSentEvent("message", "a", "")]


@pytest.mark.parametrize(
    "separator",
    ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"],
    ids=["LS", "PS", "NEL", "VT", "FF", "FS", "GS", "RS"],
)
def test_only_cr_and_lf_end_lines(separator: str) -> None:
    # str.splitlines() would cut here and turn the rest into a field of its own.
    text = f"data: left{separator}data: right\n\n"
    events, _ = decode(text.encode())
    assert [e.data for e in events] == [f"left{separator}data: right"]


def test_field_names_are_case_sensitive() -> None:
    events, _ = decode(b"Data: no\nDATA: no\nEvent: x\ndata: yes\n\n")
    assert events == [ServerSentEvent("message", "yes", "")]


def test_exactly_one_leading_space_is_removed_and_the_rest_kept() -> None:
    events, _ = decode(b"data:  two spaces \ndata:none\ndata:\ttab\n\n")
    assert events[0].data == " two spaces \nnone\n\ttab"


def test_value_after_first_colon_keeps_later_colons() -> None:
    events, _ = decode(b'data: {"a": "b:c"}\n\n')
    assert events[0].data == '{"a": "b:c"}'


def test_line_without_colon_is_the_field_with_an_empty_value() -> None:
    events, _ = decode(b"data\n\n")
    assert events == [ServerSentEvent("message", "", "")]
    events, _ = decode(b"event: custom\nevent\ndata: x\n\n")
    assert events == [ServerSentEvent("message", "x", "")]


def test_comment_lines_are_ignored_even_when_they_look_like_fields() -> None:
    events, decoder = decode(b": ping\n:data: hidden\ndata: shown\n: another\n\n")
    assert events == [ServerSentEvent("message", "shown", "")]
    assert decoder.comments == 3


def test_unknown_fields_are_ignored() -> None:
    events, _ = decode(b"foo: bar\ndata: x\nbaz\n\n")
    assert events == [ServerSentEvent("message", "x", "")]


def test_block_without_data_dispatches_nothing_but_its_id_counts() -> None:
    events, decoder = decode(b"id: 41\nevent: nothing\n\ndata: next\n\n")
    assert events == [ServerSentEvent("message", "next", "41")]
    assert decoder.last_event_id == "41"


def test_empty_data_field_dispatches_an_event_with_empty_data() -> None:
    events, _ = decode(b"data:\n\n")
    assert events == [ServerSentEvent("message", "", "")]
    events, _ = decode(b"data: a\ndata:\n\n")
    assert events[0].data == "a\n"


def test_comment_only_block_dispatches_nothing() -> None:
    events, _ = decode(b": keep-alive\n\n\n\n")
    assert events == []


def test_event_type_resets_after_each_dispatch() -> None:
    events, _ = decode(b"event: first\ndata: 1\n\ndata: 2\n\nevent: lost\n\ndata: 3\n\n")
    assert [(e.event, e.data) for e in events] == [
        ("first", "1"),
        ("message", "2"),
        ("message", "3"),
    ]


def test_empty_event_type_means_message() -> None:
    events, _ = decode(b"event:\ndata: x\n\n")
    assert events[0].event == "message"


def test_last_event_id_is_inherited_until_the_server_changes_it() -> None:
    events, decoder = decode(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\ndata: c\n\n")
    assert [e.id for e in events] == ["1", "1", "2"]
    assert decoder.last_event_id == "2"


def test_id_containing_nul_is_ignored() -> None:
    events, decoder = decode(b"id: 5\ndata: a\n\nid: 6\x007\ndata: b\n\n")
    assert [e.id for e in events] == ["5", "5"]
    assert decoder.last_event_id == "5"


def test_empty_id_resets_the_last_event_id() -> None:
    events, decoder = decode(b"id: 5\ndata: a\n\nid\ndata: b\n\nid:\ndata: c\n\n")
    assert [e.id for e in events] == ["5", "", ""]
    assert decoder.last_event_id == ""


def test_id_of_an_unfinished_block_is_not_the_last_event_id() -> None:
    # Resuming from an event that never arrived would skip it.
    decoder = SSEDecoder()
    decoder.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b\n")
    assert decoder.last_event_id == "1"
    assert decoder.end().last_event_id == "1"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"retry: 2500", 2500),
        (b"retry:0", 0),
        (b"retry: 10a", None),
        (b"retry: -1", None),
        (b"retry: 1.5", None),
        (b"retry: +5", None),
        (b"retry: 1 ", None),
        (b"retry:", None),
        ("retry: \u0661\u0662".encode(), None),  # Arabic-Indic digits are not ASCII digits
        ("retry: \uff11".encode(), None),  # fullwidth digit one
    ],
)
def test_retry_only_when_the_value_is_ascii_digits(line: bytes, expected: int | None) -> None:
    _, decoder = decode(line + b"\n\n")
    assert decoder.retry == expected


def test_retry_keeps_the_previous_value_when_a_later_one_is_invalid() -> None:
    _, decoder = decode(b"retry: 300\n\nretry: soon\n\n")
    assert decoder.retry == 300


def test_event_without_its_blank_line_is_discarded_at_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"ok":true}\n') == []  # complete JSON, still not an event
    end = decoder.end()
    assert end.discarded_partial_event is True
    assert end.pending_bytes == len(b'{"ok":true}')
    assert end.events == 0


def test_end_as_dict_names_every_field_with_its_value() -> None:
    # The CLI and logs print this mapping; it must say what the record says, by name.
    decoder = SSEDecoder()
    decoder.feed(b"retry: 7\n: beat\nid: 4\ndata: a\n\ndata: par")
    end = decoder.end()
    assert end.as_dict() == {
        "discarded_partial_event": True,
        "pending_bytes": len(b"data: par"),
        "last_event_id": "4",
        "retry": 7,
        "events": 1,
        "bytes": len(b"retry: 7\n: beat\nid: 4\ndata: a\n\ndata: par"),
        "comments": 1,
    }
    assert list(end.as_dict()) == [f.name for f in fields(end)]


def test_unterminated_last_line_is_discarded_at_end() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: partial") == [ServerSentEvent("message", "a", "")]
    end = decoder.end()
    assert end.discarded_partial_event is True
    assert end.pending_bytes == len(b"data: partial")
    assert end.events == 1


def test_complete_event_followed_by_a_cut_stays_delivered() -> None:
    decoder = SSEDecoder()
    stream = b"id: 9\ndata: done\n\n"
    events = decoder.feed(stream)
    end = decoder.end()
    assert events == [ServerSentEvent("message", "done", "9")]
    assert end.discarded_partial_event is False
    assert end.pending_bytes == 0
    assert (end.events, end.bytes, end.last_event_id) == (1, len(stream), "9")


def test_trailing_comment_or_blank_lines_are_not_a_discarded_event() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n: ping\n")
    assert decoder.end().discarded_partial_event is False
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n: unterminated comm")
    assert decoder.end().discarded_partial_event is False


def test_one_bom_is_removed_only_at_the_very_start() -> None:
    events, _ = decode(b"\xef\xbb\xbfdata: a\n\n")
    assert events[0].data == "a"
    # A second BOM belongs to the field name, which is then no known field.
    events, _ = decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n")
    assert [e.data for e in events] == ["b"]
    # A BOM later in the stream is data like any other character.
    events, _ = decode(b"data: a\n\ndata: \xef\xbb\xbfb\n\n")
    assert [e.data for e in events] == ["a", "\ufeffb"]
    events, _ = decode(b"data: a\n\n\xef\xbb\xbfdata: b\n\n")
    assert [e.data for e in events] == ["a"]


def test_bom_split_across_reads_is_still_removed() -> None:
    stream = b"\xef\xbb\xbfdata: a\n\n"
    for cut in range(1, 4):
        events, _ = decode(stream, cut)
        assert [e.data for e in events] == ["a"], cut
    events, _ = decode(stream, 1, 2, 3)
    assert [e.data for e in events] == ["a"]


def test_bom_prefix_that_is_not_a_bom_is_kept() -> None:
    events, _ = decode(b"\xef\xbbdata: a\n\ndata: b\n\n", 1)
    assert [e.data for e in events] == ["b"]


def test_invalid_utf8_becomes_replacement_characters_and_never_raises() -> None:
    events, _ = decode(b"data: a\xffb\xc3(\xed\xa0\x80c\xe2\x82\n\n")
    assert events[0].data == "a\ufffdb\ufffd(\ufffd\ufffd\ufffdc\ufffd"


def test_invalid_utf8_in_event_type_and_id_is_replaced_too() -> None:
    events, _decoder = decode(b"event: t\xff\nid: i\xfe\ndata: x\n\n")
    assert events == [ServerSentEvent("t\ufffd", "x", "i\ufffd")]


def test_multibyte_character_split_across_reads_is_decoded_whole() -> None:
    stream = "data: 中文 🙂 é\n\n".encode()
    for cut in range(len(stream) + 1):
        events, _ = decode(stream, cut)
        assert [e.data for e in events] == ["中文 🙂 é"], cut


def test_feed_after_end_and_second_end_are_state_errors() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\n")
    decoder.end()
    with pytest.raises(SSEStateError):
        decoder.feed(b"data: b\n\n")
    with pytest.raises(SSEStateError):
        decoder.end()


def test_empty_feeds_change_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\n\n") == [ServerSentEvent("message", "a", "")]


def test_accepts_bytearray_and_memoryview() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(bytearray(b"data: a\n")) + decoder.feed(memoryview(b"\n"))
    assert events == [ServerSentEvent("message", "a", "")]


def test_retry_and_comments_take_effect_before_the_event_finishes() -> None:
    # The decoder may defer the lines of an unfinished event, but never a field
    # that acts at once: the retry time and heartbeat comments are visible now.
    decoder = SSEDecoder()
    decoder.feed(b"data: a\n\nretry: 5\n: beat\ndata: b\n")
    assert decoder.retry == 5
    assert decoder.comments == 1


def test_unfinished_event_over_the_data_limit_is_reported_when_it_goes_on() -> None:
    decoder = SSEDecoder(max_event_bytes=4)
    decoder.feed(b"data: 123456\n")
    with pytest.raises(SSELimitExceeded) as info:
        decoder.feed(b"\n")
    assert (info.value.limit, info.value.offset, info.value.event_index) == (
        "max_event_bytes",
        0,
        0,
    )
    decoder = SSEDecoder(max_event_bytes=4)
    decoder.feed(b"data: 123456\n")
    end = decoder.end()  # the stream ended first: the event is discarded, no error
    assert end.discarded_partial_event is True
    assert end.events == 0
