export { Sandbox } from './sandbox.js';
export { DEFAULT_TEMPLATE } from './sandbox-options.js';
export type { ConnectOptions, CreateCodeContextOptions, CreateOptions, CreateSnapshotOptions, ForkOptions, VolumeMountOptions, ListOptions, RunCodeOptions, SandboxOptions } from './sandbox-options.js';
export { Snapshot } from './snapshot.js';
export { Volume } from './volume.js';
export type { VolumeOptions, VolumeRef } from './volume.js';
export type { ListSnapshotsOptions, SnapshotOptions, SnapshotRef } from './snapshot.js';
export { Template, isTerminalBuildStatus } from './template.js';
export type { BuildOptions, BuildResult, BuildStarted, BuildStep, TemplateDefinition, TemplateOptions, WaitBuildOptions } from './template.js';
export { Admin } from './admin.js';
export type { AdminOptions, ApiKeyInfo, CreatedApiKey, OrgInfo } from './admin.js';
export { ApiClient } from './client.js';
export type { CallOptions } from './client.js';
export { DEFAULT_API_URL, resolveConfig } from './config.js';
export type { ClientOptions } from './config.js';
export { Files } from './files.js';
export type { TransferOptions, WriteOptions } from './files.js';
export { Commands } from './commands.js';
export type { CommandOptions, RunOptions } from './commands.js';
export { Processes, ProcessAttachment } from './processes.js';
export type { WaitOptions, AttachEvent, AttachOptions, OutputChunk, OutputOptions, OutputStream, ProcessExit, ProcessOutput } from './processes.js';
export { Env } from './env.js';
export { Cache } from './cache.js';
export { Desktop, NOVNC_PORT } from './desktop.js';
export type { DesktopWindow, DisplayInfo, MouseButton, RecordingInfo, Region, TextBounds, VncInfo } from './desktop.js';
export { Terminal } from './terminal.js';
export { FileWatcher } from './watch.js';
export type { FileChange, FileChangeEvent, WatchOptions } from './watch.js';
export type { TerminalOptions } from './terminal.js';
export { Paginator } from './pagination.js';
export type { Page } from './pagination.js';
export type { UploadSource } from './body.js';
export { shellQuote, shellJoin } from './shell.js';
export {
  SandboxdError,
  ValidationError,
  AuthenticationError,
  PermissionDeniedError,
  NotFoundError,
  ConflictError,
  InvalidStateError,
  SandboxExpiredError,
  PayloadTooLargeError,
  RateLimitError,
  ServerError,
  TimeoutError,
  AbortError,
  ConnectionError,
  TemplateBuildError,
  errorFromResponse,
  KNOWN_ERROR_CODES,
} from './errors.js';
export { SDK_VERSION } from './version.js';
export type {
  SandboxStatus,
  Resources,
  SandboxInfo,
  SandboxPage,
  SandboxResources,
  SnapshotInfo,
  SandboxVolume,
  VolumeInfo,
  SnapshotPage,
  NetworkPolicy,
  ListeningPort,
  PreviewUrl,
  ActionResult,
  TimeoutResult,
  RichOutput,
  ExecutionResult,
  CodeContext,
  KernelSession,
  CommandResult,
  BackgroundProcess,
  CallbackDelivery,
  ProcessStatus,
  ProcessInfo,
  FileEntry,
  WriteResult,
  MetricsSnapshot,
  AgentHealth,
  AgentInfo,
  CacheStats,
  TemplateInfo,
  BuildState,
  BuildStatus,
  BuildLogEntry,
  BuildLogsChunk,
} from './types.js';
