# Generated from sandboxd/_async/env.py by scripts/unasync.py: edit that file, then run the script.
from __future__ import annotations

from typing import Any, Dict, Optional
from urllib.parse import quote

from ..types import CacheStats
from ._agent import Agent


class Env:
    """The sandbox's environment variables, applied to every later execution and command (below a
    call's own ``env``). Every change returns the full resulting set."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def get_all(self, *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        return self._call("GET", "/env", None, request_timeout, "get env")

    def get(self, key: str, *, request_timeout: Optional[float] = None) -> Optional[str]:
        return (self.get_all(request_timeout=request_timeout)).get(key)

    def set(self, key: str, value: str, *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        return self.update({key: value}, request_timeout=request_timeout)

    def update(self, env_vars: Dict[str, str], *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        """Sets the given variables, keeping the others."""
        return self._call("PATCH", "/env", {"env_vars": env_vars}, request_timeout, "update env")

    def replace(self, env_vars: Dict[str, str], *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        """Replaces the whole set."""
        return self._call("PUT", "/env", {"env_vars": env_vars}, request_timeout, "replace env")

    def delete(self, key: str, *, request_timeout: Optional[float] = None) -> Dict[str, str]:
        return self._call("DELETE", f"/env/{quote(key, safe='')}", None, request_timeout, f"delete env {key}")

    def _call(self, method: str, path: str, json: Any, request_timeout: Optional[float], what: str) -> Dict[str, str]:
        body = self._agent.http.json(method, path, json=json, timeout=request_timeout, what=what)
        v = body.get("env_vars")
        return {k: str(x) for k, x in v.items()} if isinstance(v, dict) else {}


class Cache:
    """The agent's cache of compiled programs and (opt-in) execution results."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def stats(self, *, request_timeout: Optional[float] = None) -> CacheStats:
        return CacheStats.from_wire(self._agent.http.json("GET", "/cache/stats", timeout=request_timeout, what="cache stats"))

    def clear(self, *, request_timeout: Optional[float] = None) -> int:
        """Empties the cache; returns the number of entries removed."""
        body = self._agent.http.json("POST", "/cache/clear", timeout=request_timeout, what="clear cache")
        n = body.get("entries_removed")
        return n if isinstance(n, int) else 0

