import type {
  AgentHealth,
  AgentInfo,
  BackgroundProcess,
  BuildLogsChunk,
  BuildStatus,
  CacheStats,
  CodeContext,
  CommandResult,
  ExecutionResult,
  FileEntry,
  KernelSession,
  MetricsSnapshot,
  NetworkPolicy,
  ProcessInfo,
  Resources,
  RichOutput,
  SandboxInfo,
  SandboxPage,
  SandboxResources,
  SandboxVolume,
  SnapshotInfo,
  SnapshotPage,
  TemplateInfo,
  VolumeInfo,
} from './types.js';

/**
 * Wire (snake_case) → SDK (camelCase). Lenient on purpose: a missing optional field becomes a
 * neutral value instead of an exception, and the spellings real agents use (`is_dir` /
 * `is_directory`, `started_at` / `start_time`) are both read.
 */

type Obj = Record<string, unknown>;

const obj = (v: unknown): Obj => (v && typeof v === 'object' ? (v as Obj) : {});
const str = (v: unknown, d = ''): string => (typeof v === 'string' ? v : v === undefined || v === null ? d : String(v));
const num = (v: unknown, d = 0): number => (typeof v === 'number' && Number.isFinite(v) ? v : typeof v === 'string' && v.trim() !== '' && Number.isFinite(Number(v)) ? Number(v) : d);
const optStr = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
const nullableStr = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const nullableNum = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
const strArr = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

export function toSandboxInfo(v: unknown): SandboxInfo {
  const o = obj(v);
  return {
    id: str(o.id ?? o.sandbox_id),
    status: str(o.status),
    templateName: str(o.template_name),
    templateId: str(o.template_id),
    organizationId: str(o.organization_id),
    region: str(o.region),
    publicHost: str(o.public_host ?? o.direct_url),
    internetAccess: o.internet_access !== false,
    timeoutSeconds: nullableNum(o.timeout_seconds),
    expiresAt: nullableStr(o.expires_at),
    onTimeout: o.on_timeout === 'pause' ? 'pause' : 'delete',
    idleTimeoutSeconds: nullableNum(o.idle_timeout_seconds),
    autoResume: o.auto_resume === true,
    // A service without egress rules sends no `network`: internet access is then all there is.
    network: toNetworkPolicy(o.network ?? { internet_access: o.internet_access }),
    createdAt: str(o.created_at),
    updatedAt: str(o.updated_at),
    resources: toResources(o.resources),
    ...(typeof o.available === 'boolean' ? { available: o.available } : {}),
    ...(Array.isArray(o.volumes) && o.volumes.length ? { volumes: o.volumes.map(toSandboxVolume) } : {}),
  };
}

function toSandboxVolume(v: unknown): SandboxVolume {
  const o = obj(v);
  return { volumeId: str(o.volume_id), name: str(o.name), path: str(o.path), readOnly: o.read_only === true };
}

export function toVolumeInfo(v: unknown): VolumeInfo {
  const o = obj(v);
  return {
    id: str(o.id),
    name: str(o.name),
    organizationId: str(o.organization_id),
    sizeGb: num(o.size_gb),
    ...(typeof o.used_bytes === 'number' ? { usedBytes: o.used_bytes } : {}),
    mountedBy: strArr(o.mounted_by),
    ...(typeof o.node === 'string' ? { node: o.node } : {}),
    createdAt: str(o.created_at),
  };
}

function toResources(v: unknown): Resources {
  const r = obj(v);
  const out: Resources = { vcpu: num(r.vcpu), memoryMb: num(r.memory_mb), diskGb: num(r.disk_gb) };
  if (typeof r.disk_mb === 'number') out.diskMb = r.disk_mb;
  return out;
}

export function toNetworkPolicy(v: unknown): NetworkPolicy {
  const o = obj(v);
  return { internetAccess: o.internet_access !== false, allowOut: strArr(o.allow_out), denyOut: strArr(o.deny_out) };
}

export function toSandboxPage(v: unknown): SandboxPage {
  const o = obj(v);
  const data = Array.isArray(o.data) ? o.data.map(toSandboxInfo) : [];
  return { data, hasMore: o.has_more === true, nextCursor: nullableStr(o.next_cursor) };
}

export function toSnapshotInfo(v: unknown): SnapshotInfo {
  const o = obj(v);
  const id = str(o.snapshot_id ?? o.id);
  return {
    id,
    snapshotId: id,
    name: nullableStr(o.name),
    sandboxId: str(o.sandbox_id),
    organizationId: str(o.organization_id),
    templateId: str(o.template_id),
    templateName: str(o.template_name),
    parentSnapshotId: nullableStr(o.parent_snapshot_id),
    size: num(o.size),
    createdAt: str(o.created_at),
    resources: toResources(o.resources),
  };
}

