import type { Fields, Raw } from './db.js';
import type {
  ApiKeyRow,
  BuildRow,
  NodeRow,
  NodeStatus,
  OrgRow,
  PreviewRow,
  ReplicaRole,
  ReplicaRow,
  SandboxRow,
  SandboxVolumeRow,
  SandboxUsage,
  SnapshotRow,
  TemplateRow,
  UploadRow,
} from '../types/index.js';

/*
 * Rows of either database as the store's objects. Both hand back what these read alike: JSON
 * columns as their text (PostgreSQL's jsonb too, see postgres-db.ts), flags as 1/0 or booleans,
 * counts and sums as numbers or (PostgreSQL's bigint) decimal strings, times as ISO-8601 text.
 */

const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
export const flag = (v: unknown): boolean => v === true || v === 1;
export const json = <T>(v: unknown): T => JSON.parse(String(v)) as T;
const jsonOrNull = <T>(v: unknown): T | null => (v === null || v === undefined ? null : json<T>(v));

/** A row's volumes (issue 32), only when it has any: rows without read as they always did. */
function volumesOf(v: unknown): { volumes?: SandboxVolumeRow[] } {
  const list = jsonOrNull<SandboxVolumeRow[]>(v);
  return list?.length ? { volumes: list } : {};
}

export function orgFrom(r: Raw): OrgRow {
  return { id: String(r.id), name: String(r.name), createdAt: String(r.created_at) };
}

export const KEY_FIELDS: Fields<ApiKeyRow> = {
  id: 'value', orgId: 'value', name: 'value', hash: 'value', scopes: 'json', createdAt: 'value', revokedAt: 'value', lastUsedAt: 'value',
};

export function keyFrom(r: Raw): ApiKeyRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    name: String(r.name),
    hash: String(r.hash),
    scopes: json<string[]>(r.scopes),
    createdAt: String(r.created_at),
    revokedAt: str(r.revoked_at),
    lastUsedAt: str(r.last_used_at),
  };
}

/** A built-in template's org_id is '' (NULL would take no part in UNIQUE (org_id, name)). */
export const TEMPLATE_FIELDS: Fields<TemplateRow> = {
  id: 'value', orgId: 'value', name: 'value', displayName: 'value', description: 'value', category: 'value', language: 'value',
  vcpu: 'value', memoryMb: 'value', diskGb: 'value', status: 'value', isPublic: 'value', buildId: 'value', features: 'json',
  tags: 'json', layers: 'json', env: 'json', workdir: 'value', errorMessage: 'value', createdAt: 'value', updatedAt: 'value',
  buildProgress: 'value', buildEtaAt: 'value',
};

export function templateFrom(r: Raw): TemplateRow {
  return {
    id: String(r.id),
    orgId: r.org_id === '' ? null : String(r.org_id),
    name: String(r.name),
    displayName: String(r.display_name),
    description: String(r.description),
    category: String(r.category),
    language: String(r.language),
    vcpu: Number(r.vcpu),
    memoryMb: Number(r.memory_mb),
    diskGb: Number(r.disk_gb),
    status: String(r.status) as TemplateRow['status'],
    isPublic: flag(r.is_public),
    buildId: str(r.build_id),
    features: json<string[]>(r.features),
    tags: json<string[]>(r.tags),
    layers: json<string[]>(r.layers),
    env: json<Record<string, string>>(r.env),
    workdir: str(r.workdir),
    errorMessage: str(r.error_message),
    buildProgress: r.build_progress === null || r.build_progress === undefined ? null : Number(r.build_progress),
    buildEtaAt: str(r.build_eta_at),
    createdAt: String(r.created_at),
    updatedAt: String(r.updated_at),
  };
}

export const SANDBOX_FIELDS: Fields<SandboxRow> = {
  id: 'value', orgId: 'value', templateId: 'value', templateName: 'value', status: 'value', region: 'value', internetAccess: 'value',
  egress: 'json', timeoutSeconds: 'value', expiresAt: 'value', vcpu: 'value', memoryMb: 'value', diskGb: 'value', layers: 'json',
  templateEnv: 'json', envVars: 'json', gatewayPort: 'value', nodeId: 'value', version: 'value', deletedReason: 'value',
  createdAt: 'value', updatedAt: 'value', deletedAt: 'value', onTimeout: 'value', idleTimeoutSeconds: 'value', autoResume: 'value',
  idleCheckAt: 'value', snapshotId: 'value', lineage: 'json', metadata: 'json', e2bAccessToken: 'value', volumes: 'json',
};

export function sandboxFrom(r: Raw): SandboxRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    templateId: String(r.template_id),
    templateName: String(r.template_name),
    status: String(r.status) as SandboxRow['status'],
    region: String(r.region),
    internetAccess: flag(r.internet_access),
    egress: jsonOrNull<SandboxRow['egress']>(r.egress),
    timeoutSeconds: num(r.timeout_seconds),
    expiresAt: str(r.expires_at),
    vcpu: Number(r.vcpu),
    memoryMb: Number(r.memory_mb),
    diskGb: Number(r.disk_gb),
    layers: json<string[]>(r.layers),
    templateEnv: json<Record<string, string>>(r.template_env),
    envVars: json<Record<string, string>>(r.env_vars),
    gatewayPort: num(r.gateway_port),
    nodeId: String(r.node_id),
    version: Number(r.version),
    deletedReason: str(r.deleted_reason),
    createdAt: String(r.created_at),
    updatedAt: String(r.updated_at),
    deletedAt: str(r.deleted_at),
    onTimeout: r.on_timeout === 'pause' ? 'pause' : 'delete',
    idleTimeoutSeconds: num(r.idle_timeout_seconds),
    autoResume: flag(r.auto_resume),
    idleCheckAt: str(r.idle_check_at),
    snapshotId: str(r.snapshot_id),
    lineage: jsonOrNull<string[]>(r.lineage) ?? [],
    metadata: jsonOrNull<Record<string, string>>(r.metadata) ?? {},
    e2bAccessToken: str(r.e2b_access_token),
    ...volumesOf(r.volumes),
  };
}

