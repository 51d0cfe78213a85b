# Generated from sandboxd/_async/sandbox.py by scripts/unasync.py: edit that file, then run the script.
from __future__ import annotations

import json as jsonlib
from datetime import datetime, timezone
from typing import Any, Dict, Iterator, List, Optional, Union
from urllib.parse import quote

from .._sse import SseParser
from ..types import (
    ActionResult,
    AgentHealth,
    AgentInfo,
    BackgroundProcess,
    CodeContext,
    EventsToken,
    ExecutionResult,
    KernelSession,
    ListeningPort,
    MetricsSnapshot,
    NetworkPolicy,
    PreviewUrl,
    SandboxEvent,
    SandboxInfo,
    SandboxPage,
    SandboxResources,
    SnapshotInfo,
    TimeoutResult,
    stdin_fields,
)
from ._agent import Agent, Tokens
from ._http import ApiClient
from ._stream import OutputCallback, stream_execute
from .commands import Commands, deadline_for
from .env import Cache, Env
from .files import Files
from .processes import Processes
from .terminal import Terminal

DEFAULT_TEMPLATE = "code-interpreter"
SnapshotRef = Union[str, SnapshotInfo]
ContextRef = Union[str, CodeContext]
COPY_TIMEOUT = 300.0


def _enc(v: str) -> str:
    return quote(v, safe="")


def snapshot_id_of(snapshot: SnapshotRef) -> str:
    return snapshot if isinstance(snapshot, str) else snapshot.id


def _context_id(context: Optional[ContextRef]) -> Optional[str]:
    return context if context is None or isinstance(context, str) else context.id


def settings_fields(
    timeout_seconds: Optional[int] = None,
    internet_access: Optional[bool] = None,
    allow_out: Optional[List[str]] = None,
    deny_out: Optional[List[str]] = None,
    env_vars: Optional[Dict[str, str]] = None,
    on_timeout: Optional[str] = None,
    idle_timeout_seconds: Optional[int] = None,
    auto_resume: Optional[bool] = None,
) -> Dict[str, Any]:
    """The settings of a create or fork request, those given only."""
    fields = {
        "timeout_seconds": timeout_seconds,
        "internet_access": internet_access,
        "allow_out": allow_out,
        "deny_out": deny_out,
        "env_vars": env_vars,
        "on_timeout": on_timeout,
        "idle_timeout_seconds": idle_timeout_seconds,
        "auto_resume": auto_resume,
    }
    return {k: v for k, v in fields.items() if v is not None}


def _execute_body(code: str, language: str, timeout: Optional[int], working_dir: Optional[str], env: Optional[Dict[str, str]], stdin: Union[str, bytes, None], cache: bool, context: Optional[ContextRef], isolated: Optional[bool]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"code": code, "language": language}
    if timeout is not None:
        body["timeout"] = timeout
    if working_dir is not None:
        body["working_dir"] = working_dir
    if env is not None:
        body["env"] = env
    if cache:
        body["cache"] = True
    if context is not None:
        body["context_id"] = _context_id(context)
    if isolated is not None:
        body["isolated"] = isolated
    body.update(stdin_fields(stdin))
    return body


def volume_mount(v: Dict[str, Any]) -> Dict[str, Any]:
    ref = v["volume"]
    out: Dict[str, Any] = {"name": ref if isinstance(ref, str) else ref.id, "path": v["path"]}
    if v.get("read_only") is not None:
        out["read_only"] = bool(v["read_only"])
    return out


def _token_of(body: Any) -> Optional[Dict[str, Any]]:
    if isinstance(body, dict) and isinstance(body.get("auth_token"), str):
        return {"token": body["auth_token"], "expires_at": body.get("token_expires_at")}
    return None


def read_sse(res: Any) -> Iterator[SandboxEvent]:
    """The events of an open ``text/event-stream`` response (closed when the iteration ends)."""
    parser = SseParser()
    try:
        for text in res.iter_text():
            for m in parser.feed(text):
                yield _event(m)
        for m in parser.end():
            yield _event(m)
    finally:
        res.close()


