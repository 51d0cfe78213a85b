from __future__ import annotations

from typing import Any, Dict, Optional
from urllib.parse import quote

from ..types import CacheStats
from ._agent import AsyncAgent


class AsyncEnv:
    """The sandbox's environment variables, applied to every later execution and command (below a
    call's own ``env``). Every change returns the full resulting set."""

    def __init__(self, agent: AsyncAgent) -> None:
        self._agent = agent

    async def get_all(self, *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        return await self._call("GET", "/env", None, request_timeout, "get env")

    async def get(self, key: str, *, request_timeout: Optional[float] = None) -> Optional[str]:
        return (await self.get_all(request_timeout=request_timeout)).get(key)

    async def set(self, key: str, value: str, *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        return await self.update({key: value}, request_timeout=request_timeout)

    async def update(self, env_vars: Dict[str, str], *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        """Sets the given variables, keeping the others."""
        return await self._call("PATCH", "/env", {"env_vars": env_vars}, request_timeout, "update env")

    async def replace(self, env_vars: Dict[str, str], *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        """Replaces the whole set."""
        return await self._call("PUT", "/env", {"env_vars": env_vars}, request_timeout, "replace env")

    async def delete(self, key: str, *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        return await self._call("DELETE", f"/env/{quote(key, safe='')}", None, request_timeout, f"delete env {key}")

    async def _call(self, method: str, path: str, json: Any, request_timeout: Optional[float], what: str) -> Dict[str, str]:
        body = await self._agent.http.json(method, path, json=json, timeout=request_timeout, what=what)
        v = body.get("env_vars")
        return {k: str(x) for k, x in v.items()} if isinstance(v, dict) else {}


class AsyncCache:
    """The agent's cache of compiled programs and (opt-in) execution results."""

    def __init__(self, agent: AsyncAgent) -> None:
        self._agent = agent

    async def stats(self, *, request_timeout: Optional[float] = None) -> CacheStats:
        return CacheStats.from_wire(await self._agent.http.json("GET", "/cache/stats", timeout=request_timeout, what="cache stats"))

    async def clear(self, *, request_timeout: Optional[float] = None) -> int:
        """Empties the cache; returns the number of entries removed."""
        body = await self._agent.http.json("POST", "/cache/clear", timeout=request_timeout, what="clear cache")
        n = body.get("entries_removed")
        return n if isinstance(n, int) else 0