export function toSnapshotPage(v: unknown): SnapshotPage {
  const o = obj(v);
  const data = Array.isArray(o.data) ? o.data.map(toSnapshotInfo) : [];
  return { data, hasMore: o.has_more === true, nextCursor: nullableStr(o.next_cursor) };
}

function richOutputs(v: unknown): RichOutput[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v.map((x) => {
    const r = obj(x);
    return { type: str(r.type), path: str(r.path), mime: str(r.mime) };
  });
}

export function toCommandResult(v: unknown): CommandResult {
  const o = obj(v);
  const exitCode = num(o.exit_code, -1);
  const out: CommandResult = {
    success: typeof o.success === 'boolean' ? o.success : exitCode === 0,
    stdout: str(o.stdout),
    stderr: str(o.stderr),
    exitCode,
    executionTime: num(o.execution_time),
    timedOut: o.timed_out === true,
  };
  if (o.truncated === true) out.truncated = true;
  return out;
}

export function toExecutionResult(v: unknown): ExecutionResult {
  const o = obj(v);
  const out: ExecutionResult = { ...toCommandResult(v) };
  if (typeof o.language === 'string') out.language = o.language;
  if (typeof o.png === 'string') out.png = o.png;
  if (typeof o.svg === 'string') out.svg = o.svg;
  if (typeof o.html === 'string') out.html = o.html;
  if (o.json !== undefined) out.json = o.json;
  if (typeof o.result === 'string') out.result = o.result;
  if (typeof o.context_id === 'string') out.contextId = o.context_id;
  if (o.kernel_restarted === true) out.kernelRestarted = true;
  const rich = richOutputs(o.rich_outputs);
  if (rich) out.richOutputs = rich;
  return out;
}

export function toBackgroundProcess(v: unknown): BackgroundProcess {
  const o = obj(v);
  const out: BackgroundProcess = {
    processId: str(o.process_id ?? o.execution_id),
    executionId: str(o.execution_id ?? o.process_id),
    status: str(o.status, 'running'),
  };
  const started = optStr(o.started_at) ?? optStr(o.start_time);
  if (started) out.startedAt = started;
  return out;
}

export function toProcessInfo(v: unknown): ProcessInfo {
  const o = obj(v);
  const out: ProcessInfo = { processId: str(o.process_id ?? o.execution_id), status: str(o.status) };
  if (typeof o.execution_id === 'string') out.executionId = o.execution_id;
  if (typeof o.name === 'string') out.name = o.name;
  if (typeof o.language === 'string') out.language = o.language;
  const started = optStr(o.started_at) ?? optStr(o.start_time);
  if (started) out.startedAt = started;
  if ('end_time' in o) out.endTime = nullableStr(o.end_time);
  if ('exit_code' in o) out.exitCode = nullableNum(o.exit_code);
  if (typeof o.pid === 'number') out.pid = o.pid;
  if (typeof o.stdout === 'string') out.stdout = o.stdout;
  if (typeof o.stderr === 'string') out.stderr = o.stderr;
  if (o.callback && typeof o.callback === 'object') {
    const c = obj(o.callback);
    out.callback = { url: str(c.url), status: str(c.status), attempts: num(c.attempts) };
    if (typeof c.last_status_code === 'number') out.callback.lastStatusCode = c.last_status_code;
    if (typeof c.error === 'string') out.callback.error = c.error;
    if (typeof c.delivered_at === 'string') out.callback.deliveredAt = c.delivered_at;
  }
  return out;
}

export function toFileEntry(v: unknown): FileEntry {
  const o = obj(v);
  const out: FileEntry = {
    name: str(o.name),
    path: str(o.path),
    size: num(o.size),
    isDir: o.is_dir === true || o.is_directory === true,
  };
  const perms = optStr(o.permissions) ?? optStr(o.mode);
  if (perms) out.permissions = perms;
  const modified = optStr(o.modified) ?? optStr(o.modified_time);
  if (modified) out.modified = modified;
  return out;
}

export function toMetrics(v: unknown): MetricsSnapshot {
  const o = obj(v);
  const requests: Record<string, number> = {};
  for (const [k, n] of Object.entries(obj(o.requests_total))) requests[k] = num(n);
  const out: MetricsSnapshot = {
    uptimeSeconds: num(o.uptime_seconds),
    totalRequests: num(o.total_requests),
    totalErrors: num(o.total_errors),
    requestsTotal: requests,
  };
  if (typeof o.total_executions === 'number') out.totalExecutions = o.total_executions;
  if (typeof o.active_executions === 'number') out.activeExecutions = o.active_executions;
  if (o.system && typeof o.system === 'object') out.system = o.system as Record<string, unknown>;
  return out;
}

