from __future__ import annotations

from typing import Any, AsyncIterator, Callable, Dict, Optional

from ..errors import ConnectionError, SandboxdError, error_from_response
from ..types import FileChange
from . import _io
from ._agent import AsyncAgent


class AsyncFileWatcher:
    """Changes below a directory of the sandbox, over the agent's ``/files/watch`` WebSocket (inotify,
    recursive). Iterate it; ``close()`` ends it. It ends by itself when the directory is removed."""

    def __init__(self, ws: _io.Socket, path: str, on_warning: Optional[Callable[[Dict[str, str]], Any]]) -> None:
        self._ws = ws
        self.path = path
        self._on_warning = on_warning
        self.closed = False

    @classmethod
    async def open(cls, agent: AsyncAgent, path: str, connect_timeout: float, on_warning: Optional[Callable[[Dict[str, str]], Any]]) -> "AsyncFileWatcher":
        ws = await agent.socket("/files/watch", connect_timeout, f"watch {path}")
        try:
            await ws.send({"action": "watch", "path": path, "ack": True})
            while True:
                frame = await ws.recv(connect_timeout)
                if frame is None:
                    raise ConnectionError(f"file watch of {path} closed before it started", code="CONNECTION_ERROR")
                if frame.get("type") == "error":
                    raise error_from_response(0, frame)
                if frame.get("type") == "watching":
                    return cls(ws, str(frame.get("path") or path), on_warning)
        except BaseException:
            await ws.close()
            raise

    async def next(self, timeout: Optional[float] = None) -> Optional[FileChange]:
        """The next change; None once the watch ended. TimeoutError when none came in ``timeout`` seconds."""
        while not self.closed:
            frame = await self._ws.recv(timeout)
            if frame is None:
                self.closed = True
                return None
            kind = frame.get("type")
            if kind == "change":
                return FileChange.from_wire(frame)
            if kind == "warning" and self._on_warning is not None:
                self._on_warning({"code": str(frame.get("code", "")), "message": str(frame.get("message", ""))})
            elif kind == "error":
                await self.close()
                raise error_from_response(0, frame)
        return None

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self._ws.close()

    def __aiter__(self) -> AsyncIterator[FileChange]:
        return self._changes()

    async def _changes(self) -> AsyncIterator[FileChange]:
        try:
            while True:
                change = await self.next()
                if change is None:
                    return
                yield change
        finally:
            await self.close()

    async def __aenter__(self) -> "AsyncFileWatcher":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


__all__ = ["AsyncFileWatcher", "SandboxdError"]
