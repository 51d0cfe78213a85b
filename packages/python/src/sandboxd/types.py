"""Public shapes (snake_case, as on the wire). Each has ``from_wire``, lenient on purpose: a missing
optional field becomes a neutral value instead of an exception."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

__all__ = [
    "Resources",
    "NetworkPolicy",
    "SandboxInfo",
    "SandboxPage",
    "SnapshotInfo",
    "SnapshotPage",
    "ActionResult",
    "TimeoutResult",
    "RichOutput",
    "CommandResult",
    "ExecutionResult",
    "CodeContext",
    "KernelSession",
    "BackgroundProcess",
    "CallbackDelivery",
    "ProcessInfo",
    "FileEntry",
    "WriteResult",
    "FileChange",
    "MetricsSnapshot",
    "AgentHealth",
    "AgentInfo",
    "CacheStats",
    "TemplateInfo",
    "BuildStatus",
    "BuildLogEntry",
    "BuildLogsChunk",
    "BuildStarted",
    "BuildResult",
    "ListeningPort",
    "PreviewUrl",
    "SandboxResources",
    "SandboxEvent",
    "EventsToken",
    "OrgInfo",
    "ApiKeyInfo",
    "CreatedApiKey",
    "DeletedOrg",
    "VolumeInfo",
    "SandboxVolume",
    "OutputChunk",
    "ProcessOutput",
    "AttachEvent",
]

Obj = Dict[str, Any]


def _obj(v: Any) -> Obj:
    return v if isinstance(v, dict) else {}


def _s(v: Any, d: str = "") -> str:
    return v if isinstance(v, str) else d if v is None else str(v)


def _os(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _n(v: Any, d: float = 0) -> Any:
    if isinstance(v, bool):
        return d
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        try:
            return float(v) if "." in v else int(v)
        except ValueError:
            return d
    return d


def _on(v: Any) -> Any:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _list(v: Any) -> List[Any]:
    return v if isinstance(v, list) else []


def _strs(v: Any) -> List[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


@dataclass
class Resources:
    vcpu: float = 0
    memory_mb: int = 0
    disk_gb: float = 0
    disk_mb: Optional[int] = None

    @classmethod
    def from_wire(cls, v: Any) -> "Resources":
        r = _obj(v)
        return cls(vcpu=_n(r.get("vcpu")), memory_mb=_n(r.get("memory_mb")), disk_gb=_n(r.get("disk_gb")), disk_mb=_on(r.get("disk_mb")))


@dataclass
class NetworkPolicy:
    """A sandbox's egress rules: internet access, and its allow and deny lists."""

    internet_access: bool = True
    allow_out: List[str] = field(default_factory=list)
    deny_out: List[str] = field(default_factory=list)

    @classmethod
    def from_wire(cls, v: Any) -> "NetworkPolicy":
        o = _obj(v)
        return cls(o.get("internet_access") is not False, _strs(o.get("allow_out")), _strs(o.get("deny_out")))


@dataclass
class VolumeInfo:
    """A volume: a filesystem that outlives sandboxes, mounted by any number of them."""

    id: str
    name: str
    organization_id: str = ""
    size_gb: float = 0
    used_bytes: Optional[int] = None
    """What its filesystem holds (``Volume.get`` only)."""
    mounted_by: List[str] = field(default_factory=list)
    node: Optional[str] = None
    created_at: str = ""

    @classmethod
    def from_wire(cls, v: Any) -> "VolumeInfo":
        o = _obj(v)
        return cls(_s(o.get("id")), _s(o.get("name")), _s(o.get("organization_id")), _n(o.get("size_gb")), _on(o.get("used_bytes")), _strs(o.get("mounted_by")), _os(o.get("node")), _s(o.get("created_at")))


@dataclass
class SandboxVolume:
    """A volume a sandbox mounts, at ``path``."""

    volume_id: str
    name: str
    path: str
    read_only: bool = False


