from __future__ import annotations

import time
import json
from typing import AsyncIterator, List, Optional
from urllib.parse import quote

from ..errors import NotFoundError, TimeoutError
from .._sse import SseParser
from ..types import AttachEvent, ProcessInfo, ProcessOutput
from . import _io
from ._agent import AsyncAgent


class AsyncProcesses:
    """Background executions and commands of the sandbox (running and recently finished)."""

    def __init__(self, agent: AsyncAgent) -> None:
        self._agent = agent

    async def list(self, *, request_timeout: Optional[float] = None) -> List[ProcessInfo]:
        body = await self._agent.http.json("GET", "/execute/processes", timeout=request_timeout, what="list processes")
        return [ProcessInfo.from_wire(p) for p in body.get("processes") or []]

    async def get(self, process_id: str, *, request_timeout: Optional[float] = None) -> ProcessInfo:
        """One process by id; NotFoundError when the agent no longer knows it."""
        for p in await self.list(request_timeout=request_timeout):
            if process_id in (p.process_id, p.execution_id):
                return p
        raise NotFoundError(f"process {process_id} not found", code="PROCESS_NOT_FOUND")

    async def output(self, process_id: str, *, since: int = 0, max_bytes: Optional[int] = None, request_timeout: Optional[float] = None) -> ProcessOutput:
        """A background process's output from offset ``since``, while it runs and after. Read on with
        ``since=out.next_offset`` until ``out.complete``; ``lost_bytes`` says what the agent no longer kept."""
        query = {"since": since, "max_bytes": max_bytes}
        body = await self._agent.http.json(
            "GET", f"/processes/{quote(process_id, safe='')}/output", query=query, timeout=request_timeout, what=f"output of process {process_id}"
        )
        return ProcessOutput.from_wire(body, process_id)

    async def attach(self, process_id: str, *, since: int = 0) -> AsyncIterator[AttachEvent]:
        """Attaches to a background process: its output from ``since``, then live, until its ``exit``
        event (the last one). Several clients may attach at once; a slow one never slows the process
        (it gets a ``lost`` event). If the connection breaks, attach again from the last offset."""
        res = await self._agent.http.send(
            "GET", f"/processes/{quote(process_id, safe='')}/attach", query={"since": since}, accept="text/event-stream",
            timeout=0, stream=True, what=f"attach to process {process_id}",
        )
        parser = SseParser()
        try:
            async for text in res.aiter_text():
                for m in parser.feed(text):
                    data = json.loads(m.data) if m.data else {}
                    if m.event == "output":
                        yield AttachEvent("stderr" if data.get("stream") == "stderr" else "stdout", int(data.get("offset", 0)), str(data.get("data", "")))
                    elif m.event == "lost":
                        yield AttachEvent("lost", int(data.get("offset", 0)), bytes=int(data.get("bytes", 0)))
                    elif m.event == "exit":
                        code = data.get("exit_code")
                        yield AttachEvent("exit", int(data.get("next_offset", 0)), status=str(data.get("status", "")), exit_code=code if isinstance(code, int) else None)
                        return
        finally:
            await res.aclose()

    async def kill(self, process_id: str, *, request_timeout: Optional[float] = None) -> None:
        """Kills a process and its whole process group."""
        await self._agent.http.json("POST", f"/execute/kill/{quote(process_id, safe='')}", timeout=request_timeout, what=f"kill process {process_id}")

    async def wait(self, process_id: str, *, timeout: Optional[float] = None, interval: float = 0.25) -> ProcessInfo:
        """Polls until the process is no longer ``running`` (TimeoutError after ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            p = await self.get(process_id)
            if p.status != "running":
                return p
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"process {process_id} still running after {timeout} s", code="TIMEOUT")
            await _io.sleep(interval)