export function toHealth(v: unknown): AgentHealth {
  const o = obj(v);
  const out: AgentHealth = { status: str(o.status), features: strArr(o.features) };
  if (typeof o.version === 'string') out.version = o.version;
  if (typeof o.uptime_seconds === 'number') out.uptimeSeconds = o.uptime_seconds;
  if (Array.isArray(o.languages)) out.languages = strArr(o.languages);
  return out;
}

export function toAgentInfo(v: unknown): AgentInfo {
  const o = obj(v);
  return { agent: str(o.agent), version: str(o.version), sandboxId: str(o.sandbox_id), startedAt: str(o.started_at) };
}

export function toCacheStats(v: unknown): CacheStats {
  const c = obj(obj(v).cache);
  const out: CacheStats = { size: num(c.size), hits: num(c.hits), misses: num(c.misses) };
  if (typeof c.max_size === 'number') out.maxSize = c.max_size;
  if (typeof c.total_hits === 'number') out.totalHits = c.total_hits;
  return out;
}

export function toTemplateInfo(v: unknown): TemplateInfo {
  const o = obj(v);
  const r = obj(o.default_resources);
  const out: TemplateInfo = {
    id: str(o.id),
    name: str(o.name),
    displayName: str(o.display_name ?? o.name),
    description: str(o.description),
    category: str(o.category),
    language: str(o.language),
    status: str(o.status, 'active'),
    isActive: o.is_active === true || (o.is_active === undefined && o.status === 'active'),
    isPublic: o.is_public === true,
    buildId: nullableStr(o.build_id),
    features: strArr(o.features),
    defaultResources: { vcpu: num(r.vcpu), memoryMb: num(r.memory_mb), diskGb: num(r.disk_gb) },
  };
  if (typeof o.created_at === 'string') out.createdAt = o.created_at;
  if (typeof o.updated_at === 'string') out.updatedAt = o.updated_at;
  return out;
}

export function toBuildStatus(v: unknown): BuildStatus {
  const o = obj(v);
  return {
    buildId: str(o.build_id ?? o.template_id),
    templateId: str(o.template_id ?? o.build_id),
    status: str(o.status),
    progress: num(o.progress),
    currentStep: o.current_step === undefined || o.current_step === null ? null : str(o.current_step),
    startedAt: nullableStr(o.started_at),
    completedAt: nullableStr(o.completed_at),
    errorMessage: nullableStr(o.error_message),
    buildDurationMs: nullableNum(o.build_duration_ms),
  };
}

export function toBuildLogsChunk(v: unknown): BuildLogsChunk {
  const o = obj(v);
  return { logs: str(o.logs), offset: num(o.offset), status: str(o.status), complete: o.complete === true };
}

/** The request fields for a program's stdin: text as is, bytes as base64. */
export function stdinFields(stdin: string | Uint8Array | undefined): Record<string, string> {
  if (stdin === undefined) return {};
  if (typeof stdin === 'string') return { stdin };
  return { stdin: Buffer.from(stdin.buffer, stdin.byteOffset, stdin.byteLength).toString('base64'), stdin_encoding: 'base64' };
}

export function toCodeContext(v: unknown): CodeContext {
  const o = obj(v);
  const env = obj(o.env_vars);
  return {
    id: str(o.id),
    language: str(o.language),
    cwd: str(o.cwd),
    envVars: Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => typeof e[1] === 'string')),
    isDefault: o.default === true,
    kernelId: str(o.kernel_id),
    state: str(o.state, 'dead'),
    createdAt: str(o.created_at),
  };
}

export function toKernelSession(v: unknown): KernelSession {
  const o = obj(v);
  return {
    kernelId: str(o.kernel_id),
    contextId: str(o.context_id),
    language: str(o.language),
    executionState: str(o.execution_state, 'idle'),
    alive: o.alive === true,
    connections: num(o.connections),
    lastActivity: str(o.last_activity),
  };
}

export function toSandboxResources(v: unknown): SandboxResources {
  const o = obj(v);
  const cpu = obj(o.cpu);
  const memory = obj(o.memory);
  const disk = obj(o.disk);
  const network = obj(o.network);
  return {
    sandboxId: str(o.sandbox_id),
    status: str(o.status),
    timestamp: str(o.timestamp),
    cpu: { usageSeconds: num(cpu.usage_seconds), vcpu: num(cpu.vcpu) },
    memory: { usedBytes: num(memory.used_bytes), limitBytes: num(memory.limit_bytes) },
    disk: { usedBytes: num(disk.used_bytes), totalBytes: num(disk.total_bytes) },
    network: { rxBytes: num(network.rx_bytes), txBytes: num(network.tx_bytes) },
    pids: num(o.pids),
    oomKills: num(o.oom_kills),
    egressDenied: num(o.egress_denied),
  };
}
