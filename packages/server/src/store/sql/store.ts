import type { SqlDb } from './db.js';
import { SqlApiKeyRepo, sqlKv, SqlOrgRepo, sqlRates } from './accounts.js';
import { SqlBlobRepo, SqlBuildLogRepo } from './files.js';
import { SqlNodeRepo } from './nodes.js';
import { SqlReplicaRepo } from './replicas.js';
import { SqlVolumeRepo } from './volumes.js';
import { migrationsFor } from '../migrations.js';
import { SqlPreviewRepo, SqlSandboxRepo } from './sandboxes.js';
import { SqlBuildRepo, SqlSnapshotRepo, SqlTemplateRepo, SqlUploadRepo } from './templates.js';
import type { VolumeRepo, BlobRepo, BuildLogRepo, BuildRepo, NodeRepo, OrgRepo, PreviewRepo, ReplicaRepo, SandboxRepo, SnapshotRepo, Store, StoreSchema, TemplateRepo, UploadRepo, ApiKeyRepo } from '../types/index.js';

/** The repositories of a Store on either database; SqliteStore and PostgresStore add how to open and close one. */
export abstract class SqlStore implements Store {
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
  readonly volumes: VolumeRepo;
  readonly nodes: NodeRepo;
  readonly replicas: ReplicaRepo;
  readonly kv: Store['kv'];
  readonly rates: Store['rates'];

  constructor(db: SqlDb) {
    this.orgs = new SqlOrgRepo(db);
    this.keys = new SqlApiKeyRepo(db);
    this.templates = new SqlTemplateRepo(db);
    this.sandboxes = new SqlSandboxRepo(db);
    this.builds = new SqlBuildRepo(db);
    this.uploads = new SqlUploadRepo(db);
    this.blobs = new SqlBlobRepo(db);
    this.buildLogs = new SqlBuildLogRepo(db);
    this.previews = new SqlPreviewRepo(db);
    this.snapshots = new SqlSnapshotRepo(db);
    this.volumes = new SqlVolumeRepo(db);
    this.nodes = new SqlNodeRepo(db);
    this.replicas = new SqlReplicaRepo(db);
    this.schema = async () => {
      const r = await db.get(db.dialect.schemaVersion);
      return { dialect: db.dialect.name, version: Number(r?.version ?? 0), latest: migrationsFor(db.dialect.name).length };
    };
    this.kv = sqlKv(db);
    this.rates = sqlRates(db);
  }

  readonly schema: () => Promise<StoreSchema>;

  abstract close(): void;
}
