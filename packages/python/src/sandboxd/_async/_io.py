"""The asyncio side of what differs between the two clients (hand-written; the rest of
``sandboxd._sync`` is generated from ``sandboxd._async`` by scripts/unasync.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable, Dict, Optional

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from ..errors import ConnectionError, SandboxdError, TimeoutError, error_from_response

HttpClient = httpx.AsyncClient
Lock = asyncio.Lock
AuthHeaders = Callable[[], Awaitable[Dict[str, str]]]
Hook = Callable[[], Awaitable[None]]


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


class Socket:
    """A WebSocket of JSON text frames."""

    def __init__(self, ws: ClientConnection, what: str) -> None:
        self._ws = ws
        self.what = what
        self.close_code: Optional[int] = None
        self.close_reason = ""

    async def send(self, frame: Dict[str, Any]) -> None:
        try:
            await self._ws.send(json.dumps(frame))
        except ConnectionClosed as err:
            raise ConnectionError(f"{self.what}: the connection is closed", code="CONNECTION_ERROR") from err

    async def recv(self, timeout: Optional[float]) -> Optional[Dict[str, Any]]:
        """The next JSON object frame; None once the connection closed. TimeoutError after ``timeout`` seconds."""
        while True:
            try:
                raw = await asyncio.wait_for(self._ws.recv(), timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"{self.what}: nothing received in {timeout} s", code="TIMEOUT") from None
            except ConnectionClosed as err:
                rcvd = err.rcvd
                self.close_code = rcvd.code if rcvd else None
                self.close_reason = rcvd.reason if rcvd else ""
                return None
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            if isinstance(frame, dict):
                return frame

    async def close(self) -> None:
        await self._ws.close()


async def open_socket(url: str, headers: Dict[str, str], timeout: float, what: str) -> Socket:
    try:
        ws = await connect(url, additional_headers=headers, open_timeout=timeout, compression=None, max_size=None)
    except InvalidStatus as err:
        res = err.response
        raise error_from_response(res.status_code, res.body or b"", dict(res.headers)) from err
    except (asyncio.TimeoutError, OSError, WebSocketException) as err:
        if isinstance(err, SandboxdError):
            raise
        raise ConnectionError(f"{what}: cannot open {url.split('?')[0]} ({err!r})", code="CONNECTION_ERROR") from err
    return Socket(ws, what)