/** An org_usage row (or the sums of all of them); none: nothing held. */
export function usageFrom(r: Raw | undefined): SandboxUsage {
  return {
    active: Number(r?.active ?? 0),
    activeVcpu: Number(r?.active_vcpu ?? 0),
    activeMemoryMb: Number(r?.active_memory_mb ?? 0),
    stopped: Number(r?.stopped ?? 0),
    diskGb: Number(r?.disk_gb ?? 0),
  };
}

export const BUILD_FIELDS: Fields<BuildRow> = {
  id: 'value', orgId: 'value', templateId: 'value', alias: 'value', status: 'value', progress: 'value', currentStep: 'value',
  request: 'json', errorMessage: 'value', createdAt: 'value', startedAt: 'value', completedAt: 'value', heartbeatAt: 'value',
};

export function buildFrom(r: Raw): BuildRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    templateId: String(r.template_id),
    alias: String(r.alias),
    status: String(r.status) as BuildRow['status'],
    progress: Number(r.progress),
    currentStep: str(r.current_step),
    request: json<unknown>(r.request),
    errorMessage: str(r.error_message),
    createdAt: String(r.created_at),
    startedAt: str(r.started_at),
    completedAt: str(r.completed_at),
    heartbeatAt: str(r.heartbeat_at),
  };
}

export function uploadFrom(r: Raw): UploadRow {
  return {
    orgId: String(r.org_id),
    fileId: String(r.file_id),
    path: String(r.path),
    sha256: String(r.sha256),
    size: Number(r.size),
    kind: String(r.kind) as UploadRow['kind'],
    createdAt: String(r.created_at),
  };
}

export function previewFrom(r: Raw): PreviewRow {
  return {
    sandboxId: String(r.sandbox_id),
    port: Number(r.port),
    public: flag(r.public),
    gatewayPort: num(r.gateway_port),
    createdAt: String(r.created_at),
  };
}

export const SNAPSHOT_FIELDS: Fields<SnapshotRow> = {
  id: 'value', orgId: 'value', name: 'value', sandboxId: 'value', parentId: 'value', templateId: 'value', templateName: 'value',
  layers: 'json', vcpu: 'value', memoryMb: 'value', diskGb: 'value', templateEnv: 'json', envVars: 'json', internetAccess: 'value',
  egress: 'json', sizeBytes: 'value', createdAt: 'value', volumes: 'json',
};

export function snapshotFrom(r: Raw): SnapshotRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    name: str(r.name),
    sandboxId: String(r.sandbox_id),
    parentId: str(r.parent_id),
    templateId: String(r.template_id),
    templateName: String(r.template_name),
    layers: json<string[]>(r.layers),
    vcpu: Number(r.vcpu),
    memoryMb: Number(r.memory_mb),
    diskGb: Number(r.disk_gb),
    templateEnv: json<Record<string, string>>(r.template_env),
    envVars: json<Record<string, string>>(r.env_vars),
    internetAccess: flag(r.internet_access),
    egress: jsonOrNull<SnapshotRow['egress']>(r.egress),
    sizeBytes: Number(r.size_bytes),
    createdAt: String(r.created_at),
    ...volumesOf(r.volumes),
  };
}

export function nodeFrom(r: Raw): NodeRow {
  return {
    id: String(r.id),
    url: String(r.url),
    status: String(r.status) as NodeStatus,
    capacity: {
      vcpu: Number(r.capacity_vcpu),
      memoryMb: Number(r.capacity_memory_mb),
      diskGb: Number(r.capacity_disk_gb),
      maxSandboxes: Number(r.capacity_max_sandboxes),
    },
    usage: { sandboxes: Number(r.usage_sandboxes), vcpu: Number(r.usage_vcpu), memoryMb: Number(r.usage_memory_mb), diskGb: Number(r.usage_disk_gb) },
    warm: json<Record<string, number>>(r.warm),
    layersDigest: str(r.layers_digest),
    ...(r.orphans === null || r.orphans === undefined ? {} : { orphans: Number(r.orphans) }),
    version: Number(r.version),
    heartbeatAt: String(r.heartbeat_at),
    leaseExpiresAt: String(r.lease_expires_at),
    registeredAt: String(r.registered_at),
    updatedAt: String(r.updated_at),
  };
}

export function replicaFrom(r: Raw): ReplicaRow {
  return {
    id: String(r.id),
    role: String(r.role) as ReplicaRole,
    hostname: String(r.hostname),
    pid: Number(r.pid),
    url: String(r.url),
    version: String(r.version),
    startedAt: String(r.started_at),
    seenAt: String(r.seen_at),
    stoppedAt: str(r.stopped_at),
  };
}
