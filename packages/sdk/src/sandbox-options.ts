import { ApiClient, type CallOptions } from './client.js';
import type { RunOptions } from './commands.js';
import type { ClientOptions } from './config.js';
import type { SnapshotRef } from './snapshot.js';
import type { CodeContext, VolumeInfo } from './types.js';

export const DEFAULT_TEMPLATE = 'code-interpreter';

export interface SandboxOptions extends ClientOptions {
  /** Reuse a configured client instead of `apiKey`/`baseUrl`. */
  client?: ApiClient;
}

export interface ConnectOptions extends SandboxOptions, CallOptions {
  /**
   * An agent token obtained elsewhere (e.g. handed over by a backend). It is used until it expires
   * or is refused, then refreshed with the API key like any other.
   */
  authToken?: string;
  /** Expiry of `authToken` (ISO 8601). */
  tokenExpiresAt?: string;
}

export interface CreateOptions extends SandboxOptions, CallOptions {
  /** Template name (default `code-interpreter`). */
  template?: string;
  /** Template id; wins over `template`. */
  templateId?: string;
  /**
   * Start from a snapshot (or its id) instead of a template: its filesystem, environment and
   * template settings. Not with `template` or `templateId`.
   */
  snapshot?: SnapshotRef;
  region?: string;
  /** Delete the sandbox this many seconds after creation (default: never). */
  timeoutSeconds?: number;
  /** Default true. */
  internetAccess?: boolean;
  /**
   * Egress rules: when given, only these may be reached (IPv4 addresses, CIDRs, domains,
   * `*.domain`; at most 1000). A domain is matched on the TLS SNI (port 443) and the HTTP Host
   * header (port 80), so it opens HTTP and HTTPS to that name only.
   */
  allowOut?: string[];
  /** Never reached, even when allowed (same entries as `allowOut`). */
  denyOut?: string[];
  envVars?: Record<string, string>;
  /** What the timeout does: `delete` (default) or `pause` (kept paused for the service's retention time, then deleted). */
  onTimeout?: 'delete' | 'pause';
  /** Pause after this long with no call to the sandbox and no request to it (default: never). */
  idleTimeoutSeconds?: number;
  /** A request to the sandbox while it is paused resumes it first (default false). */
  autoResume?: boolean;
  /**
   * Volumes of the organization to mount (`Volume.create`), each at an absolute path; shared with
   * every other sandbox that mounts them, kept after this one is deleted.
   */
  volumes?: VolumeMountOptions[];
}

/** A volume mounted at create: by name (or id, or a `VolumeInfo`), at `path`, read-write unless `readOnly`. */
export interface VolumeMountOptions {
  volume: string | VolumeInfo;
  path: string;
  readOnly?: boolean;
}

/** The settings a fork may change; those not given are the source's. */
export type ForkOptions = CallOptions &
  Pick<CreateOptions, 'timeoutSeconds' | 'internetAccess' | 'allowOut' | 'denyOut' | 'envVars' | 'onTimeout' | 'idleTimeoutSeconds' | 'autoResume'>;

export interface CreateSnapshotOptions extends CallOptions {
  /** 1 to 128 characters. */
  name?: string;
}

export interface ListOptions extends SandboxOptions {
  status?: string;
  template?: string;
  region?: string;
  /** Page size, 1..1000 (default 100). */
  limit?: number;
  /** Stop after this many sandboxes. */
  maxItems?: number;
  signal?: AbortSignal;
}

export interface RunCodeOptions extends RunOptions {
  /** `python` (default), `javascript`, `bash`, `go` and their aliases. */
  language?: string;
  /** Use `/execute/rich` to get `richOutputs` (figures saved as files). */
  rich?: boolean;
  /** Opt in to the agent's result cache (runs in a fresh process). */
  cache?: boolean;
  /**
   * The code context to run in (its id, or the context itself). Without it Python runs in the
   * sandbox's default context, where state lives between calls.
   */
  context?: string | CodeContext;
  /** A fresh process that keeps no state (not with `context`). */
  isolated?: boolean;
}

export interface CreateCodeContextOptions extends CallOptions {
  /** `python` (the default; the only language with contexts for now). */
  language?: string;
  /** Its kernel's working directory (relative to /workspace). */
  cwd?: string;
  /** Variables for this context only, over the sandbox's env. */
  env?: Record<string, string>;
}

export function clientOf(options: SandboxOptions | undefined): ApiClient {
  return options?.client ?? new ApiClient(options);
}
