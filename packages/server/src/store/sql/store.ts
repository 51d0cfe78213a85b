import type { SqlDb } from './db.js';
import { SqlApiKeyRepo, sqlKv, SqlOrgRepo, sqlRates } from './accounts.js';
import { SqlBlobRepo, SqlBuildLogRepo } from './files.js';
import { SqlNodeRepo } from './nodes.js';
import { SqlPreviewRepo, SqlSandboxRepo } from './sandboxes.js';
import { SqlBuildRepo, SqlSnapshotRepo, SqlTemplateRepo, SqlUploadRepo } from './templates.js';
import type { BlobRepo, BuildLogRepo, BuildRepo, NodeRepo, OrgRepo, PreviewRepo, SandboxRepo, SnapshotRepo, Store, TemplateRepo, UploadRepo, ApiKeyRepo } from '../types.js';

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
  readonly nodes: NodeRepo;
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
    this.nodes = new SqlNodeRepo(db);
    this.kv = sqlKv(db);
    this.rates = sqlRates(db);
  }

  abstract close(): void;
}