@dataclass
class SandboxInfo:
    id: str
    status: str = ""
    template_name: str = ""
    template_id: str = ""
    organization_id: str = ""
    region: str = ""
    public_host: str = ""
    internet_access: bool = True
    timeout_seconds: Optional[int] = None
    expires_at: Optional[str] = None
    on_timeout: str = "delete"
    idle_timeout_seconds: Optional[int] = None
    auto_resume: bool = False
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    created_at: str = ""
    updated_at: str = ""
    resources: Resources = field(default_factory=Resources)
    available: Optional[bool] = None
    volumes: List[SandboxVolume] = field(default_factory=list)

    @classmethod
    def from_wire(cls, v: Any) -> "SandboxInfo":
        o = _obj(v)
        return cls(
            id=_s(o.get("id", o.get("sandbox_id"))),
            status=_s(o.get("status")),
            template_name=_s(o.get("template_name")),
            template_id=_s(o.get("template_id")),
            organization_id=_s(o.get("organization_id")),
            region=_s(o.get("region")),
            public_host=_s(o.get("public_host") or o.get("direct_url")),
            internet_access=o.get("internet_access") is not False,
            timeout_seconds=_on(o.get("timeout_seconds")),
            expires_at=_os(o.get("expires_at")),
            on_timeout="pause" if o.get("on_timeout") == "pause" else "delete",
            idle_timeout_seconds=_on(o.get("idle_timeout_seconds")),
            auto_resume=o.get("auto_resume") is True,
            network=NetworkPolicy.from_wire(o.get("network", {"internet_access": o.get("internet_access")})),
            created_at=_s(o.get("created_at")),
            updated_at=_s(o.get("updated_at")),
            resources=Resources.from_wire(o.get("resources")),
            available=o.get("available") if isinstance(o.get("available"), bool) else None,
            volumes=[
                SandboxVolume(_s(_obj(x).get("volume_id")), _s(_obj(x).get("name")), _s(_obj(x).get("path")), _obj(x).get("read_only") is True)
                for x in _list(o.get("volumes"))
            ],
        )


@dataclass
class SandboxPage:
    data: List[SandboxInfo]
    has_more: bool
    next_cursor: Optional[str]

    @classmethod
    def from_wire(cls, v: Any) -> "SandboxPage":
        o = _obj(v)
        data = o.get("data")
        return cls([SandboxInfo.from_wire(x) for x in data] if isinstance(data, list) else [], o.get("has_more") is True, _os(o.get("next_cursor")))


@dataclass
class SnapshotInfo:
    """A saved copy of a sandbox's filesystem, environment and template settings."""

    id: str
    name: Optional[str] = None
    sandbox_id: str = ""
    organization_id: str = ""
    template_id: str = ""
    template_name: str = ""
    parent_snapshot_id: Optional[str] = None
    size: int = 0
    created_at: str = ""
    resources: Resources = field(default_factory=Resources)

    @property
    def snapshot_id(self) -> str:
        return self.id

    @classmethod
    def from_wire(cls, v: Any) -> "SnapshotInfo":
        o = _obj(v)
        return cls(
            id=_s(o.get("snapshot_id", o.get("id"))),
            name=_os(o.get("name")),
            sandbox_id=_s(o.get("sandbox_id")),
            organization_id=_s(o.get("organization_id")),
            template_id=_s(o.get("template_id")),
            template_name=_s(o.get("template_name")),
            parent_snapshot_id=_os(o.get("parent_snapshot_id")),
            size=_n(o.get("size")),
            created_at=_s(o.get("created_at")),
            resources=Resources.from_wire(o.get("resources")),
        )


@dataclass
class SnapshotPage:
    data: List[SnapshotInfo]
    has_more: bool
    next_cursor: Optional[str]

    @classmethod
    def from_wire(cls, v: Any) -> "SnapshotPage":
        o = _obj(v)
        data = o.get("data")
        return cls([SnapshotInfo.from_wire(x) for x in data] if isinstance(data, list) else [], o.get("has_more") is True, _os(o.get("next_cursor")))


@dataclass
class ActionResult:
    id: str
    status: str


@dataclass
class TimeoutResult:
    id: str
    timeout_seconds: int
    expires_at: str


@dataclass
class RichOutput:
    """A rich output saved as a file in the sandbox (fetch it with ``files.download(path)``)."""

    type: str
    path: str
    mime: str