class EventStream:
    """An open stream of lifecycle events: iterate it for each ``SandboxEvent``; ``close()`` ends it."""

    def __init__(self, res: Any) -> None:
        self._res = res
        self._events = read_sse(res)

    def __iter__(self) -> Iterator[SandboxEvent]:
        return self._events

    def close(self) -> None:
        self._res.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _event(m: Any) -> SandboxEvent:
    try:
        data = jsonlib.loads(m.data)
    except ValueError:
        data = {"text": m.data}
    return SandboxEvent(m.event, data if isinstance(data, dict) else {"value": data}, m.id)


class Sandbox:
    """One sandbox. Get one with ``create()``, ``connect(id)``, ``list()`` or ``fork()``. Lifecycle calls
    go to the API with the API key; code, commands, files, env and metrics go to the sandbox's agent
    with a sandbox token that is fetched and refreshed by itself. ``with`` deletes it at the end."""

    def __init__(self, client: ApiClient, info: SandboxInfo, token: Optional[Dict[str, Any]] = None) -> None:
        self.client = client
        self.id = info.id
        self.info = info
        self._tokens = Tokens(self._fetch_token)
        if token is not None:
            self._tokens.set(token["token"], token.get("expires_at"))

        def prepare() -> None:
            if not self.info.public_host:
                self.get_info()

        self._agent = Agent(client, self._tokens, lambda: self.info.public_host, prepare)
        self.files = Files(self._agent)
        self.commands = Commands(self._agent)
        self.processes = Processes(self._agent)
        self.env = Env(self._agent)
        self.cache = Cache(self._agent)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, status={self.info.status!r})"

    @property
    def status(self) -> str:
        return self.info.status

    # ---- lifecycle (the API) -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        template: Optional[str] = None,
        *,
        template_id: Optional[str] = None,
        snapshot: Optional[SnapshotRef] = None,
        region: Optional[str] = None,
        timeout_seconds: Optional[int] = None,
        internet_access: Optional[bool] = None,
        allow_out: Optional[List[str]] = None,
        deny_out: Optional[List[str]] = None,
        env_vars: Optional[Dict[str, str]] = None,
        on_timeout: Optional[str] = None,
        idle_timeout_seconds: Optional[int] = None,
        auto_resume: Optional[bool] = None,
        volumes: Optional[List[Dict[str, Any]]] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[ApiClient] = None,
        request_timeout: Optional[float] = None,
    ) -> "Sandbox":
        """Creates a sandbox (``template`` default ``code-interpreter``; or from ``snapshot``); it is
        running and its agent answering when this returns. Not retried (that could create two).
        ``volumes``: ``[{"volume": name_or_id_or_VolumeInfo, "path": "/data", "read_only": False}]``."""
        api = ApiClient.of(client, api_key, base_url)
        body = settings_fields(timeout_seconds, internet_access, allow_out, deny_out, env_vars, on_timeout, idle_timeout_seconds, auto_resume)
        if snapshot is not None:
            if template is not None or template_id is not None:
                raise ValueError("create from a snapshot or from a template, not both")
            body["snapshot_id"] = snapshot_id_of(snapshot)
        elif template_id:
            body["template_id"] = template_id
        else:
            body["template_name"] = template or DEFAULT_TEMPLATE
        if region is not None:
            body["region"] = region
        if volumes is not None:
            body["volumes"] = [volume_mount(v) for v in volumes]
        res = api.http.json(
            "POST", "/v1/sandboxes", json=body, timeout=request_timeout or max(api.config.request_timeout, 120.0), what="create sandbox"
        )
        return cls(api, SandboxInfo.from_wire(res), _token_of(res))

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        auth_token: Optional[str] = None,
        token_expires_at: Optional[str] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[ApiClient] = None,
        request_timeout: Optional[float] = None,
    ) -> "Sandbox":
        """A handle on an existing sandbox (fetches its state; NotFoundError / SandboxExpiredError if
        gone). ``auth_token``: an agent token obtained elsewhere, used until it expires."""
        api = ApiClient.of(client, api_key, base_url)
        info = cls._fetch_info(api, sandbox_id, request_timeout)
        return cls(api, info, {"token": auth_token, "expires_at": token_expires_at} if auth_token else None)

    @classmethod
    def from_id(cls, sandbox_id: str, *, api_key: Optional[str] = None, base_url: Optional[str] = None, client: Optional[ApiClient] = None) -> "Sandbox":
        """A handle by id without a request: lifecycle actions work at once; agent calls fetch the state first."""
        return cls(ApiClient.of(client, api_key, base_url), SandboxInfo(id=sandbox_id))

    @classmethod
    def list(
        cls,
        *,
        status: Optional[str] = None,
        template: Optional[str] = None,
        region: Optional[str] = None,
        limit: Optional[int] = None,
        max_items: Optional[int] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[ApiClient] = None,
    ) -> Iterator["Sandbox"]:
        """All sandboxes of the organization, newest first, fetched a page at a time as you iterate."""
        api = ApiClient.of(client, api_key, base_url)
        cursor: Optional[str] = None
        seen = set()
        n = 0
        while True:
            page = cls.list_page(status=status, template=template, region=region, limit=limit, cursor=cursor, client=api)
            for info in page.data:
                if max_items is not None and n >= max_items:
                    return
                n += 1
                yield cls(api, info)
            if not page.has_more:
                return
            if not page.next_cursor or page.next_cursor in seen:
                from ..errors import SandboxdError

                raise SandboxdError("the service said there are more results but gave no new cursor", code="INVALID_RESPONSE")
            seen.add(page.next_cursor)
            cursor = page.next_cursor

    @classmethod
    def list_page(
        cls,
        *,
        status: Optional[str] = None,
        template: Optional[str] = None,
        region: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        client: Optional[ApiClient] = None,
    ) -> SandboxPage:
        """One page of the list, as plain data."""
        api = ApiClient.of(client, api_key, base_url)
        query = {"limit": limit, "status": status, "template": template, "region": region, "cursor": cursor}
        return SandboxPage.from_wire(api.http.json("GET", "/v1/sandboxes", query=query, what="list sandboxes"))

    @staticmethod
    def _fetch_info(api: ApiClient, sandbox_id: str, request_timeout: Optional[float]) -> SandboxInfo:
        body = api.http.json("GET", f"/v1/sandboxes/{_enc(sandbox_id)}", timeout=request_timeout, what=f"get sandbox {sandbox_id}")
        return SandboxInfo.from_wire(body)

    def get_info(self, *, request_timeout: Optional[float] = None) -> SandboxInfo:
        """Fetches the current state and updates ``info``."""
        self.info = self._fetch_info(self.client, self.id, request_timeout)
        return self.info

    def _action(self, verb: str, request_timeout: Optional[float]) -> ActionResult:
        t = request_timeout if request_timeout is not None else (max(self.client.config.request_timeout, 120.0) if verb == "start" else None)
        body = self.client.http.json("POST", f"/v1/sandboxes/{_enc(self.id)}/{verb}", timeout=t, what=f"{verb} sandbox {self.id}")
        status = body.get("status") if isinstance(body.get("status"), str) else self.info.status
        self.info.status = status
        return ActionResult(self.id, status)

    def pause(self, *, request_timeout: Optional[float] = None) -> ActionResult:
        """Freezes the sandbox (memory and processes kept)."""
        return self._action("pause", request_timeout)

    def resume(self, *, request_timeout: Optional[float] = None) -> ActionResult:
        r = self._action("resume", request_timeout)
        self._refresh_quietly()
        return r

    def stop(self, *, request_timeout: Optional[float] = None) -> ActionResult:
        """Kills the sandbox's processes and keeps its filesystem; ``start()`` boots it again."""
        return self._action("stop", request_timeout)

    def start(self, *, request_timeout: Optional[float] = None) -> ActionResult:
        r = self._action("start", request_timeout)
        # The agent boots again and may answer on a new address.
        self._refresh_quietly()
        return r

    def _refresh_quietly(self) -> None:
        from ..errors import SandboxdError

        try:
            self.get_info()
        except SandboxdError:
            pass

    def kill(self, *, request_timeout: Optional[float] = None) -> ActionResult:
        """Deletes the sandbox and everything in it."""
        body = self.client.http.json("DELETE", f"/v1/sandboxes/{_enc(self.id)}", timeout=request_timeout, what=f"delete sandbox {self.id}")
        self.info.status = "deleted"
        return ActionResult(self.id, body.get("status") if isinstance(body.get("status"), str) else "deleted")

    def set_timeout(self, seconds: int, *, request_timeout: Optional[float] = None) -> TimeoutResult:
        """Sets the auto-delete timeout, counted from now."""
        if not isinstance(seconds, int) or seconds <= 0:
            raise ValueError("timeout must be a positive whole number of seconds")
        body = self.client.http.json(
            "PUT", f"/v1/sandboxes/{_enc(self.id)}/timeout", json={"timeout_seconds": seconds}, timeout=request_timeout, what=f"set timeout of {self.id}"
        )
        expires = body.get("expires_at") if isinstance(body.get("expires_at"), str) else ""
        self.info.timeout_seconds, self.info.expires_at = seconds, expires
        return TimeoutResult(self.id, body.get("timeout_seconds", seconds), expires)

    def resources(self, *, request_timeout: Optional[float] = None) -> SandboxResources:
        """The sandbox's cpu, memory, disk and network use now, from the service (not its agent)."""
        body = self.client.http.json("GET", f"/v1/sandboxes/{_enc(self.id)}/metrics", timeout=request_timeout, what=f"metrics of {self.id}")
        return SandboxResources.from_wire(body)

    def resources_stream(self, *, interval: Optional[int] = None) -> Iterator[SandboxResources]:
        """The sandbox's resource use every ``interval`` seconds (1..60, default 2), while you iterate;
        ends when the sandbox is gone."""
        res = self.client.http.send(
            "GET", f"/v1/sandboxes/{_enc(self.id)}/metrics/stream", query={"interval": interval}, accept="text/event-stream", timeout=0, stream=True, what=f"metrics stream of {self.id}"
        )
        for ev in read_sse(res):
            if ev.kind == "end":
                return
            if ev.kind == "metrics":
                yield SandboxResources.from_wire(ev.data)

    def events(self) -> "EventStream":
        """This sandbox's lifecycle events as they happen (server-sent): the stream is open when this
        returns, so no later event is missed. Iterate it; ``close()`` (or leaving ``with``) ends it."""
        res = self.client.http.send(
            "GET", f"/v1/sandboxes/{_enc(self.id)}/events", accept="text/event-stream", timeout=0, stream=True, what=f"events of {self.id}"
        )
        return EventStream(res)

    def ports(self, *, request_timeout: Optional[float] = None) -> List[ListeningPort]:
        """The TCP ports something listens on inside the sandbox (loopback included)."""
        body = self.client.http.json("GET", f"/v1/sandboxes/{_enc(self.id)}/ports", timeout=request_timeout, what=f"ports of {self.id}")
        return [
            ListeningPort(int(p.get("port", 0)), [str(a) for a in p.get("addresses") or []], p.get("loopback_only") is True)
            for p in body.get("data") or []
            if isinstance(p, dict)
        ]

    def get_preview_url(self, port: int, *, public: Optional[bool] = None, request_timeout: Optional[float] = None) -> PreviewUrl:
        """The URL where ``port`` inside the sandbox is served. Private unless ``public=True`` (then
        requests need ``preview_headers()``, or a browser opens ``signed_url``); ``public=False`` closes it again."""
        if not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError("port must be a whole number from 1 to 65535")
        path = f"/v1/sandboxes/{_enc(self.id)}/ports/{port}"
        what = f"preview of port {port} of {self.id}"
        if public is None:
            body = self.client.http.json("GET", path, timeout=request_timeout, what=what)
        else:
            body = self.client.http.json("PUT", path, json={"public": public}, timeout=request_timeout, what=what)
        return PreviewUrl.from_wire(body)

    def preview_headers(self) -> Dict[str, str]:
        """The header that opens this sandbox's private previews: its token."""
        return {"X-Sandboxd-Token": self._tokens.get()}

    def get_network(self, *, request_timeout: Optional[float] = None) -> NetworkPolicy:
        """The sandbox's egress rules: internet access, and its allow and deny lists."""
        body = self.client.http.json("GET", f"/v1/sandboxes/{_enc(self.id)}/network", timeout=request_timeout, what=f"network of {self.id}")
        return self._keep_network(NetworkPolicy.from_wire(body))

    def set_network(
        self,
        *,
        internet_access: Optional[bool] = None,
        allow_out: Optional[List[str]] = None,
        deny_out: Optional[List[str]] = None,
        request_timeout: Optional[float] = None,
    ) -> NetworkPolicy:
        """Replaces the egress rules as a whole (what is left out takes its default: internet access
        on, both lists empty). A sandbox created without internet access cannot get it now
        (InvalidStateError); a bad entry is a ValidationError."""
        body = {k: v for k, v in {"internet_access": internet_access, "allow_out": allow_out, "deny_out": deny_out}.items() if v is not None}
        res = self.client.http.json("PUT", f"/v1/sandboxes/{_enc(self.id)}/network", json=body, timeout=request_timeout, what=f"set network of {self.id}")
        return self._keep_network(NetworkPolicy.from_wire(res))

    def _keep_network(self, network: NetworkPolicy) -> NetworkPolicy:
        self.info.network = network
        self.info.internet_access = network.internet_access
        return network

    def snapshot(self, *, name: Optional[str] = None, request_timeout: Optional[float] = None) -> SnapshotInfo:
        """Saves the sandbox's filesystem, environment and template settings as a snapshot (a running
        sandbox is frozen for the copy and resumes by itself). Not retried."""
        body = self.client.http.json(
            "POST", f"/v1/sandboxes/{_enc(self.id)}/snapshots", json={} if name is None else {"name": name},
            timeout=request_timeout or max(self.client.config.request_timeout, COPY_TIMEOUT), what=f"snapshot sandbox {self.id}",
        )
        return SnapshotInfo.from_wire(body)

    def fork(
        self,
        count: int = 1,
        *,
        timeout_seconds: Optional[int] = None,
        internet_access: Optional[bool] = None,
        allow_out: Optional[List[str]] = None,
        deny_out: Optional[List[str]] = None,
        env_vars: Optional[Dict[str, str]] = None,
        on_timeout: Optional[str] = None,
        idle_timeout_seconds: Optional[int] = None,
        auto_resume: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> List["Sandbox"]:
        """``count`` new running sandboxes, each with this one's filesystem as it is now; the settings
        not given are this sandbox's. Not retried."""
        if not isinstance(count, int) or count < 1:
            raise ValueError("count must be a positive whole number")
        body = {"count": count, **settings_fields(timeout_seconds, internet_access, allow_out, deny_out, env_vars, on_timeout, idle_timeout_seconds, auto_resume)}
        res = self.client.http.json(
            "POST", f"/v1/sandboxes/{_enc(self.id)}/fork", json=body,
            timeout=request_timeout or max(self.client.config.request_timeout, COPY_TIMEOUT), what=f"fork sandbox {self.id}",
        )
        return [type(self)(self.client, SandboxInfo.from_wire(x), _token_of(x)) for x in res.get("data") or []]

    def restore(self, snapshot: SnapshotRef, *, request_timeout: Optional[float] = None) -> SandboxInfo:
        """Puts the sandbox's filesystem back as it was in ``snapshot`` (of this sandbox's lineage,
        else ValidationError). It keeps its id, URL and token; its processes restart."""
        sid = snapshot_id_of(snapshot)
        body = self.client.http.json(
            "POST", f"/v1/sandboxes/{_enc(self.id)}/restore", json={"snapshot_id": sid},
            timeout=request_timeout or max(self.client.config.request_timeout, COPY_TIMEOUT), what=f"restore sandbox {self.id} to {sid}",
        )
        self.info = SandboxInfo.from_wire(body)
        return self.info

    def events_token(self, *, request_timeout: Optional[float] = None) -> EventsToken:
        """A short-lived token that opens this sandbox's events stream (``?token=``, for a browser's EventSource)."""
        body = self.client.http.json("POST", "/v1/events/token", json={"sandbox_id": self.id}, timeout=request_timeout, what="events token")
        return EventsToken(body.get("token", ""), body.get("expires_at", ""), body.get("sandbox_id"))

    # ---- tokens ---------------------------------------------------------------------------------

    def _fetch_token(self) -> Any:
        body = self.client.http.json("POST", f"/v1/sandboxes/{_enc(self.id)}/token/refresh", what=f"refresh token of {self.id}")
        if not isinstance(body.get("auth_token"), str):
            from ..errors import SandboxdError

            raise SandboxdError("token refresh answered without auth_token", code="INVALID_RESPONSE")
        return body["auth_token"], body.get("token_expires_at")

    def refresh_token(self) -> Dict[str, Any]:
        """Gets a fresh agent token now (normally automatic)."""
        self._tokens.refresh_now()
        return self.token or {}

    @property
    def token(self) -> Optional[Dict[str, Any]]:
        """The cached agent token and its expiry (a datetime, or None), if one was fetched."""
        t = self._tokens
        if t.token is None:
            return None
        return {"token": t.token, "expires_at": datetime.fromtimestamp(t.expires_at, timezone.utc) if t.expires_at else None}

    # ---- code (the agent) -----------------------------------------------------------------------

    def run_code(
        self,
        code: str,
        *,
        language: str = "python",
        timeout: Optional[int] = None,
        env: Optional[Dict[str, str]] = None,
        working_dir: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        context: Optional[ContextRef] = None,
        isolated: Optional[bool] = None,
        rich: bool = False,
        cache: bool = False,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        request_timeout: Optional[float] = None,
    ) -> ExecutionResult:
        """Runs code and waits for the result. A non-zero exit or a timeout is a result, not an error.
        ``language``: ``python`` (default), ``javascript``, ``bash``, ``go`` and aliases. Without
        ``context`` Python and JavaScript run in the language's default context, where state lives
        between calls; ``isolated=True`` runs a fresh process. ``rich=True`` saves figures as files
        (``rich_outputs``). Given ``on_stdout``/``on_stderr``, output arrives while it runs. Never
        repeated automatically."""
        wait = request_timeout if request_timeout is not None else deadline_for(timeout)
        if on_stdout is not None or on_stderr is not None:
            return stream_execute(
                self._agent, code=code, language=language, timeout=timeout, working_dir=working_dir, env=env, stdin=stdin,
                context_id=_context_id(context), isolated=isolated, on_stdout=on_stdout, on_stderr=on_stderr, request_timeout=wait,
            )
        body = self._agent.http.json(
            "POST", "/execute/rich" if rich else "/execute",
            json=_execute_body(code, language, timeout, working_dir, env, stdin, cache, context, isolated), timeout=wait, what="execute",
        )
        return ExecutionResult.from_wire(body)

    def run_code_background(
        self,
        code: str,
        *,
        language: str = "python",
        name: Optional[str] = None,
        timeout: Optional[int] = None,
        env: Optional[Dict[str, str]] = None,
        working_dir: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        context: Optional[ContextRef] = None,
        isolated: Optional[bool] = None,
        request_timeout: Optional[float] = None,
    ) -> BackgroundProcess:
        """Starts code in the background; follow it with ``sandbox.processes``."""
        body = _execute_body(code, language, timeout, working_dir, env, stdin, False, context, isolated)
        if name:
            body["name"] = name
        res = self._agent.http.json("POST", "/execute/background", json=body, timeout=request_timeout or 30.0, what="start background execution")
        return BackgroundProcess.from_wire(res)

    def run_code_async(
        self,
        code: str,
        *,
        callback_url: str,
        callback_headers: Optional[Dict[str, str]] = None,
        signature_secret: Optional[str] = None,
        language: str = "python",
        timeout: Optional[int] = None,
        env: Optional[Dict[str, str]] = None,
        working_dir: Optional[str] = None,
        context: Optional[ContextRef] = None,
        request_timeout: Optional[float] = None,
    ) -> BackgroundProcess:
        """Starts code in the background; the agent POSTs the result to ``callback_url`` when it ends
        (signed with ``X-Sandboxd-Signature: sha256=<hex HMAC>`` when ``signature_secret`` is given)."""
        body = _execute_body(code, language, timeout, working_dir, env, None, False, context, None)
        body["callback_url"] = callback_url
        if callback_headers:
            body["callback_headers"] = callback_headers
        if signature_secret:
            body["callback_signature_secret"] = signature_secret
        res = self._agent.http.json("POST", "/execute/async", json=body, timeout=request_timeout or 30.0, what="start async execution")
        return BackgroundProcess.from_wire(res)

    def create_code_context(
        self, *, language: str = "python", cwd: Optional[str] = None, env: Optional[Dict[str, str]] = None, request_timeout: Optional[float] = None
    ) -> CodeContext:
        """A new code context: an interpreter of its own, run in parallel with the others."""
        body: Dict[str, Any] = {"language": language}
        if cwd is not None:
            body["cwd"] = cwd
        if env is not None:
            body["env"] = env
        return CodeContext.from_wire(self._agent.http.json("POST", "/contexts", json=body, timeout=request_timeout, what="create code context"))

    def list_code_contexts(self, *, request_timeout: Optional[float] = None) -> List[CodeContext]:
        body = self._agent.http.json("GET", "/contexts", timeout=request_timeout, what="list code contexts")
        return [CodeContext.from_wire(c) for c in body.get("contexts") or []]

    def restart_code_context(self, context: ContextRef, *, request_timeout: Optional[float] = None) -> CodeContext:
        """Kills the context's kernel: its next run starts with a fresh state."""
        cid = _enc(_context_id(context) or "")
        return CodeContext.from_wire(self._agent.http.json("POST", f"/contexts/{cid}/restart", timeout=request_timeout, what="restart code context"))

    def delete_code_context(self, context: ContextRef, *, request_timeout: Optional[float] = None) -> None:
        self._agent.http.json("DELETE", f"/contexts/{_enc(_context_id(context) or '')}", timeout=request_timeout, what="delete code context")

    def kernels(self, *, request_timeout: Optional[float] = None) -> List[KernelSession]:
        """The sandbox's kernels, as ``GET /jupyter/sessions`` lists them."""
        body = self._agent.http.json("GET", "/jupyter/sessions", timeout=request_timeout, what="list kernels")
        return [KernelSession.from_wire(s) for s in body.get("sessions") or []]

    def metrics(self, *, request_timeout: Optional[float] = None) -> MetricsSnapshot:
        return MetricsSnapshot.from_wire(self._agent.http.json("GET", "/metrics/snapshot", timeout=request_timeout, what="agent metrics"))

    def health(self, *, request_timeout: Optional[float] = None) -> AgentHealth:
        return AgentHealth.from_wire(self._agent.http.json("GET", "/health", timeout=request_timeout, what="agent health"))

    def agent_info(self, *, request_timeout: Optional[float] = None) -> AgentInfo:
        return AgentInfo.from_wire(self._agent.http.json("GET", "/info", timeout=request_timeout, what="agent info"))

    def terminal(self, *, cols: Optional[int] = None, rows: Optional[int] = None, connect_timeout: float = 30.0) -> Terminal:
        """Opens an interactive shell on a pseudo-terminal in the sandbox."""
        return Terminal.open(self._agent, cols, rows, connect_timeout)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        from ..errors import NotFoundError

        try:
            self.kill()
        except NotFoundError:
            pass
