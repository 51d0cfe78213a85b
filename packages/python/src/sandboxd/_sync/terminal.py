# Generated from sandboxd/_async/terminal.py by scripts/unasync.py: edit that file, then run the script.
from __future__ import annotations

import re
import time
from typing import Any, Iterator, Optional, Pattern, Union

from ..errors import ConnectionError, TimeoutError
from . import _io
from ._agent import Agent


class Terminal:
    """An interactive shell in the sandbox on a pseudo-terminal, over the agent's ``/terminal``
    WebSocket. ``write()`` input (``\\r`` is Enter, ``\\x03`` Ctrl-C), ``read()`` or iterate output,
    ``resize()``, ``wait()`` for the shell's exit code, ``close()``."""

    def __init__(self, ws: _io.Socket) -> None:
        self._ws = ws
        self.exit_code: Optional[int] = None
        self.exited = False
        self._closing = False

    @classmethod
    def open(cls, agent: Agent, cols: Optional[int] = None, rows: Optional[int] = None, connect_timeout: float = 30.0) -> "Terminal":
        size = f"?cols={int(cols)}&rows={int(rows)}" if cols and rows else ""
        return cls(agent.socket(f"/terminal{size}", connect_timeout, "terminal"))

    def write(self, data: str) -> None:
        self._ws.send({"type": "input", "data": data})

    def resize(self, cols: int, rows: int) -> None:
        self._ws.send({"type": "resize", "cols": max(1, int(cols)), "rows": max(1, int(rows))})

    def read(self, timeout: Optional[float] = None) -> Optional[str]:
        """The next chunk of output; None once the shell exited (or the connection closed).
        TimeoutError when nothing came in ``timeout`` seconds."""
        while not self.exited:
            frame = self._ws.recv(timeout)
            if frame is None:
                self.exited = True
                if not self._closing and self.exit_code is None and self._ws.close_code not in (1000, None):
                    raise ConnectionError(f"terminal connection closed before the shell exited (code {self._ws.close_code})", code="CONNECTION_ERROR")
                return None
            if frame.get("type") == "output":
                return str(frame.get("data", ""))
            if frame.get("type") == "exit":
                code = frame.get("code")
                self.exit_code = code if isinstance(code, int) else None
                self.exited = True
                self._ws.close()
                return None
        return None

    def wait_for(self, pattern: Union[str, Pattern[str]], timeout: float = 10.0) -> str:
        """Reads output until ``pattern`` (a substring or a regex) appears in it; returns the text read.
        TimeoutError after ``timeout`` seconds, ConnectionError when the shell exits first."""
        text = ""
        deadline = time.monotonic() + timeout

        def matches() -> bool:
            return pattern in text if isinstance(pattern, str) else re.search(pattern, text) is not None

        while not matches():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no match for {pattern!r} in {timeout} s; got {text[-200:]!r}", code="TIMEOUT")
            try:
                chunk = self.read(left)
            except TimeoutError:
                raise TimeoutError(f"no match for {pattern!r} in {timeout} s; got {text[-200:]!r}", code="TIMEOUT") from None
            if chunk is None:
                if matches():
                    break
                raise ConnectionError(f"terminal exited before {pattern!r} appeared; got {text[-200:]!r}", code="CONNECTION_ERROR")
            text += chunk
        return text

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Reads (and drops) output until the shell exits; returns its exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.exited:
            self.read(None if deadline is None else max(0.001, deadline - time.monotonic()))
        return self.exit_code

    def close(self) -> None:
        self._closing = True
        self.exited = True
        self._ws.close()

    def __iter__(self) -> Iterator[str]:
        return self._chunks()

    def _chunks(self) -> Iterator[str]:
        while True:
            chunk = self.read()
            if chunk is None:
                return
            yield chunk

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