@dataclass
class CommandResult:
    """A finished command or execution. A non-zero exit or a timeout is a result, not an error."""

    success: bool
    stdout: str
    stderr: str
    exit_code: int
    execution_time: float
    timed_out: bool = False
    truncated: bool = False

    @classmethod
    def from_wire(cls, v: Any) -> "CommandResult":
        o = _obj(v)
        exit_code = _n(o.get("exit_code"), -1)
        return cls(
            success=o["success"] if isinstance(o.get("success"), bool) else exit_code == 0,
            stdout=_s(o.get("stdout")),
            stderr=_s(o.get("stderr")),
            exit_code=exit_code,
            execution_time=_n(o.get("execution_time")),
            timed_out=o.get("timed_out") is True,
            truncated=o.get("truncated") is True,
        )


@dataclass
class ExecutionResult(CommandResult):
    language: Optional[str] = None
    png: Optional[str] = None
    """Base64 PNG of a figure the code produced."""
    svg: Optional[str] = None
    html: Optional[str] = None
    json: Any = None
    rich_outputs: Optional[List[RichOutput]] = None
    """Only with ``rich=True``."""
    result: Optional[str] = None
    """Text repr of the value of a last-line expression (Python, JavaScript)."""
    context_id: Optional[str] = None
    kernel_restarted: bool = False

    @classmethod
    def from_wire(cls, v: Any) -> "ExecutionResult":
        o = _obj(v)
        base = CommandResult.from_wire(o)
        rich = o.get("rich_outputs")
        return cls(
            **base.__dict__,
            language=_os(o.get("language")),
            png=_os(o.get("png")),
            svg=_os(o.get("svg")),
            html=_os(o.get("html")),
            json=o.get("json"),
            rich_outputs=[RichOutput(_s(_obj(r).get("type")), _s(_obj(r).get("path")), _s(_obj(r).get("mime"))) for r in rich] if isinstance(rich, list) else None,
            result=_os(o.get("result")),
            context_id=_os(o.get("context_id")),
            kernel_restarted=o.get("kernel_restarted") is True,
        )


@dataclass
class CodeContext:
    """A persistent interpreter whose state lives between ``run_code`` calls."""

    id: str
    language: str = ""
    cwd: str = ""
    env_vars: Dict[str, str] = field(default_factory=dict)
    is_default: bool = False
    kernel_id: str = ""
    state: str = "dead"
    created_at: str = ""

    @classmethod
    def from_wire(cls, v: Any) -> "CodeContext":
        o = _obj(v)
        env = {k: x for k, x in _obj(o.get("env_vars")).items() if isinstance(x, str)}
        return cls(_s(o.get("id")), _s(o.get("language")), _s(o.get("cwd")), env, o.get("default") is True, _s(o.get("kernel_id")), _s(o.get("state"), "dead"), _s(o.get("created_at")))


@dataclass
class KernelSession:
    kernel_id: str
    context_id: str
    language: str
    execution_state: str
    alive: bool
    connections: int
    last_activity: str

    @classmethod
    def from_wire(cls, v: Any) -> "KernelSession":
        o = _obj(v)
        return cls(_s(o.get("kernel_id")), _s(o.get("context_id")), _s(o.get("language")), _s(o.get("execution_state"), "idle"), o.get("alive") is True, _n(o.get("connections")), _s(o.get("last_activity")))


@dataclass
class BackgroundProcess:
    process_id: str
    execution_id: str
    status: str = "running"
    started_at: Optional[str] = None

    @classmethod
    def from_wire(cls, v: Any) -> "BackgroundProcess":
        o = _obj(v)
        return cls(
            _s(o.get("process_id", o.get("execution_id"))),
            _s(o.get("execution_id", o.get("process_id"))),
            _s(o.get("status"), "running"),
            _os(o.get("started_at")) or _os(o.get("start_time")),
        )


@dataclass
class CallbackDelivery:
    url: str
    status: str
    attempts: int
    last_status_code: Optional[int] = None
    error: Optional[str] = None
    delivered_at: Optional[str] = None


