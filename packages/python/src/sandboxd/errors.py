"""Typed errors.

The class is chosen by the response's ``code`` first (the service's closed registry, copied in
``ERROR_CODES``; a test keeps it equal to ``packages/protocol/src/errors.ts``), then by the HTTP
status, so that a code this SDK does not know yet still lands in the right family.
"""

from __future__ import annotations

import json
import re
import time
from email.utils import parsedate_to_datetime
from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "SandboxdError",
    "ValidationError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ConflictError",
    "InvalidStateError",
    "SandboxExpiredError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "RateLimitError",
    "ServerError",
    "TimeoutError",
    "ConnectionError",
    "TemplateBuildError",
    "ERROR_CODES",
    "error_class_for",
    "error_from_response",
]


class SandboxdError(Exception):
    """Every error the SDK raises.

    ``code`` is the service's error code (``NOT_FOUND``, ``FILE_NOT_FOUND``...) or a client-side one
    (``TIMEOUT``, ``CONNECTION_ERROR``); ``status`` the HTTP status when there was a response;
    ``request_id`` the id of the failed request (quote it when reporting a problem); ``body`` the
    parsed error body as the service sent it.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: Optional[int] = None,
        request_id: Optional[str] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id
        self.body = body

    @property
    def incident_id(self) -> Optional[str]:
        """On a 5xx: the id of the service's log line about this failure."""
        v = self.body.get("incident_id") if isinstance(self.body, dict) else None
        return v if isinstance(v, str) else None

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "name": type(self).__name__,
            "code": self.code,
            "status": self.status,
            "message": self.message,
            "request_id": self.request_id,
        }
        if self.incident_id:
            out["incident_id"] = self.incident_id
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r}, status={self.status!r})"


class ValidationError(SandboxdError):
    """400: the request was malformed or a value was out of range."""


class AuthenticationError(SandboxdError):
    """401: missing, wrong, revoked or expired credentials."""


class PermissionDeniedError(SandboxdError):
    """403: the key lacks a scope, or the resource belongs to another organization."""


class NotFoundError(SandboxdError):
    """404: sandbox, template, build, snapshot, file or process does not exist."""

    @property
    def path(self) -> Optional[str]:
        """The path, for file errors."""
        v = self.body.get("path") if isinstance(self.body, dict) else None
        return v if isinstance(v, str) else None


class MethodNotAllowedError(SandboxdError):
    """405: the path exists but not with this method."""


class ConflictError(SandboxdError):
    """409: conflicts with existing state (a template alias that exists, a quota reached)."""


class InvalidStateError(ConflictError):
    """409: not possible in the current state, e.g. pausing a stopped sandbox."""


class SandboxExpiredError(SandboxdError):
    """410: the sandbox reached its timeout and was deleted."""

    @property
    def expires_at(self) -> Optional[str]:
        v = self.body.get("expires_at") if isinstance(self.body, dict) else None
        return v if isinstance(v, str) else None


class PayloadTooLargeError(SandboxdError):
    """413: body, file or disk too large."""


class UnsupportedMediaTypeError(SandboxdError):
    """415: the request's content type is not one the operation takes."""


