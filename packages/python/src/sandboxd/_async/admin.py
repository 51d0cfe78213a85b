from __future__ import annotations

from typing import Any, Dict, List, Optional
from urllib.parse import quote

from ..types import ApiKeyInfo, CreatedApiKey, DeletedOrg, EventsToken, OrgInfo
from ._http import AsyncApiClient
from .sandbox import AsyncEventStream


class AsyncAdmin:
    """The admin API (``/v1/admin``): organizations and API keys. It needs a key of the operator's
    organization with the ``admin`` scope; any other key gets a PermissionDeniedError."""

    def __init__(self, api_key: Optional[str] = None, base_url: Optional[str] = None, *, client: Optional[AsyncApiClient] = None) -> None:
        self.client = AsyncApiClient.of(client, api_key, base_url)

    async def _call(self, method: str, path: str, what: str, **kw: Any) -> Dict[str, Any]:
        return await self.client.http.json(method, path, what=what, **kw)

    async def list_orgs(self) -> List[OrgInfo]:
        body = await self._call("GET", "/v1/admin/orgs", "list organizations")
        return [OrgInfo.from_wire(o) for o in body.get("data") or []]

    async def create_org(self, name: str) -> OrgInfo:
        return OrgInfo.from_wire(await self._call("POST", "/v1/admin/orgs", f"create organization {name}", json={"name": name}))

    async def delete_org(self, name_or_id: str) -> DeletedOrg:
        """Deletes an organization and everything it made (keys revoked; sandboxes, snapshots,
        templates and uploads deleted); ``deleted`` says how many of each went."""
        body = await self._call("DELETE", f"/v1/admin/orgs/{quote(name_or_id, safe='')}", f"delete organization {name_or_id}")
        raw = body.get("deleted")
        d: Dict[str, Any] = raw if isinstance(raw, dict) else {}
        org = OrgInfo.from_wire(body)
        counts = {k: int(d.get(k, 0)) for k in ("keys", "sandboxes", "snapshots", "templates", "uploads")}
        return DeletedOrg(org.id, org.name, org.created_at, counts)

    async def list_keys(self, *, org: Optional[str] = None) -> List[ApiKeyInfo]:
        """Every key (of one organization with ``org``: its name or id), revoked ones included; never a secret."""
        body = await self._call("GET", "/v1/admin/keys", "list API keys", query={"org": org})
        return [ApiKeyInfo.from_wire(k) for k in body.get("data") or []]

    async def create_key(self, org: str, *, name: Optional[str] = None, scopes: Optional[List[str]] = None, format: Optional[str] = None) -> CreatedApiKey:
        """A new key of organization ``org`` (name or id); without ``scopes`` it gets the sandboxes and
        templates scopes. Its ``secret`` is shown this once only."""
        payload = {k: v for k, v in {"org": org, "name": name, "scopes": scopes, "format": format}.items() if v is not None}
        body = await self._call("POST", "/v1/admin/keys", f"create an API key for {org}", json=payload)
        k = ApiKeyInfo.from_wire(body)
        return CreatedApiKey(**k.__dict__, secret=str(body.get("secret", "")))

    async def revoke_key(self, key_id: str) -> ApiKeyInfo:
        """Revokes a key at once (the tokens it made stop working too)."""
        return ApiKeyInfo.from_wire(await self._call("DELETE", f"/v1/admin/keys/{quote(key_id, safe='')}", f"revoke API key {key_id}"))

    async def close(self) -> None:
        await self.client.close()


class AsyncEvents:
    """The organization's lifecycle events (server-sent): every sandbox's ``created``, ``paused``,
    ``resumed``, ``stopped``, ``started``, ``deleted``, ``expired``, ``oom_killed``."""

    def __init__(self, api_key: Optional[str] = None, base_url: Optional[str] = None, *, client: Optional[AsyncApiClient] = None) -> None:
        self.client = AsyncApiClient.of(client, api_key, base_url)

    async def stream(self) -> AsyncEventStream:
        """The events as they happen: the stream is open when this returns, so no later event is
        missed. Iterate it; ``close()`` (or leaving ``with``) ends it."""
        res = await self.client.http.send("GET", "/v1/events", accept="text/event-stream", timeout=0, stream=True, what="events")
        return AsyncEventStream(res)

    async def token(self) -> EventsToken:
        """A short-lived token that opens ``/v1/events?token=`` (for a browser's EventSource: an API key never goes in a URL)."""
        body = await self.client.http.json("POST", "/v1/events/token", json={}, what="events token")
        return EventsToken(body.get("token", ""), body.get("expires_at", ""), body.get("sandbox_id"))

    async def close(self) -> None:
        await self.client.close()
