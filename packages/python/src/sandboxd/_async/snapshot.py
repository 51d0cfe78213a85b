from __future__ import annotations

from typing import AsyncIterator, Dict, Optional
from urllib.parse import quote

from ..errors import SandboxdError
from ..types import SnapshotInfo, SnapshotPage, TemplateInfo
from ._http import AsyncApiClient
from .sandbox import COPY_TIMEOUT, SnapshotRef, snapshot_id_of


class AsyncSnapshot:
    """The organization's snapshots: list, inspect, delete, make templates of them. Take one with
    ``sandbox.snapshot()``; start sandboxes from one with ``create(snapshot=...)``."""

    @staticmethod
    async def list(
        *,
        sandbox_id: Optional[str] = None,
        limit: Optional[int] = None,
        max_items: Optional[int] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[AsyncApiClient] = None,
    ) -> AsyncIterator[SnapshotInfo]:
        """The snapshots (of one sandbox with ``sandbox_id``), newest first, a page at a time as you iterate."""
        api = AsyncApiClient.of(client, api_key, base_url)
        cursor: Optional[str] = None
        seen = set()
        n = 0
        while True:
            page = await AsyncSnapshot.list_page(sandbox_id=sandbox_id, limit=limit, cursor=cursor, client=api)
            for s in page.data:
                if max_items is not None and n >= max_items:
                    return
                n += 1
                yield s
            if not page.has_more:
                return
            if not page.next_cursor or page.next_cursor in seen:
                raise SandboxdError("the service said there are more results but gave no new cursor", code="INVALID_RESPONSE")
            seen.add(page.next_cursor)
            cursor = page.next_cursor

    @staticmethod
    async def list_page(
        *,
        sandbox_id: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[AsyncApiClient] = None,
    ) -> SnapshotPage:
        api = AsyncApiClient.of(client, api_key, base_url)
        body = await api.http.json("GET", "/v1/snapshots", query={"limit": limit, "cursor": cursor, "sandbox_id": sandbox_id}, what="list snapshots")
        return SnapshotPage.from_wire(body)

    @staticmethod
    async def get(snapshot: SnapshotRef, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None) -> SnapshotInfo:
        sid = snapshot_id_of(snapshot)
        api = AsyncApiClient.of(client, api_key, base_url)
        return SnapshotInfo.from_wire(await api.http.json("GET", f"/v1/snapshots/{quote(sid, safe='')}", what=f"get snapshot {sid}"))

    @staticmethod
    async def delete(snapshot: SnapshotRef, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None) -> Dict[str, str]:
        """Deletes a snapshot (NotFoundError if there is none of that id)."""
        sid = snapshot_id_of(snapshot)
        api = AsyncApiClient.of(client, api_key, base_url)
        body = await api.http.json("DELETE", f"/v1/snapshots/{quote(sid, safe='')}", what=f"delete snapshot {sid}")
        return {"id": str(body.get("id", sid)), "status": str(body.get("status", "deleted"))}

    @staticmethod
    async def to_template(
        snapshot: SnapshotRef,
        alias: str,
        *,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[AsyncApiClient] = None,
        request_timeout: Optional[float] = None,
    ) -> TemplateInfo:
        """Makes a template named ``alias`` of the snapshot: sandboxes created with that template start with its files."""
        sid = snapshot_id_of(snapshot)
        api = AsyncApiClient.of(client, api_key, base_url)
        body = await api.http.json(
            "POST", f"/v1/snapshots/{quote(sid, safe='')}/template", json={"alias": alias},
            timeout=request_timeout or max(api.config.request_timeout, COPY_TIMEOUT), what=f"make template {alias} of snapshot {sid}",
        )
        return TemplateInfo.from_wire(body)
