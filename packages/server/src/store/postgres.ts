import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { StoreUnavailableError } from './errors.js';
import { isUnavailable, migrate, Params, PgDb, type Raw } from './postgres-db.js';
import { describeUrl, isPostgresUrl } from './postgres-url.js';
import { PgCoordination } from './pg-coordination.js';
import { PgBlobRepo, PgBuildLogRepo } from './pg-files.js';
import { checkLeaseMs, checkNodeFilter, checkNodeId, checkNodeRegistration, checkNodeReport, checkNodeStatus, checkNow } from './types.js';
import type {
  BlobRepo,
  BuildLogRepo,
  ApiKeyRepo,
  ApiKeyRow,
  BuildRepo,
  BuildRow,
  LimitOverrides,
  NodeRegistration,
  NodeReport,
  NodeRepo,
  NodeRow,
  NodeStatus,
  OrgRepo,
  OrgRow,
  PreviewRepo,
  PreviewRow,
  SandboxListFilter,
  SandboxRepo,
  SandboxRow,
  SandboxUsage,
  SnapshotRepo,
  SnapshotRow,
  Store,
  TemplateRepo,
  TemplateRow,
  UploadRepo,
  UploadRow,
} from './types.js';

/*
 * The same repositories as sqlite.ts, with the same semantics (its conformance suite is theirs):
 * JSON columns are jsonb (pg hands them back parsed), flags are booleans, bigint counts and sums
 * come back as strings and are read with Number().
 */

const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));
const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
/** A jsonb parameter: pg would send a JS array as a PostgreSQL array, so JSON goes as text. */
const jsonb = (v: unknown): string | null => (v === null || v === undefined ? null : JSON.stringify(v));

function orgFrom(r: Raw): OrgRow {
  return { id: String(r.id), name: String(r.name), createdAt: String(r.created_at) };
}

function keyFrom(r: Raw): ApiKeyRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    name: String(r.name),
    hash: String(r.hash),
    scopes: r.scopes as string[],
    createdAt: String(r.created_at),
    revokedAt: str(r.revoked_at),
    lastUsedAt: str(r.last_used_at),
  };
}

function templateFrom(r: Raw): TemplateRow {
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
    isPublic: r.is_public === true,
    buildId: str(r.build_id),
    features: r.features as string[],
    tags: r.tags as string[],
    layers: r.layers as string[],
    env: r.env as Record<string, string>,
    workdir: str(r.workdir),
    errorMessage: str(r.error_message),
    createdAt: String(r.created_at),
    updatedAt: String(r.updated_at),
  };
}

function sandboxFrom(r: Raw): SandboxRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    templateId: String(r.template_id),
    templateName: String(r.template_name),
    status: String(r.status) as SandboxRow['status'],
    region: String(r.region),
    internetAccess: r.internet_access === true,
    egress: (r.egress ?? null) as SandboxRow['egress'],
    timeoutSeconds: num(r.timeout_seconds),
    expiresAt: str(r.expires_at),
    vcpu: Number(r.vcpu),
    memoryMb: Number(r.memory_mb),
    diskGb: Number(r.disk_gb),
    layers: r.layers as string[],
    templateEnv: r.template_env as Record<string, string>,
    envVars: r.env_vars as Record<string, string>,
    gatewayPort: num(r.gateway_port),
    nodeId: String(r.node_id),
    version: Number(r.version),
    deletedReason: str(r.deleted_reason),
    createdAt: String(r.created_at),
    updatedAt: String(r.updated_at),
    deletedAt: str(r.deleted_at),
    onTimeout: r.on_timeout === 'pause' ? 'pause' : 'delete',
    idleTimeoutSeconds: num(r.idle_timeout_seconds),
    autoResume: r.auto_resume === true,
    idleCheckAt: str(r.idle_check_at),
    snapshotId: str(r.snapshot_id),
    lineage: (r.lineage ?? []) as string[],
  };
}

/** Each field's column; `json` ones are jsonb. */
const SANDBOX_COLUMNS: Record<keyof SandboxRow, { column: string; json?: true }> = {
  id: { column: 'id' },
  orgId: { column: 'org_id' },
  templateId: { column: 'template_id' },
  templateName: { column: 'template_name' },
  status: { column: 'status' },
  region: { column: 'region' },
  internetAccess: { column: 'internet_access' },
  egress: { column: 'egress', json: true },
  timeoutSeconds: { column: 'timeout_seconds' },
  expiresAt: { column: 'expires_at' },
  vcpu: { column: 'vcpu' },
  memoryMb: { column: 'memory_mb' },
  diskGb: { column: 'disk_gb' },
  layers: { column: 'layers', json: true },
  templateEnv: { column: 'template_env', json: true },
  envVars: { column: 'env_vars', json: true },
  gatewayPort: { column: 'gateway_port' },
  nodeId: { column: 'node_id' },
  version: { column: 'version' },
  deletedReason: { column: 'deleted_reason' },
  createdAt: { column: 'created_at' },
  updatedAt: { column: 'updated_at' },
  deletedAt: { column: 'deleted_at' },
  onTimeout: { column: 'on_timeout' },
  idleTimeoutSeconds: { column: 'idle_timeout_seconds' },
  autoResume: { column: 'auto_resume' },
  idleCheckAt: { column: 'idle_check_at' },
  snapshotId: { column: 'snapshot_id' },
  lineage: { column: 'lineage', json: true },
};

