export type TemplateStatus = 'building' | 'active' | 'failed';

export interface TemplateRow {
  id: string;
  /** null for built-in (public) templates. */
  orgId: string | null;
  name: string;
  displayName: string;
  description: string;
  category: string;
  language: string;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  status: TemplateStatus;
  isPublic: boolean;
  buildId: string | null;
  features: string[];
  tags: string[];
  /** Layer ids, top-most first. */
  layers: string[];
  env: Record<string, string>;
  workdir: string | null;
  errorMessage: string | null;
  /** A built-in template being built: percent done, and when it should be ready (null otherwise). */
  buildProgress?: number | null;
  buildEtaAt?: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface TemplateRepo {
  upsert(row: TemplateRow): Promise<void>;
  byId(id: string): Promise<TemplateRow | undefined>;
  /** A name visible to `orgId`: the org's own first, then a built-in. */
  byName(name: string, orgId: string): Promise<TemplateRow | undefined>;
  list(orgId: string): Promise<TemplateRow[]>;
  remove(id: string): Promise<void>;
}

export type BuildStatus = 'building' | 'active' | 'failed';

export interface BuildRow {
  id: string;
  orgId: string;
  templateId: string;
  alias: string;
  status: BuildStatus;
  progress: number;
  currentStep: string | null;
  /** The normalized build request (JSON). */
  request: unknown;
  errorMessage: string | null;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
  /**
   * Replicas: when the process running it last said it still does (absent or null on one machine,
   * where a restart is the only way a build stops running unfinished).
   */
  heartbeatAt?: string | null;
}

export interface BuildRepo {
  insert(row: BuildRow): Promise<void>;
  byId(id: string): Promise<BuildRow | undefined>;
  latestForTemplate(templateId: string): Promise<BuildRow | undefined>;
  update(id: string, patch: Partial<Omit<BuildRow, 'id'>>): Promise<void>;
  countSince(orgId: string, since: string): Promise<number>;
  /** Builds left 'building' by a previous process. */
  unfinished(): Promise<BuildRow[]>;
  /** The organization's builds still running. */
  running(orgId: string): Promise<BuildRow[]>;
}

/**
 * Each build's log, as bytes appended in order by the one process that runs the build, read from
 * any byte offset by every process that shares the store.
 */
export interface BuildLogRepo {
  /** Appends `data` at the end of the build's log; returns the log's length after it. */
  append(buildId: string, data: Uint8Array): Promise<number>;
  /** At most `maxBytes` of the log from `offset` on (none past the end), and the log's length now. */
  read(buildId: string, offset: number, maxBytes: number): Promise<{ data: Buffer; size: number }>;
}