@dataclass
class ProcessInfo:
    process_id: str
    status: str
    execution_id: Optional[str] = None
    name: Optional[str] = None
    language: Optional[str] = None
    started_at: Optional[str] = None
    end_time: Optional[str] = None
    exit_code: Optional[int] = None
    pid: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None
    callback: Optional[CallbackDelivery] = None

    @classmethod
    def from_wire(cls, v: Any) -> "ProcessInfo":
        o = _obj(v)
        cb = None
        if isinstance(o.get("callback"), dict):
            c = o["callback"]
            cb = CallbackDelivery(_s(c.get("url")), _s(c.get("status")), _n(c.get("attempts")), _on(c.get("last_status_code")), _os(c.get("error")), _os(c.get("delivered_at")))
        return cls(
            process_id=_s(o.get("process_id", o.get("execution_id"))),
            status=_s(o.get("status")),
            execution_id=_os(o.get("execution_id")),
            name=_os(o.get("name")),
            language=_os(o.get("language")),
            started_at=_os(o.get("started_at")) or _os(o.get("start_time")),
            end_time=_os(o.get("end_time")),
            exit_code=_on(o.get("exit_code")),
            pid=_on(o.get("pid")),
            stdout=_os(o.get("stdout")),
            stderr=_os(o.get("stderr")),
            callback=cb,
        )


@dataclass
class OutputChunk:
    """A piece of a background process's output; ``offset`` counts the bytes of both streams before it."""

    stream: str
    offset: int
    data: str


@dataclass
class ProcessOutput:
    """A background process's output kept from ``since``; read on with ``since=next_offset`` until ``complete``."""

    process_id: str
    status: str
    exit_code: Optional[int]
    since: int
    next_offset: int
    start_offset: int
    end_offset: int
    lost_bytes: int
    complete: bool
    chunks: List[OutputChunk]

    @property
    def text(self) -> str:
        """The chunks' text, both streams in the order written."""
        return "".join(c.data for c in self.chunks)

    @classmethod
    def from_wire(cls, v: Any, process_id: str = "") -> "ProcessOutput":
        o = _obj(v)
        chunks = [OutputChunk(_s(_obj(c).get("stream")), _n(_obj(c).get("offset")), _s(_obj(c).get("data"))) for c in _list(o.get("chunks"))]
        return cls(
            _s(o.get("process_id"), process_id), _s(o.get("status")), _on(o.get("exit_code")), _n(o.get("since")), _n(o.get("next_offset")),
            _n(o.get("start_offset")), _n(o.get("end_offset")), _n(o.get("lost_bytes")), o.get("complete") is True, chunks,
        )


@dataclass
class AttachEvent:
    """What an attach to a background process reports, in order: ``stdout``/``stderr`` output
    (``data``), ``lost`` (``bytes`` the agent dropped before this client read them), and last
    ``exit`` (``status``, ``exit_code``). ``offset``: where the event starts (for ``exit``: the end
    of the output, to read on from)."""

    type: str
    offset: int
    data: str = ""
    bytes: int = 0
    status: Optional[str] = None
    exit_code: Optional[int] = None


@dataclass
class FileEntry:
    name: str
    path: str
    size: int
    is_dir: bool
    permissions: Optional[str] = None
    modified: Optional[str] = None

    @classmethod
    def from_wire(cls, v: Any) -> "FileEntry":
        o = _obj(v)
        return cls(
            _s(o.get("name")),
            _s(o.get("path")),
            _n(o.get("size")),
            o.get("is_dir") is True or o.get("is_directory") is True,
            _os(o.get("permissions")) or _os(o.get("mode")),
            _os(o.get("modified")) or _os(o.get("modified_time")),
        )


@dataclass
class WriteResult:
    path: str
    size: int


@dataclass
class FileChange:
    """One change below a watched directory: ``created``, ``modified``, ``deleted`` or ``renamed``."""

    event: str
    path: str
    is_dir: bool
    timestamp: str
    old_path: Optional[str] = None

    @classmethod
    def from_wire(cls, v: Any) -> "FileChange":
        o = _obj(v)
        return cls(_s(o.get("event")), _s(o.get("path")), o.get("is_dir") is True, _s(o.get("timestamp")), _os(o.get("old_path")))


@dataclass
class MetricsSnapshot:
    uptime_seconds: float
    total_requests: int
    total_errors: int
    requests_total: Dict[str, int]
    total_executions: Optional[int] = None
    active_executions: Optional[int] = None
    system: Optional[Dict[str, Any]] = None

    @classmethod
    def from_wire(cls, v: Any) -> "MetricsSnapshot":
        o = _obj(v)
        return cls(
            _n(o.get("uptime_seconds")),
            _n(o.get("total_requests")),
            _n(o.get("total_errors")),
            {k: _n(x) for k, x in _obj(o.get("requests_total")).items()},
            _on(o.get("total_executions")),
            _on(o.get("active_executions")),
            o.get("system") if isinstance(o.get("system"), dict) else None,
        )


