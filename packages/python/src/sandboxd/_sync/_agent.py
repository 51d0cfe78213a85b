# Generated from sandboxd/_async/_agent.py by scripts/unasync.py: edit that file, then run the script.
"""The per-sandbox agent connection: HTTP and WebSockets at the sandbox's ``public_host`` with its
bearer token, refreshed through the lifecycle API when close to expiry or after a 401."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Callable, Dict, Optional

from ..errors import SandboxdError
from . import _io
from ._http import ApiClient, Http

REFRESH_MARGIN = 60.0


def parse_time(v: Optional[str]) -> Optional[float]:
    if not v:
        return None
    try:
        return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Tokens:
    """One sandbox's agent token: refreshed when missing or close to expiry (less than a minute, or
    half its lifetime, left), or after ``invalidate()``. Concurrent callers share one refresh."""

    def __init__(self, fetch: Callable[[], Any]) -> None:
        """``fetch`` returns (awaited, in the async client) ``(token, expires_at)``."""
        self._fetch = fetch
        # Made at first use: on Python 3.9 an asyncio.Lock binds to the loop current when it is made.
        self._lock: Optional[_io.Lock] = None
        self.token: Optional[str] = None
        self.expires_at: Optional[float] = None
        self._received_at = 0.0

    def set(self, token: str, expires_at: Optional[str]) -> None:
        self.token, self.expires_at, self._received_at = token, parse_time(expires_at), time.time()

    def needs_refresh(self) -> bool:
        if self.token is None:
            return True
        if self.expires_at is None:
            return False
        margin = min(REFRESH_MARGIN, max(0.0, (self.expires_at - self._received_at) / 2))
        return self.expires_at - time.time() < margin

    def invalidate(self) -> None:
        self.token = None

    def get(self) -> str:
        if not self.needs_refresh():
            return self.token  # type: ignore[return-value]
        if self._lock is None:
            self._lock = _io.Lock()
        with self._lock:
            if self.needs_refresh():
                self.refresh_now()
        return self.token  # type: ignore[return-value]

    def refresh_now(self) -> None:
        token, expires = self._fetch()
        self.set(token, expires)


class Agent:
    def __init__(self, api: ApiClient, tokens: Tokens, public_host: Callable[[], str], prepare: _io.Hook) -> None:
        self.api = api
        self.tokens = tokens
        self._public_host = public_host
        self.prepare = prepare

        def auth() -> Dict[str, str]:
            return {"authorization": f"Bearer {tokens.get()}"}

        def unauthorized() -> None:
            tokens.invalidate()

        self.auth_headers = auth
        self.http = Http(
            api.client,
            self.base_url,
            max_retries=api.config.max_retries,
            request_timeout=api.config.request_timeout,
            auth=auth,
            prepare=prepare,
            on_unauthorized=unauthorized,
        )

    def base_url(self) -> str:
        host = self._public_host()
        if not host:
            raise SandboxdError("this sandbox has no public_host (is it running?)", code="INVALID_STATE")
        return host.rstrip("/")

    def socket(self, path: str, timeout: float = 30.0, what: Optional[str] = None) -> _io.Socket:
        """Opens an agent WebSocket; an upgrade refused with 401 refreshes the token and tries once more."""
        self.prepare()
        url = self.base_url() + path
        url = "ws" + url[4:] if url.startswith("http") else url
        for attempt in range(2):
            try:
                return _io.open_socket(url, self.auth_headers(), timeout, what or path)
            except SandboxdError as err:
                if attempt == 0 and err.status == 401:
                    self.tokens.invalidate()
                    continue
                raise
        raise AssertionError("unreachable")
