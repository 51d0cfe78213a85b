from __future__ import annotations

import hashlib
import json as jsonlib
import os
import re
import tempfile
import time
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Sequence
from urllib.parse import quote

from .. import _tar
from .._sse import SseParser
from ..errors import TemplateBuildError, TimeoutError, ValidationError
from ..types import BuildLogEntry, BuildLogsChunk, BuildResult, BuildStarted, BuildStatus, TemplateInfo
from . import _io
from ._http import AsyncApiClient
from .files import file_chunks

SUCCESS = frozenset({"active", "success", "completed", "ready"})
FAILURE = frozenset({"failed", "error", "cancelled", "canceled"})
MAX_UPLOAD_BYTES = 100 * 1024 * 1024

# A build step: {"type": "from", "image": ...}, {"type": "apt", "packages": [...]},
# {"type": "run", "command": ...}, {"type": "copy", "src": "dir/" | [...], "dest": ...},
# {"type": "env", "key": ..., "value": ...}, {"type": "workdir", "path": ...}.
BuildStep = Dict[str, Any]


def is_terminal_build_status(status: str) -> bool:
    return status in SUCCESS or status in FAILURE


def _level(message: str) -> str:
    if re.search(r"\b(error|fatal|failed)\b", message, re.I):
        return "error"
    if re.search(r"\bwarn(ing)?\b", message, re.I):
        return "warn"
    return "info"


def _log_entry(v: Any) -> BuildLogEntry:
    if isinstance(v, dict):
        message, lvl, ts = v.get("message"), v.get("level"), v.get("timestamp")
        msg = message if isinstance(message, str) else jsonlib.dumps(v)
        return BuildLogEntry(lvl.lower() if isinstance(lvl, str) else _level(msg), msg, ts if isinstance(ts, str) else "")
    msg = v if isinstance(v, str) else jsonlib.dumps(v)
    return BuildLogEntry(_level(msg), msg)


def _context_path(src: str, context_dir: str) -> str:
    full = os.path.abspath(os.path.join(context_dir, src))
    rel = os.path.relpath(full, os.path.abspath(context_dir))
    if rel.startswith(".."):
        raise ValidationError(f"copy source {src} is outside the context directory {context_dir}", code="VALIDATION_ERROR")
    if not os.path.exists(full):
        raise ValidationError(f"copy source {src} not found (looked in {full})", code="VALIDATION_ERROR")
    if "," in rel:
        raise ValidationError(f"copy source {src}: names with a comma cannot be sent", code="VALIDATION_ERROR")
    return rel.replace(os.sep, "/")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


