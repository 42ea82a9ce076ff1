"""A ``text/event-stream`` parser, fed bytes as they arrive.

It follows the HTML standard's event-stream interpretation, as ``packages/client/src/sse.ts``
does: lines end with CRLF, LF or CR (also when a CRLF is split across two chunks), a leading BOM
is dropped, ``:`` starts a comment, a field's value loses one leading space, ``data:`` lines are
joined with LF, a blank line dispatches (nothing when there was no data), the last event id
carries over to later events, an ``id`` containing NUL is ignored, an unfinished event at the end
of the stream is dropped (``close()`` discards it). Nothing here does I/O, so the same parser
serves the sync and the async stream.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

from .errors import FleetStreamError

__all__ = ["SseComment", "SseItem", "SseMessage", "SseParser", "SsePosition", "SseRetry"]

#: Longest line, and longest data of one event, in characters (as the TypeScript client).
DEFAULT_MAX_LENGTH = 16 * 1024 * 1024


@dataclass(frozen=True)
class SseMessage:
    """One dispatched event: ``id`` is the last id the stream set (it carries over)."""

    id: str | None
    event: str
    data: str


@dataclass(frozen=True)
class SseRetry:
    """A valid ``retry:`` field: the server's reconnection delay."""

    ms: int


@dataclass(frozen=True)
class SsePosition:
    """An ``id:`` set by a block without data: a position in the log, not an event (the stream's start)."""

    id: str


@dataclass(frozen=True)
class SseComment:
    """A comment line (without its colon), e.g. ``heartbeat``."""

    text: str


SseItem = SseMessage | SseRetry | SsePosition | SseComment


class SseParser:
    """Incremental: ``feed(chunk)`` returns what the chunk completed, in stream order."""

    def __init__(self, max_length: int = DEFAULT_MAX_LENGTH) -> None:
        self._max_length = max_length
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = ""
        self._first = True
        # The last chunk ended with CR: an LF opening the next one ends the same line.
        self._skip_lf = False
        self._last_id: str | None = None
        self._id_set = False
        self._event = ""
        self._data: list[str] = []
        self._data_length = 0

    def feed(self, chunk: bytes) -> list[SseItem]:
        text = self._decoder.decode(chunk)
        if self._first and text:
            if text[0] == "\ufeff":
                text = text[1:]
            self._first = False
        if self._skip_lf and text:
            if text[0] == "\n":
                text = text[1:]
            self._skip_lf = False
        buffer = self._buffer + text
        out: list[SseItem] = []
        start = 0
        n = len(buffer)
        while True:
            cr = buffer.find("\r", start)
            lf = buffer.find("\n", start)
            if cr < 0 and lf < 0:
                break
            end = lf if cr < 0 else cr if lf < 0 else min(cr, lf)
            nxt = end + 1
            if buffer[end] == "\r":
                if nxt < n:
                    if buffer[nxt] == "\n":
                        nxt += 1
                else:
                    self._skip_lf = True
            item = self._line(buffer[start:end])
            if item is not None:
                out.append(item)
            start = nxt
        self._buffer = buffer[start:]
        if len(self._buffer) > self._max_length:
            raise FleetStreamError("line_too_long", f"a stream line is longer than {self._max_length} characters")
        return out

    def _line(self, line: str) -> SseItem | None:
        if line == "":
            event, self._event = self._event, ""
            id_set, self._id_set = self._id_set, False
            if not self._data:
                return SsePosition(self._last_id) if id_set and self._last_id is not None else None
            data = "\n".join(self._data)
            self._data = []
            self._data_length = 0
            return SseMessage(self._last_id, event or "message", data)
        if line[0] == ":":
            text = line[1:]
            return SseComment(text[1:] if text.startswith(" ") else text)
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data_length += len(value) + 1
            if self._data_length > self._max_length:
                raise FleetStreamError("line_too_long", f"an event's data is longer than {self._max_length} characters")
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
                self._id_set = True
        elif field == "retry":
            if value.isascii() and value.isdigit():
                return SseRetry(int(value))
        # Unknown fields are ignored, as the standard says.
        return None