/** The column of a field a caller asked to write: only fields of the row, so no SQL comes from a key. */
function columnOf<T extends string>(columns: Record<T, { column: string; json?: true }>, key: string, fixed: string[]): { column: string; json?: true } {
  const c = Object.hasOwn(columns, key) && !fixed.includes(key) ? columns[key as T] : undefined;
  if (!c) throw new Error(`not a field that can be changed: ${key}`);
  return c;
}

class PgOrgRepo implements OrgRepo {
  constructor(private db: PgDb) {}
  async create(name: string): Promise<OrgRow> {
    const row = { id: `org_${randomUUID().replace(/-/g, '').slice(0, 20)}`, name, createdAt: new Date().toISOString() };
    await this.db.run('INSERT INTO organizations (id, name, created_at) VALUES ($1, $2, $3)', [row.id, row.name, row.createdAt]);
    return row;
  }
  async byId(id: string) {
    const r = await this.db.row('SELECT * FROM organizations WHERE id = $1', [id]);
    return r && orgFrom(r);
  }
  async byName(name: string) {
    const r = await this.db.row('SELECT * FROM organizations WHERE name = $1', [name]);
    return r && orgFrom(r);
  }
  async list() {
    return (await this.db.rows('SELECT * FROM organizations ORDER BY created_at')).map(orgFrom);
  }
  async remove(id: string) {
    // Its org_limits row goes with it (ON DELETE CASCADE), in the same statement.
    await this.db.run('DELETE FROM organizations WHERE id = $1', [id]);
  }
  async limits(id: string) {
    const r = await this.db.row('SELECT limits FROM org_limits WHERE org_id = $1', [id]);
    return r ? (r.limits as LimitOverrides) : {};
  }
  async setLimits(id: string, overrides: LimitOverrides) {
    if (Object.keys(overrides).length === 0) {
      await this.db.run('DELETE FROM org_limits WHERE org_id = $1', [id]);
      return;
    }
    await this.db.run(
      `INSERT INTO org_limits (org_id, limits, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (org_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at`,
      [id, jsonb(overrides), new Date().toISOString()],
    );
  }
}

class PgApiKeyRepo implements ApiKeyRepo {
  constructor(private db: PgDb) {}
  async insert(k: ApiKeyRow) {
    await this.db.run('INSERT INTO api_keys (id, org_id, name, hash, scopes, created_at, revoked_at, last_used_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)', [
      k.id,
      k.orgId,
      k.name,
      k.hash,
      jsonb(k.scopes),
      k.createdAt,
      k.revokedAt,
      k.lastUsedAt,
    ]);
  }
  async byHash(hash: string) {
    const r = await this.db.row('SELECT * FROM api_keys WHERE hash = $1', [hash]);
    return r && keyFrom(r);
  }
  async byId(id: string) {
    const r = await this.db.row('SELECT * FROM api_keys WHERE id = $1', [id]);
    return r && keyFrom(r);
  }
  async list(orgId?: string) {
    const rows = orgId
      ? await this.db.rows('SELECT * FROM api_keys WHERE org_id = $1 ORDER BY created_at', [orgId])
      : await this.db.rows('SELECT * FROM api_keys ORDER BY created_at');
    return rows.map(keyFrom);
  }
  async revoke(id: string, at: string) {
    return (await this.db.run('UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL', [at, id])) > 0;
  }
  async touch(id: string, at: string) {
    await this.db.run('UPDATE api_keys SET last_used_at = $1 WHERE id = $2', [at, id]);
  }
}