class RateLimitError(SandboxdError):
    """429: rate limit or quota exceeded. ``retry_after`` is in seconds when the service said."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after

    def to_dict(self) -> Dict[str, Any]:
        return {**super().to_dict(), "retry_after": self.retry_after}


class ServerError(SandboxdError):
    """5xx: the service itself failed."""


class TimeoutError(SandboxdError):  # noqa: A001 - the SDK's own, as in the TypeScript SDK
    """The call did not finish within its client-side timeout."""


class ConnectionError(SandboxdError):  # noqa: A001
    """The service could not be reached, or the connection broke."""


class TemplateBuildError(SandboxdError):
    """A template build ended in ``failed``; ``logs`` holds its last lines."""

    def __init__(self, message: str, *, build_id: str, logs: Optional[list] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.build_id = build_id
        self.logs: list = list(logs or [])


# The service's error codes and their statuses (packages/protocol/src/errors.ts).
ERROR_CODES: Mapping[str, int] = {
    "VALIDATION_ERROR": 400,
    "INVALID_TEMPLATE_DEFINITION": 400,
    "INVALID_FILE_METADATA": 400,
    "INVALID_LANGUAGE": 400,
    "INVALID_PATH": 400,
    "NOT_A_FILE": 400,
    "NOT_A_DIRECTORY": 400,
    "BINARY_FILE": 400,
    "LIMIT_EXCEEDED": 400,
    "AUTHENTICATION_ERROR": 401,
    "TOKEN_EXPIRED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "TEMPLATE_NOT_FOUND": 404,
    "BUILD_NOT_FOUND": 404,
    "SNAPSHOT_NOT_FOUND": 404,
    "VOLUME_NOT_FOUND": 404,
    "WINDOW_NOT_FOUND": 404,
    "ELEMENT_NOT_FOUND": 404,
    "RECORDING_NOT_FOUND": 404,
    "KEY_NOT_FOUND": 404,
    "ORG_NOT_FOUND": 404,
    "ROUTE_NOT_FOUND": 404,
    "FILE_NOT_FOUND": 404,
    "PROCESS_NOT_FOUND": 404,
    "CONTEXT_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "INVALID_STATE": 409,
    "SANDBOX_PAUSED": 409,
    "SANDBOX_STOPPED": 409,
    "TEMPLATE_EXISTS": 409,
    "TEMPLATE_IN_USE": 409,
    "VOLUME_IN_USE": 409,
    "TEMPLATE_NOT_READY": 409,
    "ALREADY_EXISTS": 409,
    "CONTEXT_LIMIT": 409,
    "ORG_QUOTA_EXCEEDED": 409,
    "SANDBOX_EXPIRED": 410,
    "PAYLOAD_TOO_LARGE": 413,
    "FILE_TOO_LARGE": 413,
    "DISK_FULL": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "RATE_LIMIT_EXCEEDED": 429,
    "QUOTA_EXCEEDED": 429,
    "INTERNAL_ERROR": 500,
    "AGENT_UNAVAILABLE": 502,
    "PORT_NOT_LISTENING": 502,
    "DESKTOP_NOT_AVAILABLE": 501,
    "RUNTIME_ERROR": 503,
    "NO_CAPACITY": 503,
    "NODE_UNAVAILABLE": 503,
    "STORE_UNAVAILABLE": 503,
    "TEMPLATE_BUILDING": 503,
    "INSUFFICIENT_STORAGE": 507,
}

# 409 codes that mean "not in this state" rather than "already exists".
_INVALID_STATE_CODES = frozenset({"INVALID_STATE", "SANDBOX_PAUSED", "SANDBOX_STOPPED", "TEMPLATE_NOT_READY"})


def _class_for_status(status: int) -> Type[SandboxdError]:
    if status in (400, 422):
        return ValidationError
    if status == 401:
        return AuthenticationError
    if status == 403:
        return PermissionDeniedError
    if status == 404:
        return NotFoundError
    if status == 405:
        return MethodNotAllowedError
    if status == 409:
        return ConflictError
    if status == 410:
        return SandboxExpiredError
    if status == 413:
        return PayloadTooLargeError
    if status == 415:
        return UnsupportedMediaTypeError
    if status == 429:
        return RateLimitError
    if status >= 500:
        return ServerError
    return SandboxdError


def error_class_for(code: Optional[str], status: int = 0) -> Type[SandboxdError]:
    """The error class for a code (if known), else for the status."""
    if code:
        if code in _INVALID_STATE_CODES:
            return InvalidStateError
        known = ERROR_CODES.get(code)
        if known is not None:
            return _class_for_status(known)
        if code.endswith("_NOT_FOUND"):
            return NotFoundError
    return _class_for_status(status)


def _str(v: Any) -> Optional[str]:
    return v if isinstance(v, str) and v else None


_NUMBER = re.compile(r"^\d+(\.\d+)?$")


def parse_retry_after(body_value: Any, header: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds from a ``retry_after`` body field or a ``Retry-After`` header (seconds or an HTTP date)."""
    if isinstance(body_value, (int, float)) and not isinstance(body_value, bool) and body_value >= 0:
        return float(body_value)
    if isinstance(body_value, str) and _NUMBER.match(body_value.strip()):
        return float(body_value)
    if not header:
        return None
    h = header.strip()
    if _NUMBER.match(h):
        return float(h)
    try:
        at = parsedate_to_datetime(h).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, float(int(at - (now if now is not None else time.time()) + 0.999)))


def error_from_response(status: int, body: Any, headers: Optional[Mapping[str, str]] = None) -> SandboxdError:
    """The typed error of a non-2xx answer (the flat body of the API, or a nested ``{error: {code, message}}``)."""
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            body = json.loads(text) if text.strip() else None
        except ValueError:
            body = text
    obj = body if isinstance(body, dict) else {}
    err_field = obj.get("error")
    nested: Dict[str, Any] = err_field if isinstance(err_field, dict) else {}
    code = _str(obj.get("code")) or _str(nested.get("code"))
    message = (
        _str(obj.get("message"))
        or _str(nested.get("message"))
        or _str(obj.get("error"))
        or (body.strip()[:500] if isinstance(body, str) and body.strip() else None)
        or (f"Request failed with status {status}" if status else "Request failed")
    )
    h = {k.lower(): v for k, v in (headers or {}).items()}
    request_id = _str(obj.get("request_id")) or _str(nested.get("request_id")) or h.get("x-request-id")
    cls = error_class_for(code, status)
    kw: Dict[str, Any] = {
        "code": code or (f"HTTP_{status}" if status else "UNKNOWN"),
        "status": status or None,
        "request_id": request_id,
        "body": body,
    }
    if cls is RateLimitError:
        retry = parse_retry_after(obj.get("retry_after", nested.get("retry_after")), h.get("retry-after"))
        return RateLimitError(message, retry_after=retry, **kw)
    return cls(message, **kw)
