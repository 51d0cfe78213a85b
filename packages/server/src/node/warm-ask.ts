import { ServiceError } from '@sandboxd/protocol';
import { normalizeEntries } from '../runtime/egress-policy.js';
import type { LayerRef, SandboxSpec } from '../runtime/types.js';
import { parseLayerRefs } from '../images/layer-fetch.js';

/**
 * Control asks for the answer of an ask in stages: the headers at once, a space every second while
 * the node works, then `{status, body}`; so a node that hangs is told from one that boots.
 */
export const STAGES_HEADER = 'x-sandboxd-stages';

/** An ask of `POST /node/v1/warm`, its fields checked one by one. */
export interface ParsedWarmAsk {
  /** Without identity (id and hostname empty, no SANDBOX_ID): the node gives them. */
  spec: SandboxSpec;
  /** By reference (a node with a layers directory of its own), or this machine's paths (tests of one machine). */
  layers: { refs: LayerRef[] } | { paths: string[] };
  poolId: string;
  label: string;
  /** The create's env_vars, set on the sandbox's agent before it is handed out. */
  agentEnv?: Record<string, string>;
  /** The create's egress policy, set before it is handed out. */
  egress?: SandboxSpec['egress'];
}

const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,255}$/;
const MAX_ENV = 256;
const MAX_ENV_BYTES = 256 * 1024;
/**
 * The create's env_vars as the API takes them (any name without '=' or NUL, as many as fit): what
 * the node's body carries (node-api.ts), more than the public API's body (10 MiB) can hold.
 */
const AGENT_ENV_NAME_RE = /^[^=\0]+$/;
/** A pool id is a template id, `snap:<id>` or `fork:<layer>`: printable, no spaces, bounded. */
const POOL_ID_RE = /^[\x21-\x7e]{1,200}$/;
const SPEC_FIELDS = new Set(['layers', 'lowerDirs', 'layerIds', 'resources', 'internetAccess', 'egress', 'env']);

const bad = (why: string) => new ServiceError('VALIDATION_ERROR', `warm ask: ${why}`);
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Control's ask for a ready sandbox, read as an attacker's would be: only control signs for this
 * node, but a shape the runtime does not expect must not reach it. The spec names no id, hostname
 * or SANDBOX_ID (the node picks the id of what it boots ahead); unknown fields are refused.
 * `byReference`: this node takes layers by reference only (a spec naming paths is refused).
 */
