"""Every code of the one error registry (packages/protocol/src/errors.ts) maps to a typed exception."""

from __future__ import annotations

import re

import pytest

import sandboxd
from sandboxd import errors
from sandboxd.errors import ERROR_CODES, SandboxdError, error_class_for, error_from_response

from .conftest import REPO


def registry() -> dict:
    text = (REPO / "packages/protocol/src/errors.ts").read_text()
    block = text[text.index("export const ERROR_CODES") :]
    block = block[: block.index("} as const")]
    codes = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\s+([A-Z][A-Z0-9_]+): \{ status: (\d+)", block, re.M)}
    assert len(codes) > 40, "the registry was read"
    return codes


def test_the_sdk_knows_every_code_of_the_registry_with_its_status() -> None:
    assert dict(ERROR_CODES) == registry()


@pytest.mark.parametrize("code,status", sorted(registry().items()))
def test_each_code_has_its_own_exception_family(code: str, status: int) -> None:
    cls = error_class_for(code, 0)
    assert cls is not SandboxdError and issubclass(cls, SandboxdError)
    assert getattr(sandboxd, cls.__name__) is cls, "exported"
    err = error_from_response(status, {"error": "x", "message": f"{code} happened", "code": code, "request_id": "req_1"})
    assert type(err) is cls and (err.code, err.status, err.message, err.request_id) == (code, status, f"{code} happened", "req_1")
    family = {
        400: errors.ValidationError,
        401: errors.AuthenticationError,
        403: errors.PermissionDeniedError,
        404: errors.NotFoundError,
        405: errors.MethodNotAllowedError,
        409: errors.ConflictError,
        410: errors.SandboxExpiredError,
        413: errors.PayloadTooLargeError,
        415: errors.UnsupportedMediaTypeError,
        429: errors.RateLimitError,
    }.get(status, errors.ServerError)
    assert issubclass(cls, family)


def test_state_codes_are_invalid_state_errors_and_unknown_codes_fall_back_on_the_status() -> None:
    for code in ("INVALID_STATE", "SANDBOX_PAUSED", "SANDBOX_STOPPED", "TEMPLATE_NOT_READY"):
        assert error_class_for(code) is errors.InvalidStateError
    assert error_class_for("TEMPLATE_EXISTS") is errors.ConflictError
    assert error_class_for("WIDGET_NOT_FOUND", 400) is errors.NotFoundError
    assert error_class_for("SOMETHING_NEW", 503) is errors.ServerError
    assert type(error_from_response(418, "I'm a teapot")) is SandboxdError


def test_bodies_nested_text_and_retry_after() -> None:
    nested = error_from_response(404, {"error": {"code": "FILE_NOT_FOUND", "message": "gone", "path": "/x"}})
    assert isinstance(nested, errors.NotFoundError) and nested.message == "gone"
    text = error_from_response(502, b"Bad Gateway", {"X-Request-ID": "req_9"})
    assert isinstance(text, errors.ServerError) and text.message == "Bad Gateway" and text.request_id == "req_9"
    limited = error_from_response(429, {"code": "RATE_LIMIT_EXCEEDED", "message": "slow down"}, {"Retry-After": "3"})
    assert isinstance(limited, errors.RateLimitError) and limited.retry_after == 3.0
    assert error_from_response(429, {"code": "QUOTA_EXCEEDED", "retry_after": 7}).retry_after == 7.0
    incident = error_from_response(500, {"code": "INTERNAL_ERROR", "message": "x", "incident_id": "inc_1"})
    assert incident.incident_id == "inc_1" and incident.to_dict()["incident_id"] == "inc_1"
    expired = error_from_response(410, {"code": "SANDBOX_EXPIRED", "expires_at": "2026-01-01T00:00:00Z"})
    assert isinstance(expired, errors.SandboxExpiredError) and expired.expires_at == "2026-01-01T00:00:00Z"
