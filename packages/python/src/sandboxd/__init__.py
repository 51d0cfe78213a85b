"""sandboxd: the Python client.

Blocking: ``Sandbox``, ``Template``, ``Snapshot``, ``Admin``, ``Events``, ``ApiClient``.
asyncio: the same with an ``Async`` prefix (``AsyncSandbox``...), every call awaited.
"""

from ._async._http import AsyncApiClient
from ._async.admin import AsyncAdmin, AsyncEvents
from ._async.files import AsyncFiles
from ._async.sandbox import DEFAULT_TEMPLATE, AsyncEventStream, AsyncSandbox
from ._async.snapshot import AsyncSnapshot
from ._async.template import AsyncTemplate, BuildStep, is_terminal_build_status
from ._async.terminal import AsyncTerminal
from ._async.volume import AsyncVolume
from ._async.watch import AsyncFileWatcher
from ._config import DEFAULT_API_URL
from ._sync._http import ApiClient
from ._sync.admin import Admin, Events
from ._sync.files import Files
from ._sync.sandbox import EventStream, Sandbox
from ._sync.snapshot import Snapshot
from ._sync.template import Template
from ._sync.terminal import Terminal
from ._sync.volume import Volume
from ._sync.watch import FileWatcher
from ._version import __version__
from .errors import (
    ERROR_CODES,
    AuthenticationError,
    ConflictError,
    ConnectionError,
    InvalidStateError,
    MethodNotAllowedError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    SandboxdError,
    SandboxExpiredError,
    ServerError,
    TemplateBuildError,
    TimeoutError,
    UnsupportedMediaTypeError,
    ValidationError,
    error_class_for,
    error_from_response,
)
from .types import *  # noqa: F401,F403
from .types import __all__ as _types_all

__all__ = [
    "Sandbox",
    "AsyncSandbox",
    "EventStream",
    "AsyncEventStream",
    "Template",
    "AsyncTemplate",
    "Snapshot",
    "AsyncSnapshot",
    "Volume",
    "AsyncVolume",
    "Admin",
    "AsyncAdmin",
    "Events",
    "AsyncEvents",
    "ApiClient",
    "AsyncApiClient",
    "Files",
    "AsyncFiles",
    "Terminal",
    "AsyncTerminal",
    "FileWatcher",
    "AsyncFileWatcher",
    "BuildStep",
    "is_terminal_build_status",
    "DEFAULT_TEMPLATE",
    "DEFAULT_API_URL",
    "__version__",
    "SandboxdError",
    "ValidationError",
    "AuthenticationError",
    "PermissionDeniedError",
    "NotFoundError",
    "MethodNotAllowedError",
    "ConflictError",
    "InvalidStateError",
    "SandboxExpiredError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "RateLimitError",
    "ServerError",
    "TimeoutError",
    "ConnectionError",
    "TemplateBuildError",
    "ERROR_CODES",
    "error_class_for",
    "error_from_response",
    *_types_all,
]
