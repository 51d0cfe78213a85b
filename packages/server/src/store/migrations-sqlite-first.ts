/**
 * SQLite's first twelve steps, from before the PostgreSQL store: PostgreSQL's first step
 * (migrations-postgres-first.ts) made that store with the schema they had come to. Each is a step of
 * the one list (migrations.ts) in SQLite only. Never edit a shipped one.
 */
export const SQLITE_FIRST: { name: string; sql: string }[] = [
  {
    name: 'organizations, keys, templates, sandboxes and kv',
    sql: `
  CREATE TABLE organizations (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL
  );
  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES organizations(id),
    name TEXT NOT NULL,
    hash TEXT NOT NULL UNIQUE,
    scopes TEXT NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT,
    last_used_at TEXT
  );
  CREATE TABLE templates (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL,
    display_name TEXT NOT NULL,
    description TEXT NOT NULL,
    category TEXT NOT NULL,
    language TEXT NOT NULL,
    vcpu INTEGER NOT NULL,
    memory_mb INTEGER NOT NULL,
    disk_gb INTEGER NOT NULL,
    status TEXT NOT NULL,
    is_public INTEGER NOT NULL,
    build_id TEXT,
    features TEXT NOT NULL,
    tags TEXT NOT NULL,
    layers TEXT NOT NULL,
    env TEXT NOT NULL,
    workdir TEXT,
    error_message TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (org_id, name)
  );
  CREATE TABLE sandboxes (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    template_id TEXT NOT NULL,
    template_name TEXT NOT NULL,
    status TEXT NOT NULL,
    region TEXT NOT NULL,
    internet_access INTEGER NOT NULL,
    timeout_seconds INTEGER,
    expires_at TEXT,
    vcpu INTEGER NOT NULL,
    memory_mb INTEGER NOT NULL,
    disk_gb INTEGER NOT NULL,
    layers TEXT NOT NULL,
    template_env TEXT NOT NULL,
    env_vars TEXT NOT NULL,
    gateway_port INTEGER,
    node_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    deleted_reason TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    deleted_at TEXT
  );
  CREATE INDEX sandboxes_org_created ON sandboxes (org_id, created_at DESC, id DESC);
  CREATE INDEX sandboxes_status_expires ON sandboxes (status, expires_at);
  CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
  `,
  },
  /** Template builds and uploaded files (custom templates). */
  {
    name: 'builds and uploads',
    sql: `
  CREATE TABLE builds (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    template_id TEXT NOT NULL,
    alias TEXT NOT NULL,
    status TEXT NOT NULL,
    progress INTEGER NOT NULL DEFAULT 0,
    current_step TEXT,
    request TEXT NOT NULL,
    error_message TEXT,
    created_at TEXT NOT NULL,
    started_at TEXT,
    completed_at TEXT
  );
  CREATE INDEX builds_org_created ON builds (org_id, created_at);
  CREATE INDEX builds_template ON builds (template_id, created_at);
  CREATE TABLE uploads (
    org_id TEXT NOT NULL,
    file_id TEXT NOT NULL,
    path TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    size INTEGER NOT NULL,
    kind TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (org_id, file_id, path)
  );
  CREATE INDEX uploads_org_path ON uploads (org_id, path, created_at);
`,
  },
  /**
   * Per-organization overrides of the configured limits (JSON: limit name → number, or null for no
   * limit). A table of its own, so an organization without overrides has no row.
   */
  {
    name: 'organization limits',
    sql: `
  CREATE TABLE IF NOT EXISTS org_limits (
    org_id TEXT PRIMARY KEY REFERENCES organizations(id) ON DELETE CASCADE,
    limits TEXT NOT NULL,
    updated_at TEXT NOT NULL
  );
`,
  },
  /**
   * Until now upload-link recorded a file for the asking organization before any upload, so a row
   * does not prove that its organization ever had the bytes (issue 8, item 6). Rows are now written
   * only by a verified PUT; the old ones cannot be told apart, so they go: a client asks for an
   * upload link before each build anyway and uploads what is not present.
   */
  {
    name: 'drop unverified uploads',
    sql: `
  DELETE FROM uploads;
`,
  },
  /** A create asks whether one gateway port is taken: an index, not a scan of every sandbox. */
  {
    name: 'sandboxes by gateway port',
    sql: `
  CREATE INDEX IF NOT EXISTS sandboxes_gateway_port ON sandboxes (gateway_port) WHERE status <> 'deleted';
`,
  },
  /**
   * What each organization holds, kept by triggers as its sandbox rows change: admission reads one row
   * instead of summing every row of the organization (tombstones included) on each create.
   */
  {
    name: 'organization usage',
    sql: `
  CREATE TABLE org_usage (
    org_id TEXT PRIMARY KEY,
    active INTEGER NOT NULL DEFAULT 0,
    active_vcpu INTEGER NOT NULL DEFAULT 0,
    active_memory_mb INTEGER NOT NULL DEFAULT 0,
    stopped INTEGER NOT NULL DEFAULT 0,
    disk_gb INTEGER NOT NULL DEFAULT 0
  );
  INSERT INTO org_usage (org_id, active, active_vcpu, active_memory_mb, stopped, disk_gb)
    SELECT org_id,
      sum(status IN ('creating','running','paused')),
      sum((status IN ('creating','running','paused')) * vcpu),
      sum((status IN ('creating','running','paused')) * memory_mb),
      sum(status = 'stopped'),
      sum(disk_gb)
    FROM sandboxes WHERE status <> 'deleted' GROUP BY org_id;
  CREATE TRIGGER sandboxes_usage_insert AFTER INSERT ON sandboxes BEGIN
    INSERT OR IGNORE INTO org_usage (org_id) VALUES (NEW.org_id);
    UPDATE org_usage SET active = active + (NEW.status IN ('creating','running','paused')),
      active_vcpu = active_vcpu + (NEW.status IN ('creating','running','paused')) * NEW.vcpu,
      active_memory_mb = active_memory_mb + (NEW.status IN ('creating','running','paused')) * NEW.memory_mb,
      stopped = stopped + (NEW.status = 'stopped'),
      disk_gb = disk_gb + (NEW.status <> 'deleted') * NEW.disk_gb
    WHERE org_id = NEW.org_id;
  END;
  CREATE TRIGGER sandboxes_usage_delete AFTER DELETE ON sandboxes BEGIN
    UPDATE org_usage SET active = active - (OLD.status IN ('creating','running','paused')),
      active_vcpu = active_vcpu - (OLD.status IN ('creating','running','paused')) * OLD.vcpu,
      active_memory_mb = active_memory_mb - (OLD.status IN ('creating','running','paused')) * OLD.memory_mb,
      stopped = stopped - (OLD.status = 'stopped'),
      disk_gb = disk_gb - (OLD.status <> 'deleted') * OLD.disk_gb
    WHERE org_id = OLD.org_id;
  END;
  CREATE TRIGGER sandboxes_usage_update AFTER UPDATE OF org_id, status, vcpu, memory_mb, disk_gb ON sandboxes BEGIN
    UPDATE org_usage SET active = active - (OLD.status IN ('creating','running','paused')),
      active_vcpu = active_vcpu - (OLD.status IN ('creating','running','paused')) * OLD.vcpu,
      active_memory_mb = active_memory_mb - (OLD.status IN ('creating','running','paused')) * OLD.memory_mb,
      stopped = stopped - (OLD.status = 'stopped'),
      disk_gb = disk_gb - (OLD.status <> 'deleted') * OLD.disk_gb
    WHERE org_id = OLD.org_id;
    INSERT OR IGNORE INTO org_usage (org_id) VALUES (NEW.org_id);
    UPDATE org_usage SET active = active + (NEW.status IN ('creating','running','paused')),
      active_vcpu = active_vcpu + (NEW.status IN ('creating','running','paused')) * NEW.vcpu,
      active_memory_mb = active_memory_mb + (NEW.status IN ('creating','running','paused')) * NEW.memory_mb,
      stopped = stopped + (NEW.status = 'stopped'),
      disk_gb = disk_gb + (NEW.status <> 'deleted') * NEW.disk_gb
    WHERE org_id = NEW.org_id;
  END;
`,
  },
  /** The sweep's purge of old tombstones finds them by an index, not by reading every row. */
  {
    name: 'deleted sandboxes by time',
    sql: `
  CREATE INDEX IF NOT EXISTS sandboxes_deleted_at ON sandboxes (deleted_at) WHERE status = 'deleted';
`,
  },
  /**
   * The admin API opens to keys of the operator's organization (`default`) with `admin`. Until it
   * existed, every key made without naming scopes got `admin`, which reached no further than its own
   * organization; kept, every such key of `default` (a CI key, say) would now manage every tenant's
   * keys. So `admin` leaves them all but the bootstrap key's; an operator grants it again with a new
   * key (`sandboxd keys create --org default --scopes ...,admin`). Their other scopes stay.
   */
  {
    name: 'admin only for the bootstrap key',
    sql: `
  UPDATE api_keys
    SET scopes = (SELECT json_group_array(value) FROM json_each(api_keys.scopes) WHERE value <> 'admin')
    WHERE name <> 'bootstrap'
      AND org_id IN (SELECT id FROM organizations WHERE name = 'default')
      AND EXISTS (SELECT 1 FROM json_each(api_keys.scopes) WHERE value = 'admin');
`,
  },
  /**
   * Sandboxes that sleep (issue 12): what a deadline does (delete or pause), pause after a time with
   * no use, wake on traffic; and the index the sweep finds idle ones by.
   */
  {
    name: 'sleeping sandboxes',
    sql: `
  ALTER TABLE sandboxes ADD COLUMN on_timeout TEXT NOT NULL DEFAULT 'delete';
  ALTER TABLE sandboxes ADD COLUMN idle_timeout_seconds INTEGER;
  ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;
  ALTER TABLE sandboxes ADD COLUMN idle_check_at TEXT;
  CREATE INDEX IF NOT EXISTS sandboxes_idle_check ON sandboxes (idle_check_at) WHERE status = 'running' AND idle_check_at IS NOT NULL;
`,
  },
  /**
   * Preview URLs (issue 12): the ports of a sandbox someone asked a URL for, whether each is open to
   * anyone, and (port mode) the gateway port that serves it, kept so a URL outlives a restart. They
   * go with their sandbox, whichever way it is deleted.
   */
  {
    name: 'previews',
    sql: `
  CREATE TABLE previews (
    sandbox_id TEXT NOT NULL,
    port INTEGER NOT NULL,
    public INTEGER NOT NULL DEFAULT 0,
    gateway_port INTEGER,
    created_at TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, port)
  );
  CREATE INDEX previews_gateway_port ON previews (gateway_port) WHERE gateway_port IS NOT NULL;
  CREATE TRIGGER previews_go_with_deleted_sandbox AFTER UPDATE OF status ON sandboxes WHEN NEW.status = 'deleted'
  BEGIN DELETE FROM previews WHERE sandbox_id = NEW.id; END;
  CREATE TRIGGER previews_go_with_removed_sandbox AFTER DELETE ON sandboxes
  BEGIN DELETE FROM previews WHERE sandbox_id = OLD.id; END;
`,
  },
  /** Egress policies (issue 12): a sandbox's allow and deny lists, JSON; NULL is the default (no rules). */
  {
    name: 'egress policies',
    sql: `
  ALTER TABLE sandboxes ADD COLUMN egress TEXT;
`,
  },
  /**
   * Snapshots (issue 13): a sandbox's saved filesystem, its own layer on the layers it was taken on,
   * and the settings sandboxes made from it get; and on each sandbox, the snapshot it came from.
   */
  {
    name: 'snapshots',
    sql: `
  CREATE TABLE snapshots (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL,
    name TEXT,
    sandbox_id TEXT NOT NULL,
    parent_id TEXT,
    template_id TEXT NOT NULL,
    template_name TEXT NOT NULL,
    layers TEXT NOT NULL,
    vcpu INTEGER NOT NULL,
    memory_mb INTEGER NOT NULL,
    disk_gb INTEGER NOT NULL,
    template_env TEXT NOT NULL,
    env_vars TEXT NOT NULL,
    internet_access INTEGER NOT NULL,
    egress TEXT,
    size_bytes INTEGER NOT NULL,
    created_at TEXT NOT NULL
  );
  CREATE INDEX snapshots_org ON snapshots (org_id, created_at DESC, id DESC);
  ALTER TABLE sandboxes ADD COLUMN snapshot_id TEXT;
  ALTER TABLE sandboxes ADD COLUMN lineage TEXT NOT NULL DEFAULT '[]';
`,
  },
];