class PgTemplateRepo implements TemplateRepo {
  constructor(private db: PgDb) {}
  async upsert(t: TemplateRow) {
    await this.db.run(
      `INSERT INTO templates (id, org_id, name, display_name, description, category, language, vcpu, memory_mb, disk_gb, status,
         is_public, build_id, features, tags, layers, env, workdir, error_message, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
       ON CONFLICT (id) DO UPDATE SET name = excluded.name, display_name = excluded.display_name, description = excluded.description,
         category = excluded.category, language = excluded.language, vcpu = excluded.vcpu, memory_mb = excluded.memory_mb,
         disk_gb = excluded.disk_gb, status = excluded.status, is_public = excluded.is_public, build_id = excluded.build_id,
         features = excluded.features, tags = excluded.tags, layers = excluded.layers, env = excluded.env, workdir = excluded.workdir,
         error_message = excluded.error_message, updated_at = excluded.updated_at`,
      [
        t.id,
        t.orgId ?? '',
        t.name,
        t.displayName,
        t.description,
        t.category,
        t.language,
        t.vcpu,
        t.memoryMb,
        t.diskGb,
        t.status,
        t.isPublic,
        t.buildId,
        jsonb(t.features),
        jsonb(t.tags),
        jsonb(t.layers),
        jsonb(t.env),
        t.workdir,
        t.errorMessage,
        t.createdAt,
        t.updatedAt,
      ],
    );
  }
  async byId(id: string) {
    const r = await this.db.row('SELECT * FROM templates WHERE id = $1', [id]);
    return r && templateFrom(r);
  }
  async byName(name: string, orgId: string) {
    const r = await this.db.row(`SELECT * FROM templates WHERE name = $1 AND (org_id = $2 OR org_id = '') ORDER BY org_id = '' LIMIT 1`, [name, orgId]);
    return r && templateFrom(r);
  }
  async list(orgId: string) {
    return (await this.db.rows(`SELECT * FROM templates WHERE org_id = $1 OR org_id = '' ORDER BY org_id <> '', name`, [orgId])).map(templateFrom);
  }
  async remove(id: string) {
    await this.db.run('DELETE FROM templates WHERE id = $1', [id]);
  }
}

