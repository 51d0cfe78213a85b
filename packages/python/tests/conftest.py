"""The tests talk to a real daemon: SANDBOXD_API_URL and SANDBOXD_API_KEY (an operator key with
the admin scope) name it. e2e/src/python-sdk.test.ts starts one and runs this suite."""

from __future__ import annotations

import os
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest

from sandboxd import ApiClient, AsyncApiClient, AsyncSandbox, Sandbox

REPO = Path(__file__).resolve().parents[3]
PKG = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def daemon() -> dict:
    url, key = os.environ.get("SANDBOXD_API_URL"), os.environ.get("SANDBOXD_API_KEY")
    if not url or not key:
        pytest.fail("SANDBOXD_API_URL and SANDBOXD_API_KEY must name a running daemon (see e2e/src/python-sdk.test.ts)")
    return {"base_url": url, "api_key": key}


@pytest.fixture(scope="session")
def client(daemon: dict) -> Iterator[ApiClient]:
    with ApiClient(daemon["api_key"], daemon["base_url"]) as c:
        yield c


@pytest.fixture(scope="module")
def sandbox(daemon: dict) -> Iterator[Sandbox]:
    """One sandbox shared by a module's tests that do not change its lifecycle."""
    with Sandbox.create("code-interpreter", timeout_seconds=1200) as sb:
        yield sb


@pytest.fixture
async def aclient(daemon: dict) -> AsyncIterator[AsyncApiClient]:
    async with AsyncApiClient(daemon["api_key"], daemon["base_url"]) as c:
        yield c


@pytest.fixture
async def asandbox(aclient: AsyncApiClient) -> AsyncIterator[AsyncSandbox]:
    async with await AsyncSandbox.create("code-interpreter", client=aclient, timeout_seconds=600) as sb:
        yield sb
