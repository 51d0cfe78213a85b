# Generated from sandboxd/_async/_http.py by scripts/unasync.py: edit that file, then run the script.
"""One HTTP connection to the lifecycle API or a sandbox's agent: auth headers, retries of what is
safe to repeat, typed errors."""

from __future__ import annotations

import json as jsonlib
import platform
import random
from typing import Any, Callable, Dict, Mapping, Optional, Union

import httpx

from .._config import Config, resolve_config
from .._version import __version__
from ..errors import ConnectionError, SandboxdError, TimeoutError, error_from_response
from . import _io

USER_AGENT = f"sandboxd-python/{__version__} python/{platform.python_version()}"

Query = Mapping[str, Union[str, int, float, bool, None]]
# A body, or a function that makes it again for each attempt (so the request can be repeated).
Body = Union[bytes, str, Callable[[], Any]]


def retry_delay(attempt: int) -> float:
    """Exponential backoff with jitter: ~0.25 s, 0.5 s, 1 s ... capped at 4 s."""
    base = min(4.0, 0.25 * 2**attempt)
    return base * (0.5 + random.random() / 2)


def should_retry_status(method: str, status: int) -> bool:
    # Never a response to a non-GET: a 5xx after a POST may mean the work was done.
    return method == "GET" and status >= 500 and status not in (501, 507)


class Http:
    def __init__(
        self,
        client: _io.HttpClient,
        base_url: Callable[[], str],
        *,
        max_retries: int,
        request_timeout: float,
        auth: Optional[_io.AuthHeaders] = None,
        prepare: Optional[_io.Hook] = None,
        on_unauthorized: Optional[_io.Hook] = None,
    ) -> None:
        self.client = client
        self.base_url = base_url
        self.max_retries = max_retries
        self.request_timeout = request_timeout
        self._auth = auth
        self._prepare = prepare
        self._on_unauthorized = on_unauthorized

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else self.base_url().rstrip("/") + path

    def send(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Query] = None,
        json: Any = None,
        content: Optional[Body] = None,
        content_type: Optional[str] = None,
        headers: Optional[Dict[str, str]] = None,
        accept: str = "application/json",
        timeout: Optional[float] = None,
        no_auth: bool = False,
        what: Optional[str] = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Sends the request and returns the 2xx response (with ``stream``, unread: close it); any
        other status raises its typed error. ``timeout``: seconds to wait for the answer (0: no limit)."""
        if self._prepare is not None:
            self._prepare()
        url = self.url(path)
        what = what or f"{method} {httpx.URL(url).path}"
        replayable = content is None or callable(content)
        params = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items() if v is not None}
        t = self.request_timeout if timeout is None else timeout
        tmo = httpx.Timeout(t if t > 0 else None, connect=min(t, 30.0) if t > 0 else 30.0)
        refreshed = False
        attempt = 0
        while True:
            h: Dict[str, str] = {"user-agent": USER_AGENT, "accept": accept}
            if not no_auth and self._auth is not None:
                h.update(self._auth())
            body: Any = None
            if json is not None:
                h["content-type"] = "application/json"
                body = jsonlib.dumps(json).encode()
            elif content is not None:
                body = content() if callable(content) else content
                if content_type:
                    h["content-type"] = content_type
            h.update(headers or {})
            request = self.client.build_request(method, url, params=params, content=body, headers=h, timeout=tmo)
            try:
                res = self.client.send(request, stream=True)
            except httpx.TimeoutException as err:
                raise TimeoutError(f"{what} timed out after {t} s", code="TIMEOUT") from err
            except httpx.TransportError as err:
                # A refused connection never reached the server: safe to repeat whatever it was.
                never_sent = isinstance(err, httpx.ConnectError)
                if attempt < self.max_retries and replayable and (never_sent or method == "GET"):
                    _io.sleep(retry_delay(attempt))
                    attempt += 1
                    continue
                raise ConnectionError(f"{what}: cannot reach {request.url.host}:{request.url.port} ({err!r})", code="CONNECTION_ERROR") from err
            if res.is_success:
                if not stream:
                    try:
                        res.read()
                    except httpx.TimeoutException as err:
                        raise TimeoutError(f"{what} timed out after {t} s", code="TIMEOUT") from err
                    except httpx.TransportError as err:
                        raise ConnectionError(f"{what}: connection lost while reading the response ({err!r})", code="CONNECTION_ERROR") from err
                    finally:
                        res.close()
                return res
            try:
                raw = res.read()
            except httpx.HTTPError:
                raw = b""
            finally:
                res.close()
            if res.status_code == 401 and self._on_unauthorized is not None and not refreshed and replayable:
                refreshed = True
                self._on_unauthorized()
                continue
            if attempt < self.max_retries and replayable and should_retry_status(method, res.status_code):
                _io.sleep(retry_delay(attempt))
                attempt += 1
                continue
            raise error_from_response(res.status_code, raw, dict(res.headers))

    def json(self, method: str, path: str, **kw: Any) -> Any:
        """Sends and parses a JSON answer."""
        res = self.send(method, path, **kw)
        if not res.content:
            return {}
        try:
            return res.json()
        except ValueError as err:
            raise SandboxdError(
                f"{kw.get('what') or path}: the service answered with invalid JSON",
                code="INVALID_RESPONSE",
                status=res.status_code,
                request_id=res.headers.get("x-request-id"),
            ) from err


class ApiClient:
    """A configured connection to the lifecycle API (``{base_url}/v1/...``), shared by the sandboxes,
    templates and snapshots it is passed to (``client=``). Close it (or use ``with``) when done."""

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        request_timeout: Optional[float] = None,
        max_retries: Optional[int] = None,
        http_client: Optional[_io.HttpClient] = None,
    ) -> None:
        self.config: Config = resolve_config(api_key, base_url, request_timeout, max_retries)
        self.client = http_client or _io.HttpClient(trust_env=True)
        key = self.config.api_key

        def auth() -> Dict[str, str]:
            return {"x-api-key": key} if key else {}

        self.http = Http(
            self.client,
            lambda: self.config.base_url,
            max_retries=self.config.max_retries,
            request_timeout=self.config.request_timeout,
            auth=auth,
        )

    @classmethod
    def of(cls, client: Optional["ApiClient"], api_key: Optional[str], base_url: Optional[str]) -> "ApiClient":
        return client if client is not None else cls(api_key, base_url)

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "ApiClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