class PgSandboxRepo implements SandboxRepo {
  constructor(private db: PgDb) {}
  async insert(s: SandboxRow) {
    const p = new Params();
    const fields = Object.keys(SANDBOX_COLUMNS) as (keyof SandboxRow)[];
    const values = fields.map((f) => p.add(SANDBOX_COLUMNS[f].json ? jsonb(s[f]) : s[f]));
    await this.db.run(`INSERT INTO sandboxes (${fields.map((f) => SANDBOX_COLUMNS[f].column).join(', ')}) VALUES (${values.join(', ')})`, p.values);
  }
  async replace(oldId: string, s: SandboxRow) {
    // One statement on the row itself: a reader's snapshot holds it before or after, never both
    // rows nor neither; none to update when a clean-up took the placeholder.
    const p = new Params();
    const fields = Object.keys(SANDBOX_COLUMNS) as (keyof SandboxRow)[];
    const sets = fields.map((f) => `${SANDBOX_COLUMNS[f].column} = ${p.add(SANDBOX_COLUMNS[f].json ? jsonb(s[f]) : s[f])}`);
    return (await this.db.run(`UPDATE sandboxes SET ${sets.join(', ')} WHERE id = ${p.add(oldId)}`, p.values)) === 1;
  }
  async byId(id: string) {
    const r = await this.db.row('SELECT * FROM sandboxes WHERE id = $1', [id]);
    return r && sandboxFrom(r);
  }
  async list(f: SandboxListFilter) {
    const p = new Params();
    const where = [`org_id = ${p.add(f.orgId)}`];
    if (f.status) where.push(`status = ${p.add(f.status)}`);
    else where.push(`status NOT IN ('deleted', 'creating')`);
    if (f.template) {
      const t = p.add(f.template);
      where.push(`(template_name = ${t} OR template_id = ${t})`);
    }
    if (f.region) where.push(`region = ${p.add(f.region)}`);
    if (f.after) {
      const at = p.add(f.after.createdAt);
      where.push(`(created_at < ${at} OR (created_at = ${at} AND id < ${p.add(f.after.id)}))`);
    }
    const rows = await this.db.rows(`SELECT * FROM sandboxes WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ${p.add(f.limit)}`, p.values);
    return rows.map(sandboxFrom);
  }
  async live(nodeId?: string) {
    const p = new Params();
    return (await this.db.rows(`SELECT * FROM sandboxes WHERE status <> 'deleted'${onNode(p, nodeId)}`, p.values)).map(sandboxFrom);
  }
  async update(id: string, version: number, patch: Partial<Omit<SandboxRow, 'id' | 'version'>>) {
    const p = new Params();
    const sets = Object.entries(patch).map(([k, v]) => {
      const c = columnOf(SANDBOX_COLUMNS, k, ['id', 'version']);
      return `${c.column} = ${p.add(c.json ? jsonb(v) : v)}`;
    });
    sets.push('version = version + 1');
    // The new row in the same statement: no second read that another writer could come before.
    const r = await this.db.row(`UPDATE sandboxes SET ${sets.join(', ')} WHERE id = ${p.add(id)} AND version = ${p.add(version)} RETURNING *`, p.values);
    return r && sandboxFrom(r);
  }
  async expired(now: string, nodeId?: string) {
    const p = new Params();
    const at = p.add(now);
    return (
      await this.db.rows(
        `SELECT * FROM sandboxes WHERE status IN ('running', 'paused', 'stopped') AND expires_at IS NOT NULL AND expires_at <= ${at}${onNode(p, nodeId)}`,
        p.values,
      )
    ).map(sandboxFrom);
  }
  async idleDue(now: string, nodeId?: string) {
    const p = new Params();
    const at = p.add(now);
    return (
      await this.db.rows(`SELECT * FROM sandboxes WHERE status = 'running' AND idle_check_at IS NOT NULL AND idle_check_at <= ${at}${onNode(p, nodeId)}`, p.values)
    ).map(sandboxFrom);
  }
  async purgeDeleted(before: string) {
    return this.db.run(`DELETE FROM sandboxes WHERE status = 'deleted' AND deleted_at < $1`, [before]);
  }
  async gatewayPortUsed(port: number) {
    const r = await this.db.row(
      `SELECT EXISTS (SELECT 1 FROM sandboxes WHERE gateway_port = $1 AND status <> 'deleted')
           OR EXISTS (SELECT 1 FROM previews WHERE gateway_port = $1) AS used`,
      [port],
    );
    return r?.used === true;
  }
  async usage(orgId: string): Promise<SandboxUsage> {
    // org_usage is kept by a trigger (see pg-migrations.ts): one row, whatever the organization holds.
    return usageFrom(await this.db.row('SELECT active, active_vcpu, active_memory_mb, stopped, disk_gb FROM org_usage WHERE org_id = $1', [orgId]));
  }
  async usageAll(): Promise<SandboxUsage> {
    return usageFrom(
      await this.db.row(
        'SELECT sum(active) AS active, sum(active_vcpu) AS active_vcpu, sum(active_memory_mb) AS active_memory_mb, sum(stopped) AS stopped, sum(disk_gb) AS disk_gb FROM org_usage',
      ),
    );
  }
  async countByStatus(): Promise<Record<string, number>> {
    const rows = await this.db.rows(`SELECT status, count(*) AS n FROM sandboxes WHERE status <> 'deleted' GROUP BY status`);
    return Object.fromEntries(rows.map((r) => [String(r.status), Number(r.n)]));
  }
  async countByNode(): Promise<Record<string, number>> {
    const rows = await this.db.rows(`SELECT node_id, count(*) AS n FROM sandboxes WHERE status <> 'deleted' GROUP BY node_id`);
    return Object.fromEntries(rows.map((r) => [String(r.node_id), Number(r.n)]));
  }
  async usageByNode(): Promise<Record<string, SandboxUsage>> {
    const rows = await this.db.rows(`SELECT node_id,
      sum(CASE WHEN status IN ('creating','running','paused') THEN 1 ELSE 0 END) AS active,
      sum(CASE WHEN status IN ('creating','running','paused') THEN vcpu ELSE 0 END) AS active_vcpu,
      sum(CASE WHEN status IN ('creating','running','paused') THEN memory_mb ELSE 0 END) AS active_memory_mb,
      sum(CASE WHEN status = 'stopped' THEN 1 ELSE 0 END) AS stopped,
      sum(disk_gb) AS disk_gb
    FROM sandboxes WHERE status <> 'deleted' GROUP BY node_id`);
    return Object.fromEntries(rows.map((r) => [String(r.node_id), usageFrom(r)]));
  }
  async countByTemplate(templateId: string) {
    const r = await this.db.row(`SELECT count(*) AS n FROM sandboxes WHERE template_id = $1 AND status <> 'deleted'`, [templateId]);
    return Number(r?.n ?? 0);
  }
  async remove(id: string) {
    await this.db.run('DELETE FROM sandboxes WHERE id = $1', [id]);
  }
}

/** The condition that keeps a sandbox query to one node's rows (none: every node's). */
function onNode(p: Params, nodeId: string | undefined): string {
  const node = checkNodeFilter(nodeId);
  return node === undefined ? '' : ` AND node_id = ${p.add(node)}`;
}

/** An org_usage row (or the sums of all of them); none: nothing held. */
function usageFrom(r: Raw | undefined): SandboxUsage {
  return {
    active: Number(r?.active ?? 0),
    activeVcpu: Number(r?.active_vcpu ?? 0),
    activeMemoryMb: Number(r?.active_memory_mb ?? 0),
    stopped: Number(r?.stopped ?? 0),
    diskGb: Number(r?.disk_gb ?? 0),
  };
}

function buildFrom(r: Raw): BuildRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    templateId: String(r.template_id),
    alias: String(r.alias),
    status: String(r.status) as BuildRow['status'],
    progress: Number(r.progress),
    currentStep: str(r.current_step),
    request: r.request,
    errorMessage: str(r.error_message),
    createdAt: String(r.created_at),
    startedAt: str(r.started_at),
    completedAt: str(r.completed_at),
    heartbeatAt: str(r.heartbeat_at),
  };
}

