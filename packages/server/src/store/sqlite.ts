import Database from 'better-sqlite3';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import { randomUUID } from 'node:crypto';
import { migrationsFor } from './migrations.js';
import { SqliteBlobRepo, SqliteBuildLogRepo } from './sqlite-files.js';
import { checkLeaseMs, checkNodeFilter, checkNodeId, checkNodeRegistration, checkNodeReport, checkNodeStatus, checkNow } from './types.js';
import type {
  BlobRepo,
  BuildLogRepo,
  BuildRepo,
  BuildRow,
  UploadRepo,
  UploadRow,
  ApiKeyRepo,
  ApiKeyRow,
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
} from './types.js';

type Db = Database.Database;
type Raw = Record<string, unknown>;

/**
 * The repositories' view of the database: prepare() compiles each SQL text once per connection and
 * reuses the statement (the queries a request makes run on every create, lookup and update). SQL
 * built from a request's fields comes from a fixed set of column names, so the cache stays small.
 */
export class Statements {
  private readonly cache = new Map<string, Database.Statement>();

  constructor(private readonly db: Db) {}

  prepare(sql: string): Database.Statement {
    let st = this.cache.get(sql);
    if (!st) {
      st = this.db.prepare(sql);
      this.cache.set(sql, st);
    }
    return st;
  }

}

/**
 * The database holds every organization's env_vars and key hashes: root's alone. SQLite creates
 * its WAL and SHM files with the database file's mode, so a database made 0600 keeps them 0600;
 * files of an older installation (0644) are fixed here too.
 */
