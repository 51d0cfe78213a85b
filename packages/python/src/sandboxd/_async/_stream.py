"""Code and commands over the agent's ``/execute/stream`` WebSocket: output arrives as it is made."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Union

from ..errors import ConnectionError, error_from_response
from ..types import ExecutionResult, stdin_fields
from ._agent import AsyncAgent

OutputCallback = Callable[[str], Any]


async def stream_execute(
    agent: AsyncAgent,
    *,
    code: str,
    language: str,
    timeout: Optional[int],
    working_dir: Optional[str],
    env: Optional[Dict[str, str]],
    stdin: Union[str, bytes, None],
    context_id: Optional[str],
    isolated: Optional[bool],
    on_stdout: Optional[OutputCallback],
    on_stderr: Optional[OutputCallback],
    request_timeout: float,
) -> ExecutionResult:
    ws = await agent.socket("/execute/stream", what="execute stream")
    try:
        frame: Dict[str, Any] = {"type": "execute", "code": code, "language": language}
        if timeout is not None:
            frame["timeout"] = timeout
        if working_dir is not None:
            frame["workdir"] = working_dir
        if env is not None:
            frame["env"] = env
        if context_id is not None:
            frame["context_id"] = context_id
        if isolated is not None:
            frame["isolated"] = isolated
        frame.update(stdin_fields(stdin))
        await ws.send(frame)
        stdout: list = []
        stderr: list = []
        result: Optional[Dict[str, Any]] = None
        while True:
            msg = await ws.recv(request_timeout if request_timeout > 0 else None)
            if msg is None:
                if result is not None:
                    break
                raise ConnectionError(f"execute stream closed before the result (code {ws.close_code} {ws.close_reason})".rstrip(), code="CONNECTION_ERROR")
            kind = msg.get("type")
            if kind == "stdout":
                d = str(msg.get("data", ""))
                stdout.append(d)
                if on_stdout is not None:
                    on_stdout(d)
            elif kind == "stderr":
                d = str(msg.get("data", ""))
                stderr.append(d)
                if on_stderr is not None:
                    on_stderr(d)
            elif kind == "result":
                result = msg
            elif kind == "error":
                status = msg.get("status")
                raise error_from_response(status if isinstance(status, int) else 0, msg)
            elif kind == "complete":
                if result is None:
                    result = {"success": msg.get("success")}
                break
    finally:
        await ws.close()
    r = ExecutionResult.from_wire({**result, "stdout": "".join(stdout), "stderr": "".join(stderr)})
    r.language = language
    return r
