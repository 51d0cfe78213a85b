from __future__ import annotations

import base64
import os
import secrets
import tempfile
from typing import IO, Any, AsyncIterator, Callable, Dict, Iterable, List, Optional, Union

from .. import _tar
from ..errors import NotFoundError, SandboxdError, ValidationError
from ..types import CommandResult, FileChange, FileEntry, WriteResult
from ._agent import AsyncAgent
from .commands import AsyncCommands
from .watch import AsyncFileWatcher

UploadSource = Union[bytes, bytearray, memoryview, str, IO[bytes], Iterable[bytes], Any]
Progress = Optional[Callable[[int], Any]]
CHUNK = 256 * 1024


async def _chunks(src: UploadSource) -> AsyncIterator[bytes]:
    if isinstance(src, str):
        yield src.encode()
    elif isinstance(src, (bytes, bytearray, memoryview)):
        yield bytes(src)
    elif hasattr(src, "read"):
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                return
            yield chunk if isinstance(chunk, bytes) else str(chunk).encode()
    elif hasattr(src, "__aiter__"):
        async for chunk in src:
            yield chunk if isinstance(chunk, bytes) else str(chunk).encode()
    else:
        for chunk in src:
            yield chunk if isinstance(chunk, bytes) else str(chunk).encode()


async def file_chunks(local_path: str) -> AsyncIterator[bytes]:
    """A local file's bytes, read as they are sent."""
    with open(local_path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                return
            yield chunk


def _quote(v: str) -> str:
    return v.replace('"', "%22").replace("\r", "").replace("\n", "")


def _multipart(path: str, filename: str, source: Callable[[], AsyncIterator[bytes]], progress: Progress) -> "tuple[str, Callable[[], AsyncIterator[bytes]]]":
    """A streamed multipart/form-data body, text fields first so that the agent knows the
    destination before the file's bytes arrive."""
    boundary = "----sandboxd" + secrets.token_hex(12)
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="path"\r\n\r\n{path}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{_quote(filename)}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()

    async def body() -> AsyncIterator[bytes]:
        yield head
        n = 0
        async for chunk in source():
            if chunk:
                n += len(chunk)
                yield chunk
                if progress is not None:
                    progress(n)
        yield tail

    return f"multipart/form-data; boundary={boundary}", body


class AsyncFiles:
    """The sandbox's filesystem, through its agent. Paths are paths inside the sandbox."""

    def __init__(self, agent: AsyncAgent) -> None:
        self._agent = agent

    async def read(self, path: str, *, request_timeout: Optional[float] = None) -> str:
        """A text file's content (binary or large files are refused: use ``download``)."""
        body = await self._agent.http.json("GET", "/files/read", query={"path": path}, timeout=request_timeout, what=f"read {path}")
        c = body.get("content")
        return c if isinstance(c, str) else ""

    async def write(self, path: str, content: Union[str, bytes], *, mode: Optional[str] = None, request_timeout: Optional[float] = None) -> WriteResult:
        """Writes text or bytes, creating parent directories. ``mode``: octal, e.g. ``"0755"``."""
        body: Dict[str, Any] = (
            {"path": path, "content": content}
            if isinstance(content, str)
            else {"path": path, "content": base64.b64encode(bytes(content)).decode("ascii"), "encoding": "base64"}
        )
        if mode:
            body["mode"] = mode
        res = await self._agent.http.json("POST", "/files/write", json=body, timeout=request_timeout, what=f"write {path}")
        size = len(content.encode()) if isinstance(content, str) else len(content)
        return WriteResult(res.get("path") or path, res.get("size", size))

    async def list(self, path: str = "/workspace", *, request_timeout: Optional[float] = None) -> List[FileEntry]:
        body = await self._agent.http.json("GET", "/files/list", query={"path": path}, timeout=request_timeout, what=f"list {path}")
        return [FileEntry.from_wire(f) for f in body.get("files") or [] if isinstance(f, dict)]

    async def exists(self, path: str, *, request_timeout: Optional[float] = None) -> bool:
        return (await self._probe(path, request_timeout)).get("exists") is True

    async def is_directory(self, path: str, *, request_timeout: Optional[float] = None) -> bool:
        return (await self._probe(path, request_timeout)).get("is_dir") is True

    async def _probe(self, path: str, request_timeout: Optional[float]) -> Dict[str, Any]:
        return await self._agent.http.json("GET", "/files/exists", query={"path": path}, timeout=request_timeout, what=f"exists {path}")

    async def remove(self, path: str, *, request_timeout: Optional[float] = None) -> None:
        """Removes a file, or a directory with its content."""
        await self._agent.http.json("DELETE", "/files/remove", query={"path": path}, timeout=request_timeout, what=f"remove {path}")

    async def mkdir(self, path: str, *, request_timeout: Optional[float] = None) -> None:
        """Creates a directory and its parents."""
        await self._agent.http.json("POST", "/files/mkdir", json={"path": path}, timeout=request_timeout, what=f"mkdir {path}")

    async def upload(self, path: str, data: UploadSource, *, on_progress: Progress = None, request_timeout: Optional[float] = None) -> WriteResult:
        """Streams data into a file of the sandbox (multipart; never held whole in memory on either
        side): bytes, text, a binary file object, or an iterable (async iterable, for the async
        client) of byte chunks. No time limit unless ``request_timeout`` is given."""
        replayable = isinstance(data, (str, bytes, bytearray, memoryview))
        ctype, body = _multipart(path, os.path.basename(path) or "file", lambda: _chunks(data), on_progress)
        return await self._send_upload(path, ctype, body if replayable else body(), request_timeout)

    async def upload_file(self, local_path: str, path: str, *, on_progress: Progress = None, request_timeout: Optional[float] = None) -> WriteResult:
        """Uploads a local file, streamed from disk."""
        if not os.path.isfile(local_path):
            raise ValidationError(f"{local_path} is not a regular file", code="NOT_A_FILE")

        ctype, body = _multipart(path, os.path.basename(local_path), lambda: file_chunks(local_path), on_progress)
        return await self._send_upload(path, ctype, body, request_timeout)

    async def _send_upload(self, path: str, ctype: str, body: Any, request_timeout: Optional[float]) -> WriteResult:
        res = await self._agent.http.json(
            "POST", "/files/upload", content=body, content_type=ctype, timeout=request_timeout or 0, what=f"upload {path}"
        )
        return WriteResult(res.get("path") or path, res.get("size", 0))

    async def download(self, path: str, *, request_timeout: Optional[float] = None) -> bytes:
        """A file's bytes, in memory (for big files: ``download_stream`` or ``download_file``)."""
        res = await self._agent.http.send("GET", "/files/download", query={"path": path}, accept="*/*", timeout=request_timeout, what=f"download {path}")
        return res.content

    async def download_stream(self, path: str, *, on_progress: Progress = None, request_timeout: Optional[float] = None) -> AsyncIterator[bytes]:
        """A file's bytes in chunks, read from the network as you iterate."""
        res = await self._agent.http.send(
            "GET", "/files/download", query={"path": path}, accept="*/*", timeout=request_timeout, what=f"download {path}", stream=True
        )
        n = 0
        try:
            async for chunk in res.aiter_bytes(CHUNK):
                n += len(chunk)
                yield chunk
                if on_progress is not None:
                    on_progress(n)
        finally:
            await res.aclose()

    async def download_file(self, path: str, local_path: str, *, on_progress: Progress = None, request_timeout: Optional[float] = None) -> WriteResult:
        """Streams a file of the sandbox to a local path; a partial file is removed on failure."""
        size = 0
        try:
            with open(local_path, "wb") as f:
                async for chunk in self.download_stream(path, on_progress=on_progress, request_timeout=request_timeout):
                    f.write(chunk)
                    size += len(chunk)
        except BaseException:
            if os.path.exists(local_path):
                os.remove(local_path)
            raise
        return WriteResult(local_path, size)

    async def upload_directory(self, local_dir: str, remote_dir: str, *, on_progress: Progress = None) -> WriteResult:
        """Copies a local directory (files, subdirectories, symlinks, modes, times) into the sandbox as
        one tar archive, unpacked there with the image's ``tar`` into ``remote_dir`` (created, or merged into)."""
        if not os.path.isdir(local_dir):
            raise ValidationError(f"{local_dir} is not a directory", code="NOT_A_DIRECTORY")
        staging = f"/tmp/.sbx-upload-{secrets.token_hex(8)}.tar"
        with tempfile.TemporaryDirectory() as tmp:
            archive = os.path.join(tmp, "up.tar")
            _tar.pack(local_dir, archive)
            sent = await self.upload_file(archive, staging, on_progress=on_progress)
        r = await self._sh('mkdir -p -- "$1" && tar -xf "$2" -C "$1"; s=$?; rm -f -- "$2"; exit $s', [remote_dir, staging])
        if r.exit_code != 0:
            raise _unpack_error(f"unpacking into {remote_dir} failed", r)
        return WriteResult(remote_dir, sent.size)

    async def download_directory(self, remote_dir: str, local_dir: str, *, on_progress: Progress = None) -> Dict[str, Any]:
        """Copies a directory of the sandbox to a local directory (created, or merged into). Entries
        that would land outside ``local_dir`` are refused. Returns ``{path, files, size}``."""
        staging = f"/tmp/.sbx-download-{secrets.token_hex(8)}.tar"
        r = await self._sh('if [ ! -e "$1" ]; then exit 3; elif [ ! -d "$1" ]; then exit 4; fi; tar -cf "$2" -C "$1" .', [remote_dir, staging])
        try:
            if r.exit_code == 3:
                raise NotFoundError(f"Directory not found: {remote_dir}", code="FILE_NOT_FOUND", status=404, body={"path": remote_dir})
            if r.exit_code == 4:
                raise ValidationError(f"{remote_dir} is not a directory", code="NOT_A_DIRECTORY", status=400, body={"path": remote_dir})
            if r.exit_code != 0:
                raise _unpack_error(f"packing {remote_dir} failed", r)
            with tempfile.TemporaryDirectory() as tmp:
                archive = os.path.join(tmp, "down.tar")
                await self.download_file(staging, archive, on_progress=on_progress)
                files, size = _tar.extract(archive, local_dir)
            return {"path": local_dir, "files": files, "size": size}
        finally:
            try:
                await self.remove(staging)
            except SandboxdError:
                pass

    async def watch(self, path: str = "/workspace", *, connect_timeout: float = 30.0, on_warning: Optional[Callable[[Dict[str, str]], Any]] = None) -> AsyncFileWatcher:
        """Watches a directory recursively: returns once the whole tree is watched; then iterate it for
        each ``FileChange`` below it. ``close()`` (or leaving ``async with``) ends it."""
        return await AsyncFileWatcher.open(self._agent, path, connect_timeout, on_warning)

    async def _sh(self, script: str, args: List[str]) -> CommandResult:
        # A fixed script with arguments: never the caller's text as code.
        return await AsyncCommands(self._agent).run("sh", args=["-c", script, "sh", *args], timeout=3600)


def _unpack_error(what: str, r: CommandResult) -> SandboxdError:
    why = "the image has no tar" if r.exit_code == 127 else "; ".join(r.stderr.strip().split("\n")[-3:]) or f"exit {r.exit_code}"
    return SandboxdError(f"{what}: {why}", code="COMMAND_FAILED", body={"exit_code": r.exit_code, "stderr": r.stderr})


__all__ = ["AsyncFiles", "FileChange", "UploadSource"]
