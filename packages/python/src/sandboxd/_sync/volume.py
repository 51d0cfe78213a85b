# Generated from sandboxd/_async/volume.py by scripts/unasync.py: edit that file, then run the script.
from __future__ import annotations

from typing import Dict, List, Optional, Union
from urllib.parse import quote

from ..types import VolumeInfo
from ._http import ApiClient

VolumeRef = Union[str, VolumeInfo]


def _ref(v: VolumeRef) -> str:
    return quote(v if isinstance(v, str) else v.id, safe="")


class Volume:
    """The organization's volumes: filesystems that outlive sandboxes. Any number of its sandboxes
    mount one at once (``create(volumes=[{"volume": "data", "path": "/data"}])``), read-write unless
    ``read_only``; writes past ``size_gb`` fail with ENOSPC inside."""

    @staticmethod
    def create(name: str, size_gb: int, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[ApiClient] = None) -> VolumeInfo:
        """Makes a volume named ``name`` (unique in the organization: ConflictError otherwise)."""
        api = ApiClient.of(client, api_key, base_url)
        return VolumeInfo.from_wire(api.http.json("POST", "/v1/volumes", json={"name": name, "size_gb": size_gb}, what=f"create volume {name}"))

    @staticmethod
    def list(*, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[ApiClient] = None) -> List[VolumeInfo]:
        api = ApiClient.of(client, api_key, base_url)
        body = api.http.json("GET", "/v1/volumes", what="list volumes")
        return [VolumeInfo.from_wire(v) for v in body.get("data") or []]

    @staticmethod
    def get(volume: VolumeRef, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[ApiClient] = None) -> VolumeInfo:
        """One volume by name or id, with ``used_bytes`` (NotFoundError if there is none such)."""
        api = ApiClient.of(client, api_key, base_url)
        return VolumeInfo.from_wire(api.http.json("GET", f"/v1/volumes/{_ref(volume)}", what="get volume"))

    @staticmethod
    def delete(
        volume: VolumeRef, *, force: bool = False, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[ApiClient] = None
    ) -> Dict[str, str]:
        """Deletes a volume and its files; one a sandbox mounts is refused (ConflictError,
        ``VOLUME_IN_USE``) unless ``force``, which deletes those sandboxes first."""
        api = ApiClient.of(client, api_key, base_url)
        body = api.http.json("DELETE", f"/v1/volumes/{_ref(volume)}", query={"force": "true" if force else None}, what="delete volume")
        return {"id": str(body.get("id", "")), "status": str(body.get("status", "deleted"))}