const BUILD_COLUMNS: Record<keyof BuildRow, { column: string; json?: true }> = {
  id: { column: 'id' },
  orgId: { column: 'org_id' },
  templateId: { column: 'template_id' },
  alias: { column: 'alias' },
  status: { column: 'status' },
  progress: { column: 'progress' },
  currentStep: { column: 'current_step' },
  request: { column: 'request', json: true },
  errorMessage: { column: 'error_message' },
  createdAt: { column: 'created_at' },
  startedAt: { column: 'started_at' },
  completedAt: { column: 'completed_at' },
  heartbeatAt: { column: 'heartbeat_at' },
};

class PgBuildRepo implements BuildRepo {
  constructor(private db: PgDb) {}
  async insert(b: BuildRow) {
    const p = new Params();
    const fields = Object.keys(BUILD_COLUMNS) as (keyof BuildRow)[];
    const values = fields.map((f) => p.add(BUILD_COLUMNS[f].json ? jsonb(b[f]) : (b[f] ?? null)));
    await this.db.run(`INSERT INTO builds (${fields.map((f) => BUILD_COLUMNS[f].column).join(', ')}) VALUES (${values.join(', ')})`, p.values);
  }
  async byId(id: string) {
    const r = await this.db.row('SELECT * FROM builds WHERE id = $1', [id]);
    return r && buildFrom(r);
  }
  async latestForTemplate(templateId: string) {
    const r = await this.db.row('SELECT * FROM builds WHERE template_id = $1 ORDER BY created_at DESC LIMIT 1', [templateId]);
    return r && buildFrom(r);
  }
  async update(id: string, patch: Partial<Omit<BuildRow, 'id'>>) {
    const p = new Params();
    const sets = Object.entries(patch).map(([k, v]) => {
      const c = columnOf(BUILD_COLUMNS, k, ['id']);
      return `${c.column} = ${p.add(c.json ? jsonb(v) : v)}`;
    });
    if (sets.length === 0) return;
    await this.db.run(`UPDATE builds SET ${sets.join(', ')} WHERE id = ${p.add(id)}`, p.values);
  }
  async countSince(orgId: string, since: string) {
    const r = await this.db.row('SELECT count(*) AS n FROM builds WHERE org_id = $1 AND created_at > $2', [orgId, since]);
    return Number(r?.n ?? 0);
  }
  async unfinished() {
    return (await this.db.rows(`SELECT * FROM builds WHERE status = 'building'`)).map(buildFrom);
  }
  async running(orgId: string) {
    return (await this.db.rows(`SELECT * FROM builds WHERE org_id = $1 AND status = 'building'`, [orgId])).map(buildFrom);
  }
}

function uploadFrom(r: Raw): UploadRow {
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

class PgUploadRepo implements UploadRepo {
  constructor(private db: PgDb) {}
  async upsert(u: UploadRow) {
    await this.db.run(
      `INSERT INTO uploads (org_id, file_id, path, sha256, size, kind, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (org_id, file_id, path) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size, created_at = excluded.created_at`,
      [u.orgId, u.fileId, u.path, u.sha256, u.size, u.kind, u.createdAt],
    );
  }
  async byFileId(orgId: string, fileId: string) {
    const r = await this.db.row('SELECT * FROM uploads WHERE org_id = $1 AND file_id = $2 ORDER BY created_at DESC LIMIT 1', [orgId, fileId]);
    return r && uploadFrom(r);
  }
  async byPath(orgId: string, path: string) {
    const r = await this.db.row('SELECT * FROM uploads WHERE org_id = $1 AND path = $2 ORDER BY created_at DESC LIMIT 1', [orgId, path]);
    return r && uploadFrom(r);
  }
}

function previewFrom(r: Raw): PreviewRow {
  return {
    sandboxId: String(r.sandbox_id),
    port: Number(r.port),
    public: r.public === true,
    gatewayPort: num(r.gateway_port),
    createdAt: String(r.created_at),
  };
}

class PgPreviewRepo implements PreviewRepo {
  constructor(private db: PgDb) {}
  async get(sandboxId: string, port: number) {
    const r = await this.db.row('SELECT * FROM previews WHERE sandbox_id = $1 AND port = $2', [sandboxId, port]);
    return r && previewFrom(r);
  }
  async upsert(p: PreviewRow) {
    await this.db.run(
      `INSERT INTO previews (sandbox_id, port, public, gateway_port, created_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (sandbox_id, port) DO UPDATE SET public = excluded.public, gateway_port = excluded.gateway_port`,
      [p.sandboxId, p.port, p.public, p.gatewayPort, p.createdAt],
    );
  }
  async forSandbox(sandboxId: string) {
    return (await this.db.rows('SELECT * FROM previews WHERE sandbox_id = $1 ORDER BY port', [sandboxId])).map(previewFrom);
  }
  async all() {
    return (await this.db.rows('SELECT * FROM previews ORDER BY sandbox_id, port')).map(previewFrom);
  }
  async countForOrg(orgId: string) {
    const r = await this.db.row('SELECT count(*) AS n FROM previews p JOIN sandboxes s ON s.id = p.sandbox_id WHERE s.org_id = $1', [orgId]);
    return Number(r?.n ?? 0);
  }
  async remove(sandboxId: string, port: number) {
    await this.db.run('DELETE FROM previews WHERE sandbox_id = $1 AND port = $2', [sandboxId, port]);
  }
}

function snapshotFrom(r: Raw): SnapshotRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    name: str(r.name),
    sandboxId: String(r.sandbox_id),
    parentId: str(r.parent_id),
    templateId: String(r.template_id),
    templateName: String(r.template_name),
    layers: r.layers as string[],
    vcpu: Number(r.vcpu),
    memoryMb: Number(r.memory_mb),
    diskGb: Number(r.disk_gb),
    templateEnv: r.template_env as Record<string, string>,
    envVars: r.env_vars as Record<string, string>,
    internetAccess: r.internet_access === true,
    egress: (r.egress ?? null) as SnapshotRow['egress'],
    sizeBytes: Number(r.size_bytes),
    createdAt: String(r.created_at),
  };
}

