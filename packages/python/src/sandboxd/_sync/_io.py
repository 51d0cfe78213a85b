"""The blocking side of what differs between the two clients (hand-written; the rest of
``sandboxd._sync`` is generated from ``sandboxd._async`` by scripts/unasync.py)."""

from __future__ import annotations

import builtins
import json
import threading
import time
from typing import Any, Callable, Dict, Optional

import httpx
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

from ..errors import ConnectionError, SandboxdError, TimeoutError, error_from_response

HttpClient = httpx.Client
Lock = threading.Lock
AuthHeaders = Callable[[], Dict[str, str]]
Hook = Callable[[], None]


def sleep(seconds: float) -> None:
    time.sleep(seconds)


class Socket:
    """A WebSocket of JSON text frames."""

    def __init__(self, ws: ClientConnection, what: str) -> None:
        self._ws = ws
        self.what = what
        self.close_code: Optional[int] = None
        self.close_reason = ""

    def send(self, frame: Dict[str, Any]) -> None:
        try:
            self._ws.send(json.dumps(frame))
        except ConnectionClosed as err:
            raise ConnectionError(f"{self.what}: the connection is closed", code="CONNECTION_ERROR") from err

    def recv(self, timeout: Optional[float]) -> Optional[Dict[str, Any]]:
        """The next JSON object frame; None once the connection closed. TimeoutError after ``timeout`` seconds."""
        while True:
            try:
                raw = self._ws.recv(timeout)
            except builtins.TimeoutError:
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

    def close(self) -> None:
        self._ws.close()



def open_socket(url: str, headers: Dict[str, str], timeout: float, what: str) -> Socket:
    try:
        ws = connect(url, additional_headers=headers, open_timeout=timeout, compression=None, max_size=None)
    except InvalidStatus as err:
        res = err.response
        raise error_from_response(res.status_code, res.body or b"", dict(res.headers)) from err
    except (OSError, WebSocketException) as err:
        if isinstance(err, SandboxdError):
            raise
        raise ConnectionError(f"{what}: cannot open {url.split('?')[0]} ({err!r})", code="CONNECTION_ERROR") from err
    return Socket(ws, what)