class AsyncTemplate:
    """Templates: list, inspect, delete, and build custom ones from steps."""

    @staticmethod
    async def build(
        alias: str,
        steps: Sequence[BuildStep],
        *,
        cpu: Optional[float] = None,
        memory: Optional[int] = None,
        disk_gb: Optional[int] = None,
        skip_cache: bool = False,
        context_dir: str = ".",
        wait: bool = True,
        on_log: Optional[Callable[[BuildLogEntry], Any]] = None,
        on_progress: Optional[Callable[[BuildStatus], Any]] = None,
        poll_interval: float = 1.0,
        timeout: Optional[float] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[AsyncApiClient] = None,
    ) -> BuildResult:
        """Builds a template named ``alias`` (the first step must be ``from``; ``memory`` in MB) and,
        unless ``wait=False``, follows it to the end, streaming its log to ``on_log``; raises
        TemplateBuildError (with the last log lines) if it fails. Local ``copy`` sources are relative
        to ``context_dir``, packed and uploaded first."""
        api = AsyncApiClient.of(client, api_key, base_url)
        started = await AsyncTemplate.start_build(alias, steps, cpu=cpu, memory=memory, disk_gb=disk_gb, skip_cache=skip_cache, context_dir=context_dir, client=api)
        if not wait:
            return BuildResult(started.build_id, started.template_id, started.status, started.logs_url)
        return await AsyncTemplate.wait_for_build(started.build_id, on_log=on_log, on_progress=on_progress, poll_interval=poll_interval, timeout=timeout, client=api)

    @staticmethod
    async def start_build(
        alias: str,
        steps: Sequence[BuildStep],
        *,
        cpu: Optional[float] = None,
        memory: Optional[int] = None,
        disk_gb: Optional[int] = None,
        skip_cache: bool = False,
        context_dir: str = ".",
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[AsyncApiClient] = None,
    ) -> BuildStarted:
        """Uploads local copy sources and submits the build; returns once the service accepted it."""
        api = AsyncApiClient.of(client, api_key, base_url)
        out: List[Dict[str, Any]] = []
        for step in steps:
            if step.get("type") == "copy" and step.get("src") is not None:
                srcs = step["src"] if isinstance(step["src"], (list, tuple)) else [step["src"]]
                files_hash, paths = await AsyncTemplate._upload_context(api, context_dir, [str(s) for s in srcs])
                out.append({"type": "COPY", "args": [",".join(paths), step["dest"]], "filesHash": files_hash})
            else:
                out.append(dict(step))
        body: Dict[str, Any] = {"alias": alias, "steps": out}
        for k, v in (("cpu", cpu), ("memory", memory), ("diskGB", disk_gb)):
            if v is not None:
                body[k] = v
        if skip_cache:
            body["skipCache"] = True
        res = await api.http.json("POST", "/v1/templates/build", json=body, what=f"build template {alias}")
        build_id = str(res.get("build_id") or res.get("template_id") or "")
        return BuildStarted(build_id, str(res.get("template_id") or build_id), str(res.get("status") or "building"), str(res.get("logs_url") or f"/v1/templates/build/{build_id}/logs"))

    @staticmethod
    async def _upload_context(api: AsyncApiClient, context_dir: str, sources: List[str]) -> "tuple[str, List[str]]":
        """Packs the sources into a gzip tarball (structure, modes and symlinks kept, as COPY does),
        uploads it unless the service has it, and returns its hash and the sources' paths in it."""
        paths = [_context_path(s, context_dir) for s in sources]
        with tempfile.TemporaryDirectory() as tmp:
            archive = os.path.join(tmp, "context.tar.gz")
            _tar.pack(context_dir, archive, paths, gzip=True)
            size = os.path.getsize(archive)
            if size > MAX_UPLOAD_BYTES:
                raise ValidationError("the copy sources are larger than the 100 MB limit for an upload (compressed)", code="FILE_TOO_LARGE")
            files_hash = _sha256(archive)
            link = await api.http.json("POST", "/v1/templates/files/upload-link", json={"files_hash": files_hash, "content_length": size}, what="get upload link")
            if not link.get("present") and link.get("upload_url"):
                await api.http.json(
                    "PUT", str(link["upload_url"]), content=lambda: file_chunks(archive), content_type="application/gzip",
                    headers={"content-length": str(size)}, no_auth=True, timeout=0, what="upload build context",
                )
        return files_hash, paths

    @staticmethod
    async def upload_files(paths: Sequence[str], *, context_dir: str = ".", api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None) -> List[Dict[str, str]]:
        """Uploads local files (a directory: the files in it) for ``copy`` steps naming ``file_ids``;
        returns ``[{path, file_id}]``."""
        api = AsyncApiClient.of(client, api_key, base_url)
        files: List[Dict[str, Any]] = []
        for p in paths:
            full = p if os.path.isabs(p) else os.path.join(context_dir, p)
            if os.path.isfile(full):
                files.append({"path": os.path.basename(full), "local": full})
            elif os.path.isdir(full):
                for root, _dirs, names in os.walk(full):
                    for n in sorted(names):
                        local = os.path.join(root, n)
                        files.append({"path": os.path.relpath(local, full).replace(os.sep, "/"), "local": local})
            else:
                raise ValidationError(f"copy source {p} not found (looked in {full})", code="VALIDATION_ERROR")
        out: List[Dict[str, str]] = []
        for i in range(0, len(files), 100):
            batch = files[i : i + 100]
            for f in batch:
                f["size"] = os.path.getsize(f["local"])
                f["hash"] = _sha256(f["local"])
            body = await api.http.json(
                "POST", "/v1/templates/files/upload-link", json={"files": [{"path": f["path"], "size": f["size"], "hash": f["hash"]} for f in batch]}, what="get upload links"
            )
            links = body.get("upload_urls") or []
            for j, f in enumerate(batch):
                link = next((x for x in links if x.get("path") == f["path"]), links[j] if j < len(links) else {})
                if not link.get("file_id"):
                    raise ValidationError(f"the service gave no upload link for {f['path']}", code="INVALID_RESPONSE")
                if link.get("upload_url") and link.get("present") is not True:
                    local = f["local"]
                    await api.http.json(
                        "PUT", str(link["upload_url"]), content=lambda: file_chunks(local), content_type="application/octet-stream",
                        headers={"content-length": str(f["size"])},
                        no_auth=True, timeout=0, what=f"upload {f['path']}",
                    )
                out.append({"path": f["path"], "file_id": str(link["file_id"])})
        return out

    @staticmethod
    async def wait_for_build(
        build_id: str,
        *,
        on_log: Optional[Callable[[BuildLogEntry], Any]] = None,
        on_progress: Optional[Callable[[BuildStatus], Any]] = None,
        poll_interval: float = 1.0,
        timeout: Optional[float] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[AsyncApiClient] = None,
    ) -> BuildResult:
        """Follows a build until it is active (returns) or failed (TemplateBuildError). With ``on_log``
        the log is streamed (server-sent events) and the status read when it ends."""
        api = AsyncApiClient.of(client, api_key, base_url)
        deadline = None if timeout is None else time.monotonic() + timeout
        recent: List[str] = []
        if on_log is not None:
            async for entry in AsyncTemplate.follow_logs(build_id, client=api, poll_interval=poll_interval):
                recent = (recent + [entry.message])[-50:]
                on_log(entry)
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"build {build_id} not finished after {timeout} s", code="TIMEOUT")
        last = ""
        while True:
            status = await AsyncTemplate.build_status(build_id, client=api)
            key = f"{status.status}|{status.progress}|{status.current_step}"
            if key != last:
                last = key
                if on_progress is not None:
                    on_progress(status)
            if is_terminal_build_status(status.status):
                break
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"build {build_id} not finished after {timeout} s", code="TIMEOUT")
            await _io.sleep(poll_interval)
        result = BuildResult(status.build_id or build_id, status.template_id or build_id, status.status, f"/v1/templates/build/{build_id}/logs", status.build_duration_ms)
        if status.status in FAILURE:
            if on_log is None:
                chunk = await AsyncTemplate.logs(build_id, offset=0, client=api)
                recent = [line for line in chunk.logs.split("\n") if line][-50:]
            raise TemplateBuildError(
                f"template build {build_id} failed: {status.error_message or 'see the build logs'}", build_id=build_id, logs=recent[-20:], code="BUILD_FAILED", body=status
            )
        result.template = await AsyncTemplate.get(status.template_id or build_id, client=api)
        return result

    @staticmethod
    async def build_status(build_id: str, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None) -> BuildStatus:
        api = AsyncApiClient.of(client, api_key, base_url)
        return BuildStatus.from_wire(await api.http.json("GET", f"/v1/templates/build/{quote(build_id, safe='')}/status", what=f"build status {build_id}"))

    @staticmethod
    async def logs(build_id: str, *, offset: int = 0, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None) -> BuildLogsChunk:
        """One chunk of a build's log, from ``offset``."""
        api = AsyncApiClient.of(client, api_key, base_url)
        body = await api.http.json("GET", f"/v1/templates/build/{quote(build_id, safe='')}/logs", query={"offset": offset}, what=f"build logs {build_id}")
        return BuildLogsChunk.from_wire(body)

    @staticmethod
    async def follow_logs(
        build_id: str, *, poll_interval: float = 1.0, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None
    ) -> AsyncIterator[BuildLogEntry]:
        """A build's log lines from the start, live, ending when the build is over (server-sent
        events; polls ``?offset=`` when the service answers with JSON)."""
        api = AsyncApiClient.of(client, api_key, base_url)
        path = f"/v1/templates/build/{quote(build_id, safe='')}/logs"
        res = await api.http.send("GET", path, query={"offset": 0}, accept="text/event-stream", timeout=0, stream=True, what=f"build logs {build_id}")
        first: Optional[BuildLogsChunk] = None
        try:
            if "text/event-stream" in res.headers.get("content-type", ""):
                parser = SseParser()
                async for text in res.aiter_text():
                    for m in parser.feed(text):
                        if m.event == "done":
                            return
                        if m.event == "log":
                            try:
                                data: Any = jsonlib.loads(m.data)
                            except ValueError:
                                data = m.data
                            yield _log_entry(data)
                return
            first = BuildLogsChunk.from_wire(jsonlib.loads(await res.aread()))
        finally:
            await res.aclose()
        offset = 0
        while True:
            chunk = first or await AsyncTemplate.logs(build_id, offset=offset, client=api)
            first = None
            for line in chunk.logs.split("\n"):
                if line.strip():
                    yield _log_entry(line)
            offset = chunk.offset or offset
            if chunk.complete or (is_terminal_build_status(chunk.status) and not chunk.logs):
                return
            if not is_terminal_build_status(chunk.status):
                await _io.sleep(poll_interval)

    @staticmethod
    async def list(
        *, category: Optional[str] = None, language: Optional[str] = None, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None
    ) -> List[TemplateInfo]:
        api = AsyncApiClient.of(client, api_key, base_url)
        body = await api.http.json("GET", "/v1/templates", query={"category": category, "language": language}, what="list templates")
        return [TemplateInfo.from_wire(t) for t in body.get("data") or []]

    @staticmethod
    async def get(name_or_id: str, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None) -> TemplateInfo:
        api = AsyncApiClient.of(client, api_key, base_url)
        return TemplateInfo.from_wire(await api.http.json("GET", f"/v1/templates/{quote(name_or_id, safe='')}", what=f"get template {name_or_id}"))

    @staticmethod
    async def delete(name_or_id: str, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[AsyncApiClient] = None) -> Dict[str, str]:
        """Deletes a custom template (ConflictError while a sandbox uses it; PermissionDeniedError for built-ins)."""
        api = AsyncApiClient.of(client, api_key, base_url)
        body = await api.http.json("DELETE", f"/v1/templates/{quote(name_or_id, safe='')}", what=f"delete template {name_or_id}")
        return {"id": str(body.get("id", name_or_id)), "status": str(body.get("status", "deleted"))}


__all__ = ["AsyncTemplate", "BuildStep", "is_terminal_build_status"]