class PgSnapshotRepo implements SnapshotRepo {
  constructor(private db: PgDb) {}
  async insert(r: SnapshotRow) {
    await this.db.run(
      `INSERT INTO snapshots (id, org_id, name, sandbox_id, parent_id, template_id, template_name, layers, vcpu, memory_mb, disk_gb,
         template_env, env_vars, internet_access, egress, size_bytes, created_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)`,
      [
        r.id,
        r.orgId,
        r.name,
        r.sandboxId,
        r.parentId,
        r.templateId,
        r.templateName,
        jsonb(r.layers),
        r.vcpu,
        r.memoryMb,
        r.diskGb,
        jsonb(r.templateEnv),
        jsonb(r.envVars),
        r.internetAccess,
        jsonb(r.egress),
        r.sizeBytes,
        r.createdAt,
      ],
    );
  }
  async byId(id: string) {
    const r = await this.db.row('SELECT * FROM snapshots WHERE id = $1', [id]);
    return r && snapshotFrom(r);
  }
  async list(f: { orgId: string; sandboxId?: string; after?: { createdAt: string; id: string }; limit: number }) {
    const p = new Params();
    const where = [`org_id = ${p.add(f.orgId)}`];
    if (f.sandboxId) where.push(`sandbox_id = ${p.add(f.sandboxId)}`);
    if (f.after) {
      const at = p.add(f.after.createdAt);
      where.push(`(created_at < ${at} OR (created_at = ${at} AND id < ${p.add(f.after.id)}))`);
    }
    return (await this.db.rows(`SELECT * FROM snapshots WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ${p.add(f.limit)}`, p.values)).map(
      snapshotFrom,
    );
  }
  async remove(id: string) {
    return (await this.db.run('DELETE FROM snapshots WHERE id = $1', [id])) > 0;
  }
  async storageUsed(orgId: string) {
    const r = await this.db.row('SELECT coalesce(sum(size_bytes), 0) AS n FROM snapshots WHERE org_id = $1', [orgId]);
    return Number(r?.n ?? 0);
  }
  async referencedLayers() {
    const rows = await this.db.rows('SELECT DISTINCT jsonb_array_elements_text(layers) AS layer FROM snapshots');
    return new Set(rows.map((r) => String(r.layer)));
  }
}

function nodeFrom(r: Raw): NodeRow {
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
    warm: r.warm as Record<string, number>,
    layersDigest: str(r.layers_digest),
    version: Number(r.version),
    heartbeatAt: String(r.heartbeat_at),
    leaseExpiresAt: String(r.lease_expires_at),
    registeredAt: String(r.registered_at),
    updatedAt: String(r.updated_at),
  };
}