export function parseWarmAsk(body: unknown, byReference: boolean): ParsedWarmAsk {
  if (!isObject(body)) throw bad('the body must be an object');
  for (const k of Object.keys(body)) if (!['spec', 'pool_id', 'label', 'agent_env', 'egress'].includes(k)) throw bad(`unknown field ${JSON.stringify(k.slice(0, 40))}`);
  const { pool_id: poolId, label, spec: raw } = body;
  const agentEnv = body.agent_env === undefined ? undefined : parseAgentEnv(body.agent_env);
  const askEgress = body.egress === undefined ? undefined : parseEgress(body.egress, 'egress');
  if (typeof poolId !== 'string' || !POOL_ID_RE.test(poolId)) throw bad('pool_id must be 1 to 200 printable characters');
  if (typeof label !== 'string' || label.length > 200) throw bad('label must be a string of at most 200 characters');
  if (!isObject(raw)) throw bad('spec must be an object');
  for (const k of Object.keys(raw)) if (!SPEC_FIELDS.has(k)) throw bad(`spec: unknown or refused field ${JSON.stringify(k.slice(0, 40))} (the node gives ids and hostnames)`);

  let layers: ParsedWarmAsk['layers'];
  let layerIds: string[];
  if (byReference) {
    // Paths of control's machine mean nothing here, and must not name this one's files.
    if (raw.lowerDirs !== undefined || raw.layerIds !== undefined) throw bad('this node takes layers by reference (layers), not by path (lowerDirs)');
    const refs = parseLayerRefs(raw.layers);
    layers = { refs };
    layerIds = refs.map((r) => r.id);
  } else {
    if (raw.layers !== undefined) throw bad('this node takes layers by path (lowerDirs)');
    const paths = raw.lowerDirs;
    const ids = raw.layerIds;
    if (!Array.isArray(paths) || paths.length > 128 || !paths.every((p) => typeof p === 'string' && p.startsWith('/') && p.length <= 4096)) throw bad('lowerDirs must be a list of absolute paths');
    if (!Array.isArray(ids) || ids.length !== paths.length || !ids.every((i) => typeof i === 'string' && /^[0-9a-z:_-]{1,128}$/.test(i))) throw bad('layerIds must name each of lowerDirs');
    layers = { paths: paths as string[] };
    layerIds = ids as string[];
  }

  const r = raw.resources;
  if (!isObject(r)) throw bad('spec.resources must be an object');
  for (const k of Object.keys(r)) if (!['vcpu', 'memoryMb', 'diskGb', 'pidsMax'].includes(k)) throw bad(`spec.resources: unknown field ${JSON.stringify(k.slice(0, 40))}`);
  const num = (v: unknown, min: number, max: number, integer: boolean) => typeof v === 'number' && Number.isFinite(v) && v >= min && v <= max && (!integer || Number.isInteger(v));
  if (!num(r.vcpu, 0.01, 1024, false)) throw bad('spec.resources.vcpu must be a number from 0.01 to 1024');
  if (!num(r.memoryMb, 16, 16 * 1024 * 1024, true)) throw bad('spec.resources.memoryMb must be an integer from 16');
  if (!num(r.diskGb, 0.001, 1_000_000, false)) throw bad('spec.resources.diskGb must be a positive number');
  if (!num(r.pidsMax, 8, 4_194_304, true)) throw bad('spec.resources.pidsMax must be an integer from 8');

  if (typeof raw.internetAccess !== 'boolean') throw bad('spec.internetAccess must be a boolean');
  const egress = raw.egress === undefined ? undefined : parseEgress(raw.egress, 'spec.egress');

  const env = raw.env;
  if (!isObject(env)) throw bad('spec.env must be an object of strings');
  const entries = Object.entries(env);
  if (entries.length > MAX_ENV) throw bad(`spec.env: at most ${MAX_ENV} variables`);
  let bytes = 0;
  for (const [k, v] of entries) {
    if (!ENV_NAME_RE.test(k)) throw bad(`spec.env: bad variable name ${JSON.stringify(k.slice(0, 40))}`);
    if (k === 'SANDBOX_ID') throw bad('spec.env: SANDBOX_ID is the node\'s to give');
    if (typeof v !== 'string' || v.includes('\0')) throw bad(`spec.env.${k} must be a string without NUL`);
    bytes += k.length + v.length;
  }
  if (bytes > MAX_ENV_BYTES) throw bad(`spec.env: at most ${MAX_ENV_BYTES} bytes`);

  const spec: SandboxSpec = {
    id: '',
    hostname: '',
    lowerDirs: [],
    layerIds,
    resources: { vcpu: r.vcpu as number, memoryMb: r.memoryMb as number, diskGb: r.diskGb as number, pidsMax: r.pidsMax as number },
    internetAccess: raw.internetAccess,
    ...(egress ? { egress } : {}),
    env: Object.fromEntries(entries) as Record<string, string>,
  };
  return { spec, layers, poolId, label, ...(agentEnv ? { agentEnv } : {}), ...(askEgress ? { egress: askEgress } : {}) };
}

/** An egress policy ({internet, allow, deny}), its entries normalized as the API's are. */
function parseEgress(e: unknown, field: string): NonNullable<SandboxSpec['egress']> {
  const strings = (v: unknown): v is string[] => Array.isArray(v) && v.length <= 1000 && v.every((x) => typeof x === 'string');
  if (!isObject(e) || typeof e.internet !== 'boolean' || !strings(e.allow) || !strings(e.deny) || Object.keys(e).length !== 3) throw bad(`${field} must be an egress policy`);
  return { internet: e.internet, allow: normalizeEntries(e.allow, `${field}.allow`), deny: normalizeEntries(e.deny, `${field}.deny`) };
}

/** `agent_env`: what the agent's PUT /env takes, bounded. */
function parseAgentEnv(v: unknown): Record<string, string> {
  if (!isObject(v)) throw bad('agent_env must be an object of strings');
  const entries = Object.entries(v);
  for (const [k, val] of entries) {
    if (!AGENT_ENV_NAME_RE.test(k)) throw bad(`agent_env: bad variable name ${JSON.stringify(k.slice(0, 40))}`);
    if (typeof val !== 'string' || val.includes('\0')) throw bad(`agent_env: the value of ${JSON.stringify(k.slice(0, 40))} must be a string without NUL`);
  }
  return Object.fromEntries(entries) as Record<string, string>;
}
