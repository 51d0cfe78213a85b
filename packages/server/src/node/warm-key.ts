import { createHash } from 'node:crypto';
import { ServiceError } from '@sandboxd/protocol';
import type { SandboxSpec } from '../runtime/types.js';

export interface WarmKey {
  /** Identity of what the sandbox boots (template id, layers, resources, env, network). */
  key: string;
  /** The same without the network setting: another generation of a template is a rebuilt one. */
  generation: string;
  templateId: string;
  /** For logs: the template's name and network setting. */
  label: string;
}

const hash = (v: unknown) => createHash('sha256').update(JSON.stringify(v)).digest('hex').slice(0, 24);

/**
 * The key of a spec: its layers by id (not by the paths of one machine or another: control and a
 * node agree on it), resources, env without SANDBOX_ID, and network setting.
 */
export function warmKeyOf(spec: SandboxSpec & { layerRefs?: unknown }, templateId: string, label = templateId): WarmKey {
  const { env, id: _id, hostname: _hostname, internetAccess, egress: _egress, lowerDirs: _paths, layerRefs: _refs, layerIds, ...rest } = spec;
  const generation = hash({ ...rest, layerIds: [...(layerIds ?? [])], env: Object.fromEntries(Object.entries(env).filter(([k]) => k !== 'SANDBOX_ID').sort()) });
  return { key: hash({ generation, internetAccess }), generation, templateId, label: `${label} (${internetAccess ? 'internet' : 'no network'})` };
}

/** The error of a create whose client went away while it waited for its sandbox. */
export function abandonedCreate(): ServiceError {
  return new ServiceError('INVALID_STATE', 'the create was abandoned: its client went away while it waited for a sandbox; nothing was created');
}
