/**
 * PostgreSQL's first step: the store made with the schema SQLite had come to in its first twelve
 * steps (migrations-sqlite-first.ts), in PostgreSQL's types. SQLite's data-only steps (dropping
 * unverified uploads, stripping admin from keys) fixed rows of installations older than this store,
 * so they have no counterpart. A step of the one list (migrations.ts) in PostgreSQL only; never edit it.
 *
 * Timestamps stay ISO-8601 text, as in SQLite: the rows carry them as strings, and callers compare
 * and page by them. Text that is compared or ordered is COLLATE "C" (byte order, SQLite's): ISO
 * text in byte order is time order, and ids page the same whatever the database's own collation.
 */
export const POSTGRES_FIRST = `
  CREATE TABLE organizations (
    id text COLLATE "C" PRIMARY KEY,
    name text COLLATE "C" NOT NULL UNIQUE,
    created_at text COLLATE "C" NOT NULL
  );
  CREATE TABLE org_limits (
    org_id text COLLATE "C" PRIMARY KEY REFERENCES organizations(id) ON DELETE CASCADE,
    limits jsonb NOT NULL,
    updated_at text COLLATE "C" NOT NULL
  );
  CREATE TABLE api_keys (
    id text COLLATE "C" PRIMARY KEY,
    org_id text COLLATE "C" NOT NULL REFERENCES organizations(id),
    name text NOT NULL,
    hash text COLLATE "C" NOT NULL UNIQUE,
    scopes jsonb NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    revoked_at text COLLATE "C",
    last_used_at text COLLATE "C"
  );
  CREATE INDEX api_keys_org ON api_keys (org_id, created_at);

  -- org_id '' is a built-in template (as in SQLite: NULL would not take part in UNIQUE).
  CREATE TABLE templates (
    id text COLLATE "C" PRIMARY KEY,
    org_id text COLLATE "C" NOT NULL DEFAULT '',
    name text COLLATE "C" NOT NULL,
    display_name text NOT NULL,
    description text NOT NULL,
    category text NOT NULL,
    language text NOT NULL,
    vcpu integer NOT NULL,
    memory_mb integer NOT NULL,
    disk_gb integer NOT NULL,
    status text NOT NULL,
    is_public boolean NOT NULL,
    build_id text,
    features jsonb NOT NULL,
    tags jsonb NOT NULL,
    layers jsonb NOT NULL,
    env jsonb NOT NULL,
    workdir text,
    error_message text,
    created_at text COLLATE "C" NOT NULL,
    updated_at text COLLATE "C" NOT NULL,
    UNIQUE (org_id, name)
  );

  CREATE TABLE sandboxes (
    id text COLLATE "C" PRIMARY KEY,
    org_id text COLLATE "C" NOT NULL,
    template_id text COLLATE "C" NOT NULL,
    template_name text COLLATE "C" NOT NULL,
    status text COLLATE "C" NOT NULL,
    region text COLLATE "C" NOT NULL,
    internet_access boolean NOT NULL,
    egress jsonb,
    timeout_seconds integer,
    expires_at text COLLATE "C",
    vcpu integer NOT NULL,
    memory_mb integer NOT NULL,
    disk_gb integer NOT NULL,
    layers jsonb NOT NULL,
    template_env jsonb NOT NULL,
    env_vars jsonb NOT NULL,
    gateway_port integer,
    node_id text NOT NULL,
    version integer NOT NULL,
    deleted_reason text,
    created_at text COLLATE "C" NOT NULL,
    updated_at text COLLATE "C" NOT NULL,
    deleted_at text COLLATE "C",
    on_timeout text NOT NULL DEFAULT 'delete',
    idle_timeout_seconds integer,
    auto_resume boolean NOT NULL DEFAULT false,
    idle_check_at text COLLATE "C",
    snapshot_id text,
    lineage jsonb NOT NULL DEFAULT '[]'
  );
  CREATE INDEX sandboxes_org_created ON sandboxes (org_id, created_at DESC, id DESC);
  CREATE INDEX sandboxes_status_expires ON sandboxes (status, expires_at);
  CREATE INDEX sandboxes_gateway_port ON sandboxes (gateway_port) WHERE status <> 'deleted';
  CREATE INDEX sandboxes_deleted_at ON sandboxes (deleted_at) WHERE status = 'deleted';
  CREATE INDEX sandboxes_idle_check ON sandboxes (idle_check_at) WHERE status = 'running' AND idle_check_at IS NOT NULL;
  CREATE INDEX sandboxes_template ON sandboxes (template_id) WHERE status <> 'deleted';

  CREATE TABLE kv (key text COLLATE "C" PRIMARY KEY, value text NOT NULL);

  CREATE TABLE builds (
    id text COLLATE "C" PRIMARY KEY,
    org_id text COLLATE "C" NOT NULL,
    template_id text COLLATE "C" NOT NULL,
    alias text NOT NULL,
    status text NOT NULL,
    progress integer NOT NULL DEFAULT 0,
    current_step text,
    request jsonb NOT NULL,
    error_message text,
    created_at text COLLATE "C" NOT NULL,
    started_at text COLLATE "C",
    completed_at text COLLATE "C"
  );
  CREATE INDEX builds_org_created ON builds (org_id, created_at);
  CREATE INDEX builds_template ON builds (template_id, created_at);
  CREATE INDEX builds_building ON builds (org_id) WHERE status = 'building';

  CREATE TABLE uploads (
    org_id text COLLATE "C" NOT NULL,
    file_id text COLLATE "C" NOT NULL,
    path text COLLATE "C" NOT NULL,
    sha256 text NOT NULL,
    size bigint NOT NULL,
    kind text NOT NULL,
    created_at text COLLATE "C" NOT NULL,
    PRIMARY KEY (org_id, file_id, path)
  );
  CREATE INDEX uploads_org_path ON uploads (org_id, path, created_at);

  CREATE TABLE previews (
    sandbox_id text COLLATE "C" NOT NULL,
    port integer NOT NULL,
    public boolean NOT NULL DEFAULT false,
    gateway_port integer,
    created_at text COLLATE "C" NOT NULL,
    PRIMARY KEY (sandbox_id, port)
  );
  CREATE INDEX previews_gateway_port ON previews (gateway_port) WHERE gateway_port IS NOT NULL;

  CREATE TABLE snapshots (
    id text COLLATE "C" PRIMARY KEY,
    org_id text COLLATE "C" NOT NULL,
    name text,
    sandbox_id text COLLATE "C" NOT NULL,
    parent_id text,
    template_id text NOT NULL,
    template_name text NOT NULL,
    layers jsonb NOT NULL,
    vcpu integer NOT NULL,
    memory_mb integer NOT NULL,
    disk_gb integer NOT NULL,
    template_env jsonb NOT NULL,
    env_vars jsonb NOT NULL,
    internet_access boolean NOT NULL,
    egress jsonb,
    size_bytes bigint NOT NULL,
    created_at text COLLATE "C" NOT NULL
  );
  CREATE INDEX snapshots_org ON snapshots (org_id, created_at DESC, id DESC);

  -- What each organization holds, kept by a trigger as its sandbox rows change (admission reads
  -- one row). One upsert per change: concurrent writers of one organization serialize on its row.
  CREATE TABLE org_usage (
    org_id text COLLATE "C" PRIMARY KEY,
    active bigint NOT NULL DEFAULT 0,
    active_vcpu bigint NOT NULL DEFAULT 0,
    active_memory_mb bigint NOT NULL DEFAULT 0,
    stopped bigint NOT NULL DEFAULT 0,
    disk_gb bigint NOT NULL DEFAULT 0
  );
  CREATE FUNCTION org_usage_add(org text, status text, vcpu integer, memory_mb integer, disk_gb integer, sign integer)
  RETURNS void LANGUAGE sql AS $$
    INSERT INTO org_usage AS u (org_id, active, active_vcpu, active_memory_mb, stopped, disk_gb)
      SELECT org, sign * a, sign * a * vcpu, sign * a * memory_mb, sign * (CASE WHEN status = 'stopped' THEN 1 ELSE 0 END), sign * disk_gb
      FROM (SELECT CASE WHEN status IN ('creating', 'running', 'paused') THEN 1 ELSE 0 END AS a) AS held
      ON CONFLICT (org_id) DO UPDATE SET
        active = u.active + excluded.active,
        active_vcpu = u.active_vcpu + excluded.active_vcpu,
        active_memory_mb = u.active_memory_mb + excluded.active_memory_mb,
        stopped = u.stopped + excluded.stopped,
        disk_gb = u.disk_gb + excluded.disk_gb
  $$;
  CREATE FUNCTION sandboxes_usage() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
      IF OLD.status <> 'deleted' THEN
        PERFORM org_usage_add(OLD.org_id, OLD.status, OLD.vcpu, OLD.memory_mb, OLD.disk_gb, -1);
      END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
      IF NEW.status <> 'deleted' THEN
        PERFORM org_usage_add(NEW.org_id, NEW.status, NEW.vcpu, NEW.memory_mb, NEW.disk_gb, 1);
      END IF;
    END IF;
    RETURN NULL;
  END $$;
  CREATE TRIGGER sandboxes_usage_change AFTER INSERT OR DELETE OR UPDATE OF org_id, status, vcpu, memory_mb, disk_gb ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION sandboxes_usage();

  -- Previews go with their sandbox, whichever way it is deleted.
  CREATE FUNCTION previews_go_with_sandbox() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    DELETE FROM previews WHERE sandbox_id = OLD.id;
    RETURN NULL;
  END $$;
  CREATE TRIGGER previews_go_with_deleted_sandbox AFTER UPDATE OF status ON sandboxes
    FOR EACH ROW WHEN (NEW.status = 'deleted') EXECUTE FUNCTION previews_go_with_sandbox();
  CREATE TRIGGER previews_go_with_removed_sandbox AFTER DELETE ON sandboxes
    FOR EACH ROW EXECUTE FUNCTION previews_go_with_sandbox();
  `;
