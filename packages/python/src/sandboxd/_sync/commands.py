# Generated from sandboxd/_async/commands.py by scripts/unasync.py: edit that file, then run the script.
from __future__ import annotations

import shlex
from typing import Any, Dict, List, Optional, Union

from ..types import BackgroundProcess, CommandResult, stdin_fields
from ._agent import Agent
from ._stream import OutputCallback, stream_execute


def deadline_for(timeout: Optional[int], fallback: int = 60) -> float:
    """Client-side wait: the service's limit plus a margin for the round trip."""
    return float((timeout if timeout is not None else fallback) + 30)


def command_body(command: str, args: Optional[List[str]], timeout: Optional[int], working_dir: Optional[str], env: Optional[Dict[str, str]], stdin: Union[str, bytes, None]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"command": command}
    if args is not None:
        body["args"] = list(args)
    if timeout is not None:
        body["timeout"] = timeout
    if working_dir is not None:
        body["working_dir"] = working_dir
    if env is not None:
        body["env"] = env
    body.update(stdin_fields(stdin))
    return body


class Commands:
    """Shell commands in the sandbox. A non-zero exit is a result (``exit_code``), not an error."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def run(
        self,
        command: str,
        *,
        args: Optional[List[str]] = None,
        timeout: Optional[int] = None,
        env: Optional[Dict[str, str]] = None,
        working_dir: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        request_timeout: Optional[float] = None,
    ) -> CommandResult:
        """Runs a shell command line (``/bin/sh -c``), or with ``args`` that exact argument list, and
        waits for it. Given ``on_stdout``/``on_stderr``, output arrives while it runs. Never repeated
        automatically: a failed call may still have run."""
        wait = request_timeout if request_timeout is not None else deadline_for(timeout)
        if on_stdout is not None or on_stderr is not None:
            line = shlex.join([command, *args]) if args is not None else command
            r = stream_execute(
                self._agent, code=line, language="bash", timeout=timeout, working_dir=working_dir, env=env, stdin=stdin,
                context_id=None, isolated=None, on_stdout=on_stdout, on_stderr=on_stderr, request_timeout=wait,
            )
            return CommandResult(r.success, r.stdout, r.stderr, r.exit_code, r.execution_time, r.timed_out, r.truncated)
        body = self._agent.http.json(
            "POST", "/commands/run", json=command_body(command, args, timeout, working_dir, env, stdin), timeout=wait, what="run command"
        )
        return CommandResult.from_wire(body)

    def background(
        self,
        command: str,
        *,
        args: Optional[List[str]] = None,
        name: Optional[str] = None,
        timeout: Optional[int] = None,
        env: Optional[Dict[str, str]] = None,
        working_dir: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        request_timeout: Optional[float] = None,
    ) -> BackgroundProcess:
        """Starts a command and returns at once; follow it with ``sandbox.processes``."""
        body = command_body(command, args, timeout, working_dir, env, stdin)
        if name:
            body["name"] = name
        res = self._agent.http.json("POST", "/commands/background", json=body, timeout=request_timeout or 30.0, what="start background command")
        return BackgroundProcess.from_wire(res)
