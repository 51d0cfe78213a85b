import { DEFAULT_EGRESS, isRestricted, normalizeEntries } from '../../runtime/egress-policy.js';
import type { SandboxSpec } from '../../runtime/types.js';
import { withSandboxId } from '../../runtime/sandbox-identity.js';
import type { SandboxRow } from '../../store/types/index.js';

/** What a create starts from: a template, a snapshot, or a fork's source. */
export interface CreateSource {
  templateId: string;
  templateName: string;
  vcpu: number;
  memoryMb: number;
  diskGb: number;
  layers: string[];
  templateEnv: Record<string, string>;
  /** The env set the sandbox starts with (below the create's env_vars). */
  envVars: Record<string, string>;
  snapshotId: string | null;
  lineage: string[];
  /** The warm pool's name for what it boots: the template id, `snap:<id>`, `fork:<layer>`. */
  poolId: string;
  /** A fork's: the source's egress policy, when the fork names none. */
  egress?: SandboxRow['egress'];
}

export const AGENT_MALLOC_TUNABLES = 'glibc.malloc.mmap_threshold=65536:glibc.malloc.trim_threshold=262144';
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

function pidsFor(vcpu: number): number {
  return Math.max(512, 256 * vcpu);
}

/**
 * Variables that make a program's start load code (the dynamic loader's LD_*, GCONV_PATH; Node's
 * NODE_OPTIONS with --require/--import/--inspect, and the other NODE_*; OPENSSL_CONF and
 * OPENSSL_MODULES, which load provider libraries): a template's go to its programs through the
 * agent (SANDBOXD_LOADER_ENV), never into the agent's own start, so that nothing of the image is
 * loaded into the agent (runtime/agent-runtime.ts).
 */
const LOADER_ENV_RE = /^(LD_|NODE_|OPENSSL_|GCONV_PATH$)/;

function splitLoaderEnv(env: Record<string, string>): { plain: Record<string, string>; loader: Record<string, string> } {
  const plain: Record<string, string> = {};
  const loader: Record<string, string> = {};
  for (const [k, v] of Object.entries(env)) (LOADER_ENV_RE.test(k) ? loader : plain)[k] = v;
  return { plain, loader };
}

export type SpecSource = Pick<SandboxRow, 'layers' | 'vcpu' | 'memoryMb' | 'diskGb' | 'internetAccess' | 'templateEnv' | 'envVars' | 'egress' | 'volumes'>;

/** The policy a create or `PUT /network` asks for, validated; null when it is the default. */
export function egressFrom(body: { internet_access?: boolean; allow_out?: string[]; deny_out?: string[] }): SandboxRow['egress'] {
  const policy = { internet: body.internet_access ?? true, allow: normalizeEntries(body.allow_out, 'allow_out'), deny: normalizeEntries(body.deny_out, 'deny_out') };
  return isRestricted(policy) ? policy : null;
}

/** The spec of sandbox `id` (empty: the node gives it) of a row or a create's source, its layers at `layerPath`. */
export function specFor(id: string, src: SpecSource, layerPath: (id: string) => string): SandboxSpec {
  const templateEnv = splitLoaderEnv(src.templateEnv);
  return withSandboxId(
    {
      id: '',
      lowerDirs: src.layers.map(layerPath),
      layerIds: [...src.layers],
      resources: { vcpu: src.vcpu, memoryMb: src.memoryMb, diskGb: src.diskGb, pidsMax: pidsFor(src.vcpu) },
      internetAccess: src.internetAccess,
      egress: src.egress ?? DEFAULT_EGRESS,
      hostname: '',
      // Its volumes, by id (runtime/volumes.ts): bound in, shared, never copied.
      ...(src.volumes?.length ? { volumes: src.volumes.map((v) => ({ id: v.id, path: v.path, readOnly: v.readOnly })) } : {}),
      env: {
        PATH: DEFAULT_PATH,
        HOME: '/root',
        LANG: 'C.UTF-8',
        TERM: 'xterm-256color',
        ...templateEnv.plain,
        SANDBOXD_LOADER_ENV: JSON.stringify(templateEnv.loader),
        // The agent streams big files in 64 KiB buffers: allocated with mmap they go back to the
        // system when freed, instead of staying in glibc's heap after a transfer.
        GLIBC_TUNABLES: AGENT_MALLOC_TUNABLES,
        SANDBOXD_ENV_VARS: JSON.stringify(src.envVars),
        // The agent reports its limits in /metrics (it cannot read its cgroup: /sys/fs/cgroup is masked).
        SANDBOXD_LIMITS: JSON.stringify({ vcpu: src.vcpu, memory_mb: src.memoryMb, disk_mb: src.diskGb * 1024 }),
      },
    },
    id,
  );
}

/** The spec of what a create asks a node for: no identity (the node gives it), booted open (the create's policy is set on it as it is handed out). */
export function bootSpec(src: SpecSource, layerPath: (id: string) => string): SandboxSpec {
  const { id: _id, hostname: _hostname, env, ...rest } = specFor('', { ...src, envVars: {}, egress: null }, layerPath);
  const { SANDBOX_ID: _sandboxId, ...own } = env;
  return { ...rest, id: '', hostname: '', env: own };
}
