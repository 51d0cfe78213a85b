"""Retries and timeouts of the HTTP layer, on a mocked transport (respx): only what is safe to repeat
is repeated."""

from __future__ import annotations

import httpx
import pytest
import respx

from sandboxd import ApiClient, AsyncApiClient, ConnectionError, RateLimitError, Sandbox, ServerError, Template, TimeoutError

BASE = "http://sandboxd.test"


def test_a_get_is_retried_after_a_5xx() -> None:
    with respx.mock(base_url=BASE, assert_all_called=True) as mock:
        route = mock.get("/v1/templates").mock(side_effect=[httpx.Response(503, json={"code": "RUNTIME_ERROR"}), httpx.Response(200, json={"data": [{"name": "base"}]})])
        with ApiClient("k", BASE) as c:
            assert [t.name for t in Template.list(client=c)] == ["base"]
        assert route.call_count == 2
        assert route.calls[0].request.headers["x-api-key"] == "k"


def test_a_post_is_never_repeated_after_an_answer() -> None:
    with respx.mock(base_url=BASE) as mock:
        route = mock.post("/v1/sandboxes").mock(return_value=httpx.Response(503, json={"code": "NO_CAPACITY", "message": "full"}))
        with ApiClient("k", BASE) as c, pytest.raises(ServerError) as e:
            Sandbox.create(client=c)
        assert route.call_count == 1 and e.value.code == "NO_CAPACITY"


def test_a_refused_connection_is_retried_even_for_a_post() -> None:
    with respx.mock(base_url=BASE) as mock:
        route = mock.post("/v1/sandboxes").mock(side_effect=[httpx.ConnectError("refused"), httpx.Response(201, json={"id": "sb_1", "status": "running", "auth_token": "t"})])
        with ApiClient("k", BASE) as c:
            assert Sandbox.create(client=c).id == "sb_1"
        assert route.call_count == 2


def test_retries_end_with_a_connection_error_and_a_read_timeout_is_a_timeout_error() -> None:
    with respx.mock(base_url=BASE) as mock:
        mock.get("/v1/templates").mock(side_effect=httpx.ConnectError("refused"))
        mock.get("/v1/templates/slow").mock(side_effect=httpx.ReadTimeout("slow"))
        with ApiClient("k", BASE, max_retries=1) as c:
            with pytest.raises(ConnectionError):
                Template.list(client=c)
            with pytest.raises(TimeoutError):
                Template.get("slow", client=c)


def test_rate_limit_carries_retry_after() -> None:
    with respx.mock(base_url=BASE) as mock:
        mock.get("/v1/templates").mock(return_value=httpx.Response(429, json={"code": "RATE_LIMIT_EXCEEDED", "message": "wait"}, headers={"retry-after": "2"}))
        with ApiClient("k", BASE, max_retries=0) as c, pytest.raises(RateLimitError) as e:
            Template.list(client=c)
        assert e.value.retry_after == 2.0


async def test_the_async_client_retries_the_same_way() -> None:
    with respx.mock(base_url=BASE) as mock:
        route = mock.get("/v1/templates").mock(side_effect=[httpx.Response(502), httpx.Response(200, json={"data": []})])
        async with AsyncApiClient("k", BASE) as c:
            from sandboxd import AsyncTemplate

            assert await AsyncTemplate.list(client=c) == []
        assert route.call_count == 2


def test_base_url_and_key_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXD_API_URL", "http://elsewhere:9/v1/")
    monkeypatch.setenv("SANDBOXD_API_KEY", "from-env")
    c = ApiClient()
    assert (c.config.base_url, c.config.api_key) == ("http://elsewhere:9", "from-env")
    c.close()