/** A timestamptz as the rows carry times: toISOString()'s text, in UTC to the millisecond. */
const iso = (t: string): string => `to_char((${t}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/**
 * The time a node statement runs at: the caller's `now` if it gave one, else the database server's
 * clock (the one every replica shares). Adds `now` to `p`; `at` and `lease` are SQL of the query.
 */
function clock(p: Params, now: string | undefined, leaseMs?: number): { at: string; lease: string } {
  const at = `coalesce(${p.add(checkNow(now) ?? null)}::timestamptz, now())`;
  const lease = leaseMs === undefined ? '' : iso(`${at} + ${p.add(checkLeaseMs(leaseMs))}::bigint * interval '1 millisecond'`);
  return { at: iso(at), lease };
}

class PgNodeRepo implements NodeRepo {
  constructor(private db: PgDb) {}
  async register(node: NodeRegistration, leaseMs: number, now?: string) {
    const n = checkNodeRegistration(node);
    const p = new Params();
    const { at, lease } = clock(p, now, leaseMs);
    const c = n.capacity;
    const r = await this.db.row(
      `INSERT INTO nodes (id, url, status, capacity_vcpu, capacity_memory_mb, capacity_disk_gb, capacity_max_sandboxes, version,
         heartbeat_at, lease_expires_at, registered_at, updated_at)
       VALUES (${p.add(n.id)}, ${p.add(n.url)}, 'active', ${p.add(c.vcpu)}, ${p.add(c.memoryMb)}, ${p.add(c.diskGb)}, ${p.add(c.maxSandboxes)}, 0,
         ${at}, ${lease}, ${at}, ${at})
       ON CONFLICT (id) DO UPDATE SET url = excluded.url, capacity_vcpu = excluded.capacity_vcpu,
         capacity_memory_mb = excluded.capacity_memory_mb, capacity_disk_gb = excluded.capacity_disk_gb,
         capacity_max_sandboxes = excluded.capacity_max_sandboxes, version = nodes.version + 1,
         heartbeat_at = excluded.heartbeat_at, lease_expires_at = excluded.lease_expires_at, updated_at = excluded.updated_at
       RETURNING *`,
      p.values,
    );
    return nodeFrom(r!);
  }
  async heartbeat(id: string, report: NodeReport, leaseMs: number, now?: string) {
    const node = checkNodeId(id);
    const rep = checkNodeReport(report);
    const p = new Params();
    const { at, lease } = clock(p, now, leaseMs);
    const u = rep.usage;
    const c = rep.capacity;
    // Only a row that exists is changed: a node the operator removed does not come back this way.
    const r = await this.db.row(
      `UPDATE nodes SET usage_sandboxes = ${p.add(u.sandboxes)}, usage_vcpu = ${p.add(u.vcpu)}, usage_memory_mb = ${p.add(u.memoryMb)},
         usage_disk_gb = ${p.add(u.diskGb)}, warm = ${p.add(jsonb(rep.warm))}, layers_digest = ${p.add(rep.layersDigest)},
         capacity_vcpu = coalesce(${p.add(c?.vcpu ?? null)}, capacity_vcpu), capacity_memory_mb = coalesce(${p.add(c?.memoryMb ?? null)}, capacity_memory_mb),
         capacity_disk_gb = coalesce(${p.add(c?.diskGb ?? null)}, capacity_disk_gb),
         capacity_max_sandboxes = coalesce(${p.add(c?.maxSandboxes ?? null)}, capacity_max_sandboxes),
         version = version + 1, heartbeat_at = ${at}, lease_expires_at = ${lease}, updated_at = ${at}
       WHERE id = ${p.add(node)} RETURNING *`,
      p.values,
    );
    return r && nodeFrom(r);
  }
  async byId(id: string) {
    const r = await this.db.row('SELECT * FROM nodes WHERE id = $1', [checkNodeId(id)]);
    return r && nodeFrom(r);
  }
  async list() {
    return (await this.db.rows('SELECT * FROM nodes ORDER BY id')).map(nodeFrom);
  }
  async live(now?: string) {
    const p = new Params();
    const { at } = clock(p, now);
    return (await this.db.rows(`SELECT * FROM nodes WHERE lease_expires_at > ${at} ORDER BY id`, p.values)).map(nodeFrom);
  }
  async setStatus(id: string, status: NodeStatus) {
    const node = checkNodeId(id);
    const to = checkNodeStatus(status);
    const p = new Params();
    const { at } = clock(p, undefined);
    return (await this.db.run(`UPDATE nodes SET status = ${p.add(to)}, version = version + 1, updated_at = ${at} WHERE id = ${p.add(node)}`, p.values)) > 0;
  }
  async remove(id: string) {
    return (await this.db.run('DELETE FROM nodes WHERE id = $1', [checkNodeId(id)])) > 0;
  }
}

export interface PostgresStoreOptions {
  /** Connections the pool opens at most (default 10). */
  maxConnections?: number;
  /** How long a query waits for a connection, connecting included, before it fails as unavailable (default 5000). */
  connectTimeoutMs?: number;
  /** A query with no answer for this long fails as unavailable (default 30000): a server that hangs does not hang requests. */
  queryTimeoutMs?: number;
}

export class PostgresStore implements Store {
  readonly orgs: OrgRepo;
  readonly keys: ApiKeyRepo;
  readonly templates: TemplateRepo;
  readonly sandboxes: SandboxRepo;
  readonly builds: BuildRepo;
  readonly uploads: UploadRepo;
  readonly blobs: BlobRepo;
  readonly buildLogs: BuildLogRepo;
  readonly previews: PreviewRepo;
  readonly snapshots: SnapshotRepo;
  readonly nodes: NodeRepo;
  readonly kv: Store['kv'];
  readonly rates: Store['rates'];
  readonly coordination: PgCoordination;
  private readonly db: PgDb;
  private ending: Promise<void> | undefined;

  private constructor(
    private readonly pool: pg.Pool,
    url: string,
    opts: PostgresStoreOptions,
  ) {
    const db = new PgDb(pool);
    this.db = db;
    this.orgs = new PgOrgRepo(db);
    this.keys = new PgApiKeyRepo(db);
    this.templates = new PgTemplateRepo(db);
    this.sandboxes = new PgSandboxRepo(db);
    this.builds = new PgBuildRepo(db);
    this.uploads = new PgUploadRepo(db);
    this.blobs = new PgBlobRepo(db);
    this.buildLogs = new PgBuildLogRepo(db);
    this.previews = new PgPreviewRepo(db);
    this.snapshots = new PgSnapshotRepo(db);
    this.nodes = new PgNodeRepo(db);
    this.kv = {
      get: async (key) => str((await db.row('SELECT value FROM kv WHERE key = $1', [key]))?.value) ?? undefined,
      set: async (key, value) => {
        await db.run('INSERT INTO kv (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = excluded.value', [key, value]);
      },
      setIfAbsent: async (key, value) => {
        await db.run('INSERT INTO kv (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING', [key, value]);
        return String((await db.row('SELECT value FROM kv WHERE key = $1', [key]))!.value);
      },
    };
    this.rates = {
      record: async (key, at, id) => {
        await db.run('INSERT INTO rate_events (id, key, at) VALUES ($1, $2, $3)', [id, key, at]);
      },
      count: async (key, since) => {
        const r = (await db.row('SELECT count(*) AS n, min(at) AS oldest FROM rate_events WHERE key = $1 AND at > $2', [key, since]))!;
        return { n: Number(r.n), oldest: r.oldest === null || r.oldest === undefined ? null : Number(r.oldest) };
      },
      remove: async (id) => {
        await db.run('DELETE FROM rate_events WHERE id = $1', [id]);
      },
      purge: async (before) => db.run('DELETE FROM rate_events WHERE at < $1', [before]),
    };
    // A lock's query is answered at once by a server that answers at all: one that does not, for
    // 10 s, fails the lock's wait as unavailable (503) even where other queries may take longer.
    this.coordination = new PgCoordination(pool, url, {
      connectTimeoutMs: opts.connectTimeoutMs ?? 5000,
      queryTimeoutMs: Math.min(opts.queryTimeoutMs ?? 30_000, 10_000),
    });
  }

  /** Answers when the server does (StoreUnavailableError when it does not): for readiness checks. */
  async ping(): Promise<void> {
    await this.db.run('SELECT 1');
  }

  /**
   * Connects to `url` (postgres:// or postgresql://) and brings the schema up to date. Fails with
   * StoreUnavailableError when the server cannot be reached, with an Error naming the database
   * (never its password) for anything else.
   */
  static async open(url: string, opts: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const where = describeUrl(url);
    if (!isPostgresUrl(url)) throw new Error(`a PostgreSQL store needs a postgres:// or postgresql:// URL (postgresql://user:password@host:5432/database), got ${where}`);
    const pool = new pg.Pool({
      connectionString: url,
      application_name: 'sandboxd',
      max: opts.maxConnections ?? 10,
      connectionTimeoutMillis: opts.connectTimeoutMs ?? 5000,
      query_timeout: opts.queryTimeoutMs ?? 30_000,
      keepAlive: true,
    });
    // An idle connection whose server went away: the pool drops it and opens a new one when asked.
    pool.on('error', () => undefined);
    try {
      await migrate(pool);
    } catch (err) {
      await pool.end().catch(() => undefined);
      const reason = err instanceof Error ? err.message : String(err);
      if (isUnavailable(err)) throw new StoreUnavailableError(`the PostgreSQL store at ${where} is unavailable: ${reason}`, { cause: err });
      throw new Error(`cannot open the PostgreSQL store at ${where}: ${reason}`, { cause: err });
    }
    return new PostgresStore(pool, url, opts);
  }

  /** Ends the pool once its queries are done. */
  end(): Promise<void> {
    this.ending ??= this.coordination
      .close()
      .then(() => this.pool.end())
      .catch(() => undefined);
    return this.ending;
  }

  /** The Store interface's close is synchronous: the pool ends in the background (end() to wait for it). */
  close(): void {
    void this.end();
  }
}