function makePrivate(file: string): void {
  if (!existsSync(file)) closeSync(openSync(file, 'a', 0o600));
  for (const f of [file, `${file}-wal`, `${file}-shm`, `${file}-journal`]) {
    try {
      chmodSync(f, 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}

export function openDatabase(file: string): Db {
  if (file !== ':memory:') {
    mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
    makePrivate(file);
  }
  const db = new Database(file);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  migrate(db);
  return db;
}

export function migrate(db: Db): void {
  const steps = migrationsFor('sqlite');
  const current = db.pragma('user_version', { simple: true }) as number;
  for (let i = current; i < steps.length; i++) {
    db.transaction(() => {
      db.exec(steps[i]!);
      db.pragma(`user_version = ${i + 1}`);
    })();
  }
}

const json = <T>(v: unknown): T => JSON.parse(String(v)) as T;

function orgFrom(r: Raw): OrgRow {
  return { id: String(r.id), name: String(r.name), createdAt: String(r.created_at) };
}

function keyFrom(r: Raw): ApiKeyRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    name: String(r.name),
    hash: String(r.hash),
    scopes: json<string[]>(r.scopes),
    createdAt: String(r.created_at),
    revokedAt: (r.revoked_at as string | null) ?? null,
    lastUsedAt: (r.last_used_at as string | null) ?? null,
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
    isPublic: Number(r.is_public) === 1,
    buildId: (r.build_id as string | null) ?? null,
    features: json<string[]>(r.features),
    tags: json<string[]>(r.tags),
    layers: json<string[]>(r.layers),
    env: json<Record<string, string>>(r.env),
    workdir: (r.workdir as string | null) ?? null,
    errorMessage: (r.error_message as string | null) ?? null,
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
    internetAccess: Number(r.internet_access) === 1,
    egress: r.egress === null || r.egress === undefined ? null : json<SandboxRow['egress']>(r.egress),
    timeoutSeconds: r.timeout_seconds === null ? null : Number(r.timeout_seconds),
    expiresAt: (r.expires_at as string | null) ?? null,
    vcpu: Number(r.vcpu),
    memoryMb: Number(r.memory_mb),
    diskGb: Number(r.disk_gb),
    layers: json<string[]>(r.layers),
    templateEnv: json<Record<string, string>>(r.template_env),
    envVars: json<Record<string, string>>(r.env_vars),
    gatewayPort: r.gateway_port === null ? null : Number(r.gateway_port),
    nodeId: String(r.node_id),
    version: Number(r.version),
    deletedReason: (r.deleted_reason as string | null) ?? null,
    createdAt: String(r.created_at),
    updatedAt: String(r.updated_at),
    deletedAt: (r.deleted_at as string | null) ?? null,
    onTimeout: r.on_timeout === 'pause' ? 'pause' : 'delete',
    idleTimeoutSeconds: r.idle_timeout_seconds === null || r.idle_timeout_seconds === undefined ? null : Number(r.idle_timeout_seconds),
    autoResume: Number(r.auto_resume) === 1,
    idleCheckAt: (r.idle_check_at as string | null | undefined) ?? null,
    snapshotId: (r.snapshot_id as string | null | undefined) ?? null,
    lineage: r.lineage === null || r.lineage === undefined ? [] : json<string[]>(r.lineage),
  };
}

const SANDBOX_COLUMNS: Record<keyof SandboxRow, string> = {
  id: 'id',
  orgId: 'org_id',
  templateId: 'template_id',
  templateName: 'template_name',
  status: 'status',
  region: 'region',
  internetAccess: 'internet_access',
  egress: 'egress',
  timeoutSeconds: 'timeout_seconds',
  expiresAt: 'expires_at',
  vcpu: 'vcpu',
  memoryMb: 'memory_mb',
  diskGb: 'disk_gb',
  layers: 'layers',
  templateEnv: 'template_env',
  envVars: 'env_vars',
  gatewayPort: 'gateway_port',
  nodeId: 'node_id',
  version: 'version',
  deletedReason: 'deleted_reason',
  createdAt: 'created_at',
  updatedAt: 'updated_at',
  deletedAt: 'deleted_at',
  onTimeout: 'on_timeout',
  idleTimeoutSeconds: 'idle_timeout_seconds',
  autoResume: 'auto_resume',
  idleCheckAt: 'idle_check_at',
  snapshotId: 'snapshot_id',
  lineage: 'lineage',
};

function sqlValue(v: unknown): unknown {
  if (typeof v === 'boolean') return v ? 1 : 0;
  if (Array.isArray(v) || (v !== null && typeof v === 'object')) return JSON.stringify(v);
  return v;
}

class SqliteOrgRepo implements OrgRepo {
  constructor(private db: Statements) {}
  async create(name: string): Promise<OrgRow> {
    const row = { id: `org_${randomUUID().replace(/-/g, '').slice(0, 20)}`, name, createdAt: new Date().toISOString() };
    this.db.prepare('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?)').run(row.id, row.name, row.createdAt);
    return row;
  }
  async byId(id: string) {
    const r = this.db.prepare('SELECT * FROM organizations WHERE id = ?').get(id) as Raw | undefined;
    return r && orgFrom(r);
  }
  async byName(name: string) {
    const r = this.db.prepare('SELECT * FROM organizations WHERE name = ?').get(name) as Raw | undefined;
    return r && orgFrom(r);
  }
  async list() {
    return (this.db.prepare('SELECT * FROM organizations ORDER BY created_at').all() as Raw[]).map(orgFrom);
  }
  async remove(id: string) {
    this.db.prepare('DELETE FROM org_limits WHERE org_id = ?').run(id);
    this.db.prepare('DELETE FROM organizations WHERE id = ?').run(id);
  }
  async limits(id: string) {
    const r = this.db.prepare('SELECT limits FROM org_limits WHERE org_id = ?').get(id) as Raw | undefined;
    return r ? json<LimitOverrides>(r.limits) : {};
  }
  async setLimits(id: string, overrides: LimitOverrides) {
    if (Object.keys(overrides).length === 0) {
      this.db.prepare('DELETE FROM org_limits WHERE org_id = ?').run(id);
      return;
    }
    this.db
      .prepare(
        `INSERT INTO org_limits (org_id, limits, updated_at) VALUES (?, ?, ?)
         ON CONFLICT (org_id) DO UPDATE SET limits = excluded.limits, updated_at = excluded.updated_at`,
      )
      .run(id, JSON.stringify(overrides), new Date().toISOString());
  }
}

class SqliteApiKeyRepo implements ApiKeyRepo {
  constructor(private db: Statements) {}
  async insert(k: ApiKeyRow) {
    this.db
      .prepare('INSERT INTO api_keys (id, org_id, name, hash, scopes, created_at, revoked_at, last_used_at) VALUES (?,?,?,?,?,?,?,?)')
      .run(k.id, k.orgId, k.name, k.hash, JSON.stringify(k.scopes), k.createdAt, k.revokedAt, k.lastUsedAt);
  }
  async byHash(hash: string) {
    const r = this.db.prepare('SELECT * FROM api_keys WHERE hash = ?').get(hash) as Raw | undefined;
    return r && keyFrom(r);
  }
  async byId(id: string) {
    const r = this.db.prepare('SELECT * FROM api_keys WHERE id = ?').get(id) as Raw | undefined;
    return r && keyFrom(r);
  }
  async list(orgId?: string) {
    const rows = orgId
      ? this.db.prepare('SELECT * FROM api_keys WHERE org_id = ? ORDER BY created_at').all(orgId)
      : this.db.prepare('SELECT * FROM api_keys ORDER BY created_at').all();
    return (rows as Raw[]).map(keyFrom);
  }
  async revoke(id: string, at: string) {
    return this.db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL').run(at, id).changes > 0;
  }
  async touch(id: string, at: string) {
    this.db.prepare('UPDATE api_keys SET last_used_at = ? WHERE id = ?').run(at, id);
  }
}

class SqliteTemplateRepo implements TemplateRepo {
  constructor(private db: Statements) {}
  async upsert(t: TemplateRow) {
    this.db
      .prepare(
        `INSERT INTO templates (id, org_id, name, display_name, description, category, language, vcpu, memory_mb, disk_gb, status,
           is_public, build_id, features, tags, layers, env, workdir, error_message, created_at, updated_at)
         VALUES (@id, @org_id, @name, @display_name, @description, @category, @language, @vcpu, @memory_mb, @disk_gb, @status,
           @is_public, @build_id, @features, @tags, @layers, @env, @workdir, @error_message, @created_at, @updated_at)
         ON CONFLICT (id) DO UPDATE SET name=excluded.name, display_name=excluded.display_name, description=excluded.description,
           category=excluded.category, language=excluded.language, vcpu=excluded.vcpu, memory_mb=excluded.memory_mb,
           disk_gb=excluded.disk_gb, status=excluded.status, is_public=excluded.is_public, build_id=excluded.build_id,
           features=excluded.features, tags=excluded.tags, layers=excluded.layers, env=excluded.env, workdir=excluded.workdir,
           error_message=excluded.error_message, updated_at=excluded.updated_at`,
      )
      .run({
        id: t.id,
        org_id: t.orgId ?? '',
        name: t.name,
        display_name: t.displayName,
        description: t.description,
        category: t.category,
        language: t.language,
        vcpu: t.vcpu,
        memory_mb: t.memoryMb,
        disk_gb: t.diskGb,
        status: t.status,
        is_public: t.isPublic ? 1 : 0,
        build_id: t.buildId,
        features: JSON.stringify(t.features),
        tags: JSON.stringify(t.tags),
        layers: JSON.stringify(t.layers),
        env: JSON.stringify(t.env),
        workdir: t.workdir,
        error_message: t.errorMessage,
        created_at: t.createdAt,
        updated_at: t.updatedAt,
      });
  }
  async byId(id: string) {
    const r = this.db.prepare('SELECT * FROM templates WHERE id = ?').get(id) as Raw | undefined;
    return r && templateFrom(r);
  }
  async byName(name: string, orgId: string) {
    const r = this.db
      .prepare(`SELECT * FROM templates WHERE name = ? AND (org_id = ? OR org_id = '') ORDER BY org_id = '' LIMIT 1`)
      .get(name, orgId) as Raw | undefined;
    return r && templateFrom(r);
  }
  async list(orgId: string) {
    return (
      this.db.prepare(`SELECT * FROM templates WHERE org_id = ? OR org_id = '' ORDER BY org_id <> '', name`).all(orgId) as Raw[]
    ).map(templateFrom);
  }
  async remove(id: string) {
    this.db.prepare('DELETE FROM templates WHERE id = ?').run(id);
  }
}

class SqliteSandboxRepo implements SandboxRepo {
  constructor(private db: Statements) {}
  async insert(s: SandboxRow) {
    const cols = Object.keys(SANDBOX_COLUMNS) as (keyof SandboxRow)[];
    this.db
      .prepare(`INSERT INTO sandboxes (${cols.map((c) => SANDBOX_COLUMNS[c]).join(',')}) VALUES (${cols.map(() => '?').join(',')})`)
      .run(...cols.map((c) => sqlValue(s[c])));
  }
  async replace(oldId: string, s: SandboxRow) {
    const cols = Object.keys(SANDBOX_COLUMNS) as (keyof SandboxRow)[];
    const st = this.db.prepare(`UPDATE sandboxes SET ${cols.map((c) => `${SANDBOX_COLUMNS[c]} = ?`).join(', ')} WHERE id = ?`);
    return st.run(...cols.map((c) => sqlValue(s[c])), oldId).changes === 1;
  }
  async byId(id: string) {
    const r = this.db.prepare('SELECT * FROM sandboxes WHERE id = ?').get(id) as Raw | undefined;
    return r && sandboxFrom(r);
  }
  async list(f: SandboxListFilter) {
    const where = ['org_id = ?'];
    const args: unknown[] = [f.orgId];
    if (f.status) {
      where.push('status = ?');
      args.push(f.status);
    } else {
      where.push(`status NOT IN ('deleted', 'creating')`);
    }
    if (f.template) {
      where.push('(template_name = ? OR template_id = ?)');
      args.push(f.template, f.template);
    }
    if (f.region) {
      where.push('region = ?');
      args.push(f.region);
    }
    if (f.after) {
      where.push('(created_at < ? OR (created_at = ? AND id < ?))');
      args.push(f.after.createdAt, f.after.createdAt, f.after.id);
    }
    args.push(f.limit);
    const rows = this.db
      .prepare(`SELECT * FROM sandboxes WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ?`)
      .all(...args) as Raw[];
    return rows.map(sandboxFrom);
  }
  async live(nodeId?: string) {
    const on = onNode(nodeId);
    return (this.db.prepare(`SELECT * FROM sandboxes WHERE status <> 'deleted'${on.sql}`).all(...on.args) as Raw[]).map(sandboxFrom);
  }
  async update(id: string, version: number, patch: Partial<Omit<SandboxRow, 'id' | 'version'>>) {
    const keys = Object.keys(patch) as (keyof typeof patch)[];
    const sets = keys.map((k) => `${SANDBOX_COLUMNS[k]} = ?`);
    sets.push('version = version + 1');
    const res = this.db
      .prepare(`UPDATE sandboxes SET ${sets.join(', ')} WHERE id = ? AND version = ?`)
      .run(...keys.map((k) => sqlValue(patch[k])), id, version);
    if (res.changes === 0) return undefined;
    return this.byId(id);
  }
  async expired(now: string, nodeId?: string) {
    const on = onNode(nodeId);
    return (
      this.db
        .prepare(`SELECT * FROM sandboxes WHERE status IN ('running','paused','stopped') AND expires_at IS NOT NULL AND expires_at <= ?${on.sql}`)
        .all(now, ...on.args) as Raw[]
    ).map(sandboxFrom);
  }
  async idleDue(now: string, nodeId?: string) {
    const on = onNode(nodeId);
    return (
      this.db.prepare(`SELECT * FROM sandboxes WHERE status = 'running' AND idle_check_at IS NOT NULL AND idle_check_at <= ?${on.sql}`).all(now, ...on.args) as Raw[]
    ).map(sandboxFrom);
  }
  async purgeDeleted(before: string) {
    return this.db.prepare(`DELETE FROM sandboxes WHERE status = 'deleted' AND deleted_at < ?`).run(before).changes;
  }
  async gatewayPortUsed(port: number) {
    return (
      this.db.prepare(`SELECT 1 FROM sandboxes WHERE gateway_port = ? AND status <> 'deleted' UNION ALL SELECT 1 FROM previews WHERE gateway_port = ? LIMIT 1`).get(port, port) !==
      undefined
    );
  }
  async usage(orgId: string): Promise<SandboxUsage> {
    // org_usage is kept by triggers (see migrations.ts): one row, whatever the organization holds.
    return usageFrom(this.db.prepare(`SELECT active, active_vcpu, active_memory_mb, stopped, disk_gb FROM org_usage WHERE org_id = ?`).get(orgId) as Raw | undefined);
  }
  async usageAll(): Promise<SandboxUsage> {
    return usageFrom(
      this.db
        .prepare(`SELECT sum(active) AS active, sum(active_vcpu) AS active_vcpu, sum(active_memory_mb) AS active_memory_mb, sum(stopped) AS stopped, sum(disk_gb) AS disk_gb FROM org_usage`)
        .get() as Raw | undefined,
    );
  }
  async countByStatus(): Promise<Record<string, number>> {
    const rows = this.db.prepare(`SELECT status, count(*) AS n FROM sandboxes WHERE status <> 'deleted' GROUP BY status`).all() as Raw[];
    return Object.fromEntries(rows.map((r) => [String(r.status), Number(r.n)]));
  }
  async countByNode(): Promise<Record<string, number>> {
    const rows = this.db.prepare(`SELECT node_id, count(*) AS n FROM sandboxes WHERE status <> 'deleted' GROUP BY node_id`).all() as Raw[];
    return Object.fromEntries(rows.map((r) => [String(r.node_id), Number(r.n)]));
  }
  async usageByNode(): Promise<Record<string, SandboxUsage>> {
    const rows = this.db.prepare(`SELECT node_id,
      sum(CASE WHEN status IN ('creating','running','paused') THEN 1 ELSE 0 END) AS active,
      sum(CASE WHEN status IN ('creating','running','paused') THEN vcpu ELSE 0 END) AS active_vcpu,
      sum(CASE WHEN status IN ('creating','running','paused') THEN memory_mb ELSE 0 END) AS active_memory_mb,
      sum(CASE WHEN status = 'stopped' THEN 1 ELSE 0 END) AS stopped,
      sum(disk_gb) AS disk_gb
    FROM sandboxes WHERE status <> 'deleted' GROUP BY node_id`).all() as Raw[];
    return Object.fromEntries(rows.map((r) => [String(r.node_id), usageFrom(r)]));
  }
  async countByTemplate(templateId: string) {
    const r = this.db.prepare(`SELECT count(*) AS n FROM sandboxes WHERE template_id = ? AND status <> 'deleted'`).get(templateId) as Raw;
    return Number(r.n);
  }
  async remove(id: string) {
    this.db.prepare('DELETE FROM sandboxes WHERE id = ?').run(id);
  }
}

/** The condition that keeps a sandbox query to one node's rows (none: every node's). */
function onNode(nodeId: string | undefined): { sql: string; args: string[] } {
  const node = checkNodeFilter(nodeId);
  return node === undefined ? { sql: '', args: [] } : { sql: ' AND node_id = ?', args: [node] };
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
    currentStep: (r.current_step as string | null) ?? null,
    request: json<unknown>(r.request),
    errorMessage: (r.error_message as string | null) ?? null,
    createdAt: String(r.created_at),
    startedAt: (r.started_at as string | null) ?? null,
    completedAt: (r.completed_at as string | null) ?? null,
    heartbeatAt: (r.heartbeat_at as string | null) ?? null,
  };
}

