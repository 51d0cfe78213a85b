"""An incremental ``text/event-stream`` parser (WHATWG rules: ``event:``, ``data:`` lines joined by
newlines, ``id:``, ``:`` comments, a blank line dispatches; CRLF, CR and LF all end lines)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass
class SseMessage:
    event: str
    data: str
    id: Optional[str] = None


class SseParser:
    def __init__(self) -> None:
        self._buffer = ""
        self._event = ""
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._saw_data = False

    def feed(self, text: str) -> List[SseMessage]:
        self._buffer += text
        return self._lines(final=False)

    def end(self) -> List[SseMessage]:
        out = self._lines(final=True)
        if self._buffer:
            out += self._take(self._buffer)
            self._buffer = ""
        return out + self._take("")

    def _lines(self, final: bool) -> List[SseMessage]:
        out: List[SseMessage] = []
        while True:
            m = _EOL.search(self._buffer)
            # A lone CR at the end may be the first half of CRLF: wait for the next chunk.
            if not m or (not final and m.group(0) == "\r" and m.start() == len(self._buffer) - 1):
                return out
            line = self._buffer[: m.start()]
            self._buffer = self._buffer[m.end() :]
            out += self._take(line)

    def _take(self, line: str) -> List[SseMessage]:
        if line == "":
            out = [SseMessage(self._event or "message", "\n".join(self._data), self._id)] if self._saw_data else []
            self._event, self._data, self._saw_data = "", [], False
            return out
        if line.startswith(":"):
            return []
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
            self._saw_data = True
        elif name == "id" and "\0" not in value:
            self._id = value
        return []
