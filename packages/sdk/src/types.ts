/**
 * Public shapes of the SDK (camelCase). The wire shapes are snake_case (service-spec.md,
 * api-decisions.md); `wire.ts` converts. Results are plain data, so JSON.stringify prints them.
 */

export type SandboxStatus = 'running' | 'paused' | 'stopped' | 'deleted' | (string & {});

export interface Resources {
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  diskMb?: number;
}

export interface SandboxInfo {
  id: string;
  status: SandboxStatus;
  templateName: string;
  templateId: string;
  organizationId: string;
  region: string;
  /** Base address of the sandbox's agent interface. */
  publicHost: string;
  internetAccess: boolean;
  /** Auto-kill timeout; null = none. */
  timeoutSeconds: number | null;
  /** When the sandbox's timeout acts (ISO 8601); null = never. A sandbox paused by its timeout: when it is deleted. */
  expiresAt: string | null;
  /** What the timeout does: `delete` or `pause`. */
  onTimeout: 'delete' | 'pause';
  /** Paused after this long unused; null = never. */
  idleTimeoutSeconds: number | null;
  /** A request while paused resumes it. */
  autoResume: boolean;
  /** Where it may connect to (its egress rules). */
  network: NetworkPolicy;
  createdAt: string;
  updatedAt: string;
  resources: Resources;
  /** A cluster's: false while the node that holds it is away (its calls fail with NODE_UNAVAILABLE). Absent on one machine. */
  available?: boolean;
  /** The volumes it mounts (shared, not copies); absent: none. */
  volumes?: SandboxVolume[];
}

/** A volume as a sandbox mounts it. */
export interface SandboxVolume {
  volumeId: string;
  name: string;
  path: string;
  readOnly: boolean;
}

/** A volume (`Volume.create`): a filesystem of `sizeGb` that outlives sandboxes and that several share. */
export interface VolumeInfo {
  id: string;
  name: string;
  organizationId: string;
  sizeGb: number;
  /** What its filesystem holds (`Volume.get` only). */
  usedBytes?: number;
  /** The sandboxes (not deleted) that mount it. */
  mountedBy: string[];
  /** The machine it lives on. */
  node?: string;
  createdAt: string;
}

/**
 * A sandbox's egress rules. Entries are IPv4 addresses (`1.2.3.4`), IPv4 CIDRs (`10.0.0.0/8`),
 * domains (`example.com`) or wildcard domains (`*.example.com`), as the service normalized them
 * (domains lowercased, CIDRs with their host bits cleared).
 */
export interface NetworkPolicy {
  /** False: no connection leaves the sandbox. Set at creation; a sandbox made without it cannot get it later. */
  internetAccess: boolean;
  /** When not empty, only these may be reached; everything else is refused. */
  allowOut: string[];
  /** Never reached, even when also allowed. */
  denyOut: string[];
}

export interface SandboxPage {
  data: SandboxInfo[];
  hasMore: boolean;
  nextCursor: string | null;
}

/**
 * A saved copy of a sandbox's filesystem, environment and template settings: new sandboxes can be
 * created from it (`Sandbox.create({ snapshot })`), the sandbox restored to it, or it made a template.
 */
export interface SnapshotInfo {
  /** The same as `snapshotId`. */
  id: string;
  snapshotId: string;
  name: string | null;
  /** The sandbox it was taken of (it may have been deleted since). */
  sandboxId: string;
  organizationId: string;
  templateId: string;
  templateName: string;
  /** The snapshot that sandbox was created from or last restored to, if any. */
  parentSnapshotId: string | null;
  /** Bytes this snapshot stores itself: what changed since its template or its parent (what counts against the storage quota). */
  size: number;
  createdAt: string;
  resources: Resources;
}

export interface SnapshotPage {
  data: SnapshotInfo[];
  hasMore: boolean;
  nextCursor: string | null;
}

export interface ActionResult {
  id: string;
  status: SandboxStatus;
}

export interface TimeoutResult {
  id: string;
  timeoutSeconds: number;
  expiresAt: string;
}

export interface RichOutput {
  /** `image`, `html`, `json`, ... */
  type: string;
  /** File in the sandbox; fetch it with `sandbox.files.download(path)`. */
  path: string;
  mime: string;
}

export interface ExecutionResult {
  success: boolean;
  stdout: string;
  stderr: string;
  exitCode: number;
  /** Seconds. */
  executionTime: number;
  timedOut: boolean;
  language?: string;
  /** True when output was cut at the service's per-stream cap. */
  truncated?: boolean;
  /** Base64 PNG of a figure the code produced. */
  png?: string;
  svg?: string;
  html?: string;
  json?: unknown;
  /** Only with `rich: true`. */
  richOutputs?: RichOutput[];
  /** Text repr of the value of a last-line expression (Python). */
  result?: string;
  /** The code context the code ran in (absent: a fresh process). */
  contextId?: string;
  /** The context's kernel died during or before this run: earlier state is gone. */
  kernelRestarted?: boolean;
}

