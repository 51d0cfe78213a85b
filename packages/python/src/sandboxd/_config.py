"""Connection settings. The only place the SDK reads the environment."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

DEFAULT_API_URL = "http://127.0.0.1:8080"


def _env(name: str) -> Optional[str]:
    v = os.environ.get(name, "").strip()
    return v or None


@dataclass(frozen=True)
class Config:
    api_key: Optional[str]
    base_url: str
    request_timeout: float
    max_retries: int


def resolve_config(
    api_key: Optional[str] = None,
    base_url: Optional[str] = None,
    request_timeout: Optional[float] = None,
    max_retries: Optional[int] = None,
) -> Config:
    """``api_key`` defaults to ``SANDBOXD_API_KEY``; ``base_url`` to ``SANDBOXD_API_URL``, else
    ``http://127.0.0.1:8080``; ``request_timeout`` (seconds) to 60; ``max_retries`` to 2."""
    url = base_url or _env("SANDBOXD_API_URL") or DEFAULT_API_URL
    url = re.sub(r"/v1$", "", url.rstrip("/"))
    return Config(
        api_key=api_key if api_key is not None else _env("SANDBOXD_API_KEY"),
        base_url=url,
        request_timeout=60.0 if request_timeout is None else float(request_timeout),
        max_retries=2 if max_retries is None else int(max_retries),
    )