@dataclass
class AgentHealth:
    status: str
    features: List[str]
    version: Optional[str] = None
    uptime_seconds: Optional[float] = None
    languages: Optional[List[str]] = None

    @classmethod
    def from_wire(cls, v: Any) -> "AgentHealth":
        o = _obj(v)
        return cls(_s(o.get("status")), _strs(o.get("features")), _os(o.get("version")), _on(o.get("uptime_seconds")), _strs(o.get("languages")) if isinstance(o.get("languages"), list) else None)


@dataclass
class AgentInfo:
    agent: str
    version: str
    sandbox_id: str
    started_at: str

    @classmethod
    def from_wire(cls, v: Any) -> "AgentInfo":
        o = _obj(v)
        return cls(_s(o.get("agent")), _s(o.get("version")), _s(o.get("sandbox_id")), _s(o.get("started_at")))


@dataclass
class CacheStats:
    size: int
    hits: int
    misses: int
    max_size: Optional[int] = None
    total_hits: Optional[int] = None

    @classmethod
    def from_wire(cls, v: Any) -> "CacheStats":
        c = _obj(_obj(v).get("cache"))
        return cls(_n(c.get("size")), _n(c.get("hits")), _n(c.get("misses")), _on(c.get("max_size")), _on(c.get("total_hits")))


@dataclass
class TemplateInfo:
    id: str
    name: str
    display_name: str = ""
    description: str = ""
    category: str = ""
    language: str = ""
    status: str = "active"
    is_active: bool = True
    is_public: bool = False
    build_id: Optional[str] = None
    features: List[str] = field(default_factory=list)
    default_resources: Resources = field(default_factory=Resources)
    created_at: Optional[str] = None
    updated_at: Optional[str] = None

    @classmethod
    def from_wire(cls, v: Any) -> "TemplateInfo":
        o = _obj(v)
        active = o.get("is_active")
        return cls(
            id=_s(o.get("id")),
            name=_s(o.get("name")),
            display_name=_s(o.get("display_name", o.get("name"))),
            description=_s(o.get("description")),
            category=_s(o.get("category")),
            language=_s(o.get("language")),
            status=_s(o.get("status"), "active"),
            is_active=active is True or (active is None and o.get("status") == "active"),
            is_public=o.get("is_public") is True,
            build_id=_os(o.get("build_id")),
            features=_strs(o.get("features")),
            default_resources=Resources.from_wire(o.get("default_resources")),
            created_at=_os(o.get("created_at")),
            updated_at=_os(o.get("updated_at")),
        )


@dataclass
class BuildStatus:
    build_id: str
    template_id: str
    status: str
    progress: float = 0
    current_step: Optional[str] = None
    started_at: Optional[str] = None
    completed_at: Optional[str] = None
    error_message: Optional[str] = None
    build_duration_ms: Optional[int] = None

    @classmethod
    def from_wire(cls, v: Any) -> "BuildStatus":
        o = _obj(v)
        step = o.get("current_step")
        return cls(
            _s(o.get("build_id", o.get("template_id"))),
            _s(o.get("template_id", o.get("build_id"))),
            _s(o.get("status")),
            _n(o.get("progress")),
            None if step is None else _s(step),
            _os(o.get("started_at")),
            _os(o.get("completed_at")),
            _os(o.get("error_message")),
            _on(o.get("build_duration_ms")),
        )


@dataclass
class BuildLogEntry:
    level: str
    message: str
    timestamp: str = ""


@dataclass
class BuildLogsChunk:
    logs: str
    offset: int
    status: str
    complete: bool

    @classmethod
    def from_wire(cls, v: Any) -> "BuildLogsChunk":
        o = _obj(v)
        return cls(_s(o.get("logs")), _n(o.get("offset")), _s(o.get("status")), o.get("complete") is True)


@dataclass
class BuildStarted:
    build_id: str
    template_id: str
    status: str
    logs_url: str