/** A code context: a persistent interpreter whose state lives between `runCode` calls. */
export interface CodeContext {
  id: string;
  language: string;
  cwd: string;
  envVars: Record<string, string>;
  /** The language's default context (the one `runCode` uses without `context`). */
  isDefault: boolean;
  kernelId: string;
  /** `dead` until its first run, and after its kernel died. */
  state: 'starting' | 'idle' | 'busy' | 'dead' | (string & {});
  createdAt: string;
}

/** A kernel as `GET /jupyter/sessions` lists it. */
export interface KernelSession {
  kernelId: string;
  contextId: string;
  language: string;
  executionState: string;
  alive: boolean;
  connections: number;
  lastActivity: string;
}

export type CommandResult = Omit<ExecutionResult, 'language' | 'png' | 'svg' | 'html' | 'json' | 'richOutputs' | 'result' | 'contextId' | 'kernelRestarted'>;

export interface BackgroundProcess {
  processId: string;
  executionId: string;
  status: string;
  startedAt?: string;
}

export type ProcessStatus = 'running' | 'completed' | 'failed' | 'killed' | 'timeout' | (string & {});

export interface ProcessInfo {
  processId: string;
  executionId?: string;
  name?: string;
  status: ProcessStatus;
  language?: string;
  startedAt?: string;
  endTime?: string | null;
  exitCode?: number | null;
  pid?: number;
  /** Kept for finished processes. */
  stdout?: string;
  stderr?: string;
  /** For `runCodeAsync`: how the delivery of the result to its callback URL went. */
  callback?: CallbackDelivery;
}

export interface CallbackDelivery {
  url: string;
  status: 'pending' | 'delivered' | 'failed' | (string & {});
  attempts: number;
  lastStatusCode?: number;
  error?: string;
  deliveredAt?: string;
}

export interface FileEntry {
  name: string;
  path: string;
  size: number;
  isDir: boolean;
  permissions?: string;
  modified?: string;
}

export interface WriteResult {
  path: string;
  size: number;
}

export interface MetricsSnapshot {
  uptimeSeconds: number;
  totalRequests: number;
  totalErrors: number;
  /** Request count per agent path. */
  requestsTotal: Record<string, number>;
  totalExecutions?: number;
  activeExecutions?: number;
  /** CPU, memory and disk as the agent reads them from the sandbox's cgroup and filesystem. */
  system?: Record<string, unknown>;
}

export interface AgentHealth {
  status: string;
  version?: string;
  uptimeSeconds?: number;
  features: string[];
  languages?: string[];
}

export interface AgentInfo {
  agent: string;
  version: string;
  sandboxId: string;
  startedAt: string;
}

export interface CacheStats {
  size: number;
  hits: number;
  misses: number;
  maxSize?: number;
  totalHits?: number;
}

export interface TemplateInfo {
  id: string;
  name: string;
  displayName: string;
  description: string;
  category: string;
  language: string;
  status: string;
  isActive: boolean;
  isPublic: boolean;
  buildId: string | null;
  features: string[];
  defaultResources: { vcpu: number; memoryMb: number; diskGb: number };
  createdAt?: string;
  updatedAt?: string;
}

export type BuildState = 'building' | 'active' | 'failed' | (string & {});

export interface BuildStatus {
  buildId: string;
  templateId: string;
  status: BuildState;
  /** 0 to 100. */
  progress: number;
  currentStep: string | null;
  startedAt: string | null;
  completedAt: string | null;
  errorMessage: string | null;
  buildDurationMs: number | null;
}

export interface BuildLogEntry {
  level: string;
  message: string;
  timestamp: string;
}

export interface BuildLogsChunk {
  /** New lines since the requested offset. */
  logs: string;
  /** Pass this as the next offset. */
  offset: number;
  status: BuildState;
  complete: boolean;
}

/** A port something listens on inside a sandbox. */
export interface ListeningPort {
  port: number;
  /** Where: 0.0.0.0 or :: for every address. */
  addresses: string[];
  /** Reachable only from inside the sandbox. */
  loopbackOnly: boolean;
}

/** A port's preview URL (`GET /v1/sandboxes/{id}/ports/{port}`). */
export interface PreviewUrl {
  port: number;
  /** Where the port is served (HTTP, WebSocket, server-sent events). */
  url: string;
  /** Open to anyone with the URL; otherwise requests need the X-Sandboxd-Token header or the signed link's cookie. */
  public: boolean;
  /** Private ports: a short-lived link that opens the preview in a browser (it sets a 24 h session cookie). */
  signedUrl?: string;
  signedUrlExpiresAt?: string;
}

/** One sandbox's resource use now (`GET /v1/sandboxes/{id}/metrics`); counters since it last started. */
export interface SandboxResources {
  sandboxId: string;
  status: string;
  timestamp: string;
  cpu: { usageSeconds: number; vcpu: number };
  memory: { usedBytes: number; limitBytes: number };
  disk: { usedBytes: number; totalBytes: number };
  network: { rxBytes: number; txBytes: number };
  pids: number;
  oomKills: number;
  /** Connections (and datagrams) its egress rules refused since the daemon started (not since the sandbox did). */
  egressDenied: number;
}