const BUILD_COLUMNS: Record<keyof BuildRow, string> = {
  id: 'id',
  orgId: 'org_id',
  templateId: 'template_id',
  alias: 'alias',
  status: 'status',
  progress: 'progress',
  currentStep: 'current_step',
  request: 'request',
  errorMessage: 'error_message',
  createdAt: 'created_at',
  startedAt: 'started_at',
  completedAt: 'completed_at',
  heartbeatAt: 'heartbeat_at',
};

class SqliteBuildRepo implements BuildRepo {
  constructor(private db: Statements) {}
  async insert(b: BuildRow) {
    const cols = Object.keys(BUILD_COLUMNS) as (keyof BuildRow)[];
    this.db
      .prepare(`INSERT INTO builds (${cols.map((c) => BUILD_COLUMNS[c]).join(',')}) VALUES (${cols.map(() => '?').join(',')})`)
      .run(...cols.map((c) => sqlValue(b[c] ?? null)));
  }
  async byId(id: string) {
    const r = this.db.prepare('SELECT * FROM builds WHERE id = ?').get(id) as Raw | undefined;
    return r && buildFrom(r);
  }
  async latestForTemplate(templateId: string) {
    const r = this.db.prepare('SELECT * FROM builds WHERE template_id = ? ORDER BY created_at DESC LIMIT 1').get(templateId) as Raw | undefined;
    return r && buildFrom(r);
  }
  async update(id: string, patch: Partial<Omit<BuildRow, 'id'>>) {
    const keys = Object.keys(patch) as (keyof typeof patch)[];
    if (keys.length === 0) return;
    this.db
      .prepare(`UPDATE builds SET ${keys.map((k) => `${BUILD_COLUMNS[k]} = ?`).join(', ')} WHERE id = ?`)
      .run(...keys.map((k) => sqlValue(patch[k] ?? null)), id);
  }
  async countSince(orgId: string, since: string) {
    const r = this.db.prepare('SELECT count(*) AS n FROM builds WHERE org_id = ? AND created_at > ?').get(orgId, since) as Raw;
    return Number(r.n);
  }
  async unfinished() {
    return (this.db.prepare(`SELECT * FROM builds WHERE status = 'building'`).all() as Raw[]).map(buildFrom);
  }
  async running(orgId: string) {
    return (this.db.prepare(`SELECT * FROM builds WHERE org_id = ? AND status = 'building'`).all(orgId) as Raw[]).map(buildFrom);
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

class SqliteUploadRepo implements UploadRepo {
  constructor(private db: Statements) {}
  async upsert(u: UploadRow) {
    this.db
      .prepare(
        `INSERT INTO uploads (org_id, file_id, path, sha256, size, kind, created_at) VALUES (?,?,?,?,?,?,?)
         ON CONFLICT (org_id, file_id, path) DO UPDATE SET sha256 = excluded.sha256, size = excluded.size, created_at = excluded.created_at`,
      )
      .run(u.orgId, u.fileId, u.path, u.sha256, u.size, u.kind, u.createdAt);
  }
  async byFileId(orgId: string, fileId: string) {
    const r = this.db.prepare('SELECT * FROM uploads WHERE org_id = ? AND file_id = ? ORDER BY created_at DESC LIMIT 1').get(orgId, fileId) as Raw | undefined;
    return r && uploadFrom(r);
  }
  async byPath(orgId: string, path: string) {
    const r = this.db.prepare('SELECT * FROM uploads WHERE org_id = ? AND path = ? ORDER BY created_at DESC LIMIT 1').get(orgId, path) as Raw | undefined;
    return r && uploadFrom(r);
  }
}

function previewFrom(r: Raw): PreviewRow {
  return {
    sandboxId: String(r.sandbox_id),
    port: Number(r.port),
    public: Number(r.public) === 1,
    gatewayPort: r.gateway_port === null ? null : Number(r.gateway_port),
    createdAt: String(r.created_at),
  };
}

class SqlitePreviewRepo implements PreviewRepo {
  constructor(private db: Statements) {}
  async get(sandboxId: string, port: number) {
    const r = this.db.prepare('SELECT * FROM previews WHERE sandbox_id = ? AND port = ?').get(sandboxId, port) as Raw | undefined;
    return r && previewFrom(r);
  }
  async upsert(p: PreviewRow) {
    this.db
      .prepare(
        `INSERT INTO previews (sandbox_id, port, public, gateway_port, created_at) VALUES (?,?,?,?,?)
         ON CONFLICT (sandbox_id, port) DO UPDATE SET public = excluded.public, gateway_port = excluded.gateway_port`,
      )
      .run(p.sandboxId, p.port, p.public ? 1 : 0, p.gatewayPort, p.createdAt);
  }
  async forSandbox(sandboxId: string) {
    return (this.db.prepare('SELECT * FROM previews WHERE sandbox_id = ? ORDER BY port').all(sandboxId) as Raw[]).map(previewFrom);
  }
  async all() {
    return (this.db.prepare('SELECT * FROM previews ORDER BY sandbox_id, port').all() as Raw[]).map(previewFrom);
  }
  async countForOrg(orgId: string) {
    const r = this.db.prepare('SELECT COUNT(*) AS n FROM previews p JOIN sandboxes s ON s.id = p.sandbox_id WHERE s.org_id = ?').get(orgId) as Raw;
    return Number(r.n);
  }
  async remove(sandboxId: string, port: number) {
    this.db.prepare('DELETE FROM previews WHERE sandbox_id = ? AND port = ?').run(sandboxId, port);
  }
}

function snapshotFrom(r: Raw): SnapshotRow {
  return {
    id: String(r.id),
    orgId: String(r.org_id),
    name: (r.name as string | null) ?? null,
    sandboxId: String(r.sandbox_id),
    parentId: (r.parent_id as string | null) ?? null,
    templateId: String(r.template_id),
    templateName: String(r.template_name),
    layers: json<string[]>(r.layers),
    vcpu: Number(r.vcpu),
    memoryMb: Number(r.memory_mb),
    diskGb: Number(r.disk_gb),
    templateEnv: json<Record<string, string>>(r.template_env),
    envVars: json<Record<string, string>>(r.env_vars),
    internetAccess: Number(r.internet_access) === 1,
    egress: r.egress === null || r.egress === undefined ? null : json<SnapshotRow['egress']>(r.egress),
    sizeBytes: Number(r.size_bytes),
    createdAt: String(r.created_at),
  };
}

class SqliteSnapshotRepo implements SnapshotRepo {
  constructor(private db: Statements) {}
  async insert(r: SnapshotRow) {
    this.db
      .prepare(
        `INSERT INTO snapshots (id, org_id, name, sandbox_id, parent_id, template_id, template_name, layers, vcpu, memory_mb, disk_gb, template_env, env_vars, internet_access, egress, size_bytes, created_at)
         VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
      )
      .run(
        r.id,
        r.orgId,
        r.name,
        r.sandboxId,
        r.parentId,
        r.templateId,
        r.templateName,
        JSON.stringify(r.layers),
        r.vcpu,
        r.memoryMb,
        r.diskGb,
        JSON.stringify(r.templateEnv),
        JSON.stringify(r.envVars),
        r.internetAccess ? 1 : 0,
        r.egress === null ? null : JSON.stringify(r.egress),
        r.sizeBytes,
        r.createdAt,
      );
  }
  async byId(id: string) {
    const r = this.db.prepare('SELECT * FROM snapshots WHERE id = ?').get(id) as Raw | undefined;
    return r && snapshotFrom(r);
  }
  async list(f: { orgId: string; sandboxId?: string; after?: { createdAt: string; id: string }; limit: number }) {
    const where = ['org_id = ?'];
    const args: unknown[] = [f.orgId];
    if (f.sandboxId) {
      where.push('sandbox_id = ?');
      args.push(f.sandboxId);
    }
    if (f.after) {
      where.push('(created_at < ? OR (created_at = ? AND id < ?))');
      args.push(f.after.createdAt, f.after.createdAt, f.after.id);
    }
    return (this.db.prepare(`SELECT * FROM snapshots WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ?`).all(...args, f.limit) as Raw[]).map(snapshotFrom);
  }
  async remove(id: string) {
    return this.db.prepare('DELETE FROM snapshots WHERE id = ?').run(id).changes > 0;
  }
  async storageUsed(orgId: string) {
    const r = this.db.prepare('SELECT COALESCE(SUM(size_bytes), 0) AS n FROM snapshots WHERE org_id = ?').get(orgId) as Raw;
    return Number(r.n);
  }
  async referencedLayers() {
    const out = new Set<string>();
    for (const r of this.db.prepare('SELECT layers FROM snapshots').all() as Raw[]) for (const l of json<string[]>(r.layers)) out.add(l);
    return out;
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
    warm: json<Record<string, number>>(r.warm),
    layersDigest: (r.layers_digest as string | null) ?? null,
    version: Number(r.version),
    heartbeatAt: String(r.heartbeat_at),
    leaseExpiresAt: String(r.lease_expires_at),
    registeredAt: String(r.registered_at),
    updatedAt: String(r.updated_at),
  };
}

/** `now` (checked) or this process's clock, which is the database's; and when a lease from it ends. */
function leaseFrom(now: string | undefined, leaseMs: number): { at: string; expires: string } {
  const at = checkNow(now) ?? new Date().toISOString();
  return { at, expires: new Date(Date.parse(at) + checkLeaseMs(leaseMs)).toISOString() };
}

class SqliteNodeRepo implements NodeRepo {
  constructor(private db: Statements) {}
  async register(node: NodeRegistration, leaseMs: number, now?: string) {
    const n = checkNodeRegistration(node);
    const { at, expires } = leaseFrom(now, leaseMs);
    const r = this.db
      .prepare(
        `INSERT INTO nodes (id, url, status, capacity_vcpu, capacity_memory_mb, capacity_disk_gb, capacity_max_sandboxes, version,
           heartbeat_at, lease_expires_at, registered_at, updated_at)
         VALUES (?, ?, 'active', ?, ?, ?, ?, 0, ?, ?, ?, ?)
         ON CONFLICT (id) DO UPDATE SET url = excluded.url, capacity_vcpu = excluded.capacity_vcpu,
           capacity_memory_mb = excluded.capacity_memory_mb, capacity_disk_gb = excluded.capacity_disk_gb,
           capacity_max_sandboxes = excluded.capacity_max_sandboxes, version = nodes.version + 1,
           heartbeat_at = excluded.heartbeat_at, lease_expires_at = excluded.lease_expires_at, updated_at = excluded.updated_at
         RETURNING *`,
      )
      .get(n.id, n.url, n.capacity.vcpu, n.capacity.memoryMb, n.capacity.diskGb, n.capacity.maxSandboxes, at, expires, at, at) as Raw;
    return nodeFrom(r);
  }
  async heartbeat(id: string, report: NodeReport, leaseMs: number, now?: string) {
    const node = checkNodeId(id);
    const rep = checkNodeReport(report);
    const { at, expires } = leaseFrom(now, leaseMs);
    const c = rep.capacity;
    // Only a row that exists is changed: a node the operator removed does not come back this way.
    const r = this.db
      .prepare(
        `UPDATE nodes SET usage_sandboxes = ?, usage_vcpu = ?, usage_memory_mb = ?, usage_disk_gb = ?, warm = ?, layers_digest = ?,
           capacity_vcpu = coalesce(?, capacity_vcpu), capacity_memory_mb = coalesce(?, capacity_memory_mb),
           capacity_disk_gb = coalesce(?, capacity_disk_gb), capacity_max_sandboxes = coalesce(?, capacity_max_sandboxes),
           version = version + 1, heartbeat_at = ?, lease_expires_at = ?, updated_at = ?
         WHERE id = ? RETURNING *`,
      )
      .get(
        rep.usage.sandboxes,
        rep.usage.vcpu,
        rep.usage.memoryMb,
        rep.usage.diskGb,
        JSON.stringify(rep.warm),
        rep.layersDigest,
        c?.vcpu ?? null,
        c?.memoryMb ?? null,
        c?.diskGb ?? null,
        c?.maxSandboxes ?? null,
        at,
        expires,
        at,
        node,
      ) as Raw | undefined;
    return r && nodeFrom(r);
  }
  async byId(id: string) {
    const r = this.db.prepare('SELECT * FROM nodes WHERE id = ?').get(checkNodeId(id)) as Raw | undefined;
    return r && nodeFrom(r);
  }
  async list() {
    return (this.db.prepare('SELECT * FROM nodes ORDER BY id').all() as Raw[]).map(nodeFrom);
  }
  async live(now?: string) {
    const at = checkNow(now) ?? new Date().toISOString();
    return (this.db.prepare('SELECT * FROM nodes WHERE lease_expires_at > ? ORDER BY id').all(at) as Raw[]).map(nodeFrom);
  }
  async setStatus(id: string, status: NodeStatus) {
    const node = checkNodeId(id);
    const to = checkNodeStatus(status);
    return this.db.prepare('UPDATE nodes SET status = ?, version = version + 1, updated_at = ? WHERE id = ?').run(to, new Date().toISOString(), node).changes > 0;
  }
  async remove(id: string) {
    return this.db.prepare('DELETE FROM nodes WHERE id = ?').run(checkNodeId(id)).changes > 0;
  }
}

export class SqliteStore implements Store {
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
  constructor(readonly db: Db) {
    const st = new Statements(db);
    this.orgs = new SqliteOrgRepo(st);
    this.keys = new SqliteApiKeyRepo(st);
    this.templates = new SqliteTemplateRepo(st);
    this.sandboxes = new SqliteSandboxRepo(st);
    this.builds = new SqliteBuildRepo(st);
    this.uploads = new SqliteUploadRepo(st);
    this.blobs = new SqliteBlobRepo(st);
    this.buildLogs = new SqliteBuildLogRepo(st);
    this.previews = new SqlitePreviewRepo(st);
    this.snapshots = new SqliteSnapshotRepo(st);
    this.nodes = new SqliteNodeRepo(st);
    this.kv = {
      get: async (key) => (st.prepare('SELECT value FROM kv WHERE key = ?').get(key) as Raw | undefined)?.value as string | undefined,
      set: async (key, value) => {
        st.prepare('INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value').run(key, value);
      },
      setIfAbsent: async (key, value) => {
        st.prepare('INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING').run(key, value);
        return String((st.prepare('SELECT value FROM kv WHERE key = ?').get(key) as Raw).value);
      },
    };
    this.rates = {
      record: async (key, at, id) => {
        st.prepare('INSERT INTO rate_events (id, key, at) VALUES (?, ?, ?)').run(id, key, at);
      },
      count: async (key, since) => {
        const r = st.prepare('SELECT count(*) AS n, min(at) AS oldest FROM rate_events WHERE key = ? AND at > ?').get(key, since) as Raw;
        return { n: Number(r.n), oldest: r.oldest === null || r.oldest === undefined ? null : Number(r.oldest) };
      },
      remove: async (id) => {
        st.prepare('DELETE FROM rate_events WHERE id = ?').run(id);
      },
      purge: async (before) => Number(st.prepare('DELETE FROM rate_events WHERE at < ?').run(before).changes),
    };
  }
  static open(file: string): SqliteStore {
    return new SqliteStore(openDatabase(file));
  }
  close() {
    this.db.close();
  }
}