@dataclass
class BuildResult:
    build_id: str
    template_id: str
    status: str
    logs_url: str
    duration_ms: Optional[int] = None
    template: Optional[TemplateInfo] = None


@dataclass
class ListeningPort:
    port: int
    addresses: List[str]
    loopback_only: bool


@dataclass
class PreviewUrl:
    port: int
    url: str
    public: bool
    signed_url: Optional[str] = None
    signed_url_expires_at: Optional[str] = None

    @classmethod
    def from_wire(cls, v: Any) -> "PreviewUrl":
        o = _obj(v)
        return cls(_n(o.get("port")), _s(o.get("url")), o.get("public") is True, _os(o.get("signed_url")), _os(o.get("signed_url_expires_at")))


@dataclass
class SandboxResources:
    """One sandbox's resource use now (counters since it last started)."""

    sandbox_id: str
    status: str
    timestamp: str
    cpu_usage_seconds: float
    vcpu: float
    memory_used_bytes: int
    memory_limit_bytes: int
    disk_used_bytes: int
    disk_total_bytes: int
    network_rx_bytes: int
    network_tx_bytes: int
    pids: int
    oom_kills: int
    egress_denied: int

    @classmethod
    def from_wire(cls, v: Any) -> "SandboxResources":
        o = _obj(v)
        cpu, mem, disk, net = (_obj(o.get(k)) for k in ("cpu", "memory", "disk", "network"))
        return cls(
            _s(o.get("sandbox_id")),
            _s(o.get("status")),
            _s(o.get("timestamp")),
            _n(cpu.get("usage_seconds")),
            _n(cpu.get("vcpu")),
            _n(mem.get("used_bytes")),
            _n(mem.get("limit_bytes")),
            _n(disk.get("used_bytes")),
            _n(disk.get("total_bytes")),
            _n(net.get("rx_bytes")),
            _n(net.get("tx_bytes")),
            _n(o.get("pids")),
            _n(o.get("oom_kills")),
            _n(o.get("egress_denied")),
        )


@dataclass
class SandboxEvent:
    """A server-sent lifecycle event: ``kind`` is ``created``, ``paused``, ``resumed``, ``stopped``,
    ``started``, ``deleted``, ``expired``, ``oom_killed`` (or ``end``); ``data`` its JSON payload."""

    kind: str
    data: Dict[str, Any]
    id: Optional[str] = None

    @property
    def sandbox_id(self) -> Optional[str]:
        return _os(self.data.get("id"))

    @property
    def reason(self) -> Optional[str]:
        return _os(self.data.get("reason"))


@dataclass
class EventsToken:
    token: str
    expires_at: str
    sandbox_id: Optional[str]


@dataclass
class OrgInfo:
    id: str
    name: str
    created_at: str

    @classmethod
    def from_wire(cls, v: Any) -> "OrgInfo":
        o = _obj(v)
        return cls(_s(o.get("id")), _s(o.get("name")), _s(o.get("created_at")))


@dataclass
class ApiKeyInfo:
    id: str
    org_id: str
    org: Optional[str]
    name: str
    scopes: List[str]
    created_at: str
    revoked_at: Optional[str] = None
    last_used_at: Optional[str] = None

    @classmethod
    def from_wire(cls, v: Any) -> "ApiKeyInfo":
        k = _obj(v)
        return cls(_s(k.get("id")), _s(k.get("org_id")), _os(k.get("org")), _s(k.get("name")), [str(x) for x in k.get("scopes") or []], _s(k.get("created_at")), _os(k.get("revoked_at")), _os(k.get("last_used_at")))


@dataclass
class CreatedApiKey(ApiKeyInfo):
    secret: str = ""
    """What clients send; returned by the service this once only."""


@dataclass
class DeletedOrg(OrgInfo):
    deleted: Dict[str, int] = field(default_factory=dict)


def stdin_fields(stdin: Union[str, bytes, None]) -> Dict[str, str]:
    """The request fields for a program's stdin: text as is, bytes as base64."""
    if stdin is None:
        return {}
    if isinstance(stdin, str):
        return {"stdin": stdin}
    return {"stdin": base64.b64encode(bytes(stdin)).decode("ascii"), "stdin_encoding": "base64"}
